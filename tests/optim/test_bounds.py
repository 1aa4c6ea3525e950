"""The projected quasi-Newton method (bounds, with or without an L1 term), pure, without a
cluster: scipy's L-BFGS-B and NNLS and scikit-learn's positive Lasso are the references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, nnls, rosen, rosen_der
from sklearn.linear_model import Lasso

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LeastSquares, Logistic
from dasklbfgs.optim import LBFGSOptions, Status, lbfgs_minimize, owlqn_minimize
from dasklbfgs.optim.constraints import Constraints

TIGHT = LBFGSOptions(gtol=1e-10, ftol=1e-16, maxiter=2000)
RNG = np.random.default_rng(5)
X = RNG.normal(size=(300, 6))
Y = X @ np.array([1.5, -2.0, 0.5, -0.1, 0.0, 3.0]) + 0.3 * RNG.normal(size=300)


def _rosen(x):
    return rosen(x), rosen_der(x)


def test_a_bounded_rosenbrock_is_l_bfgs_bs_and_stays_in_the_box() -> None:
    lower, upper = np.array([-1.0, 1.5, -np.inf, 0.2]), np.array([0.5, 3.0, 0.8, np.inf])
    seen = []
    result, _ = owlqn_minimize(_rosen, np.array([5.0, -3.0, 0.0, 0.0]), None, TIGHT, lower=lower, upper=upper,
                               callback=lambda r: seen.append(r.x.copy()))
    reference = minimize(rosen, np.clip([5.0, -3.0, 0.0, 0.0], lower, upper), jac=rosen_der, method="L-BFGS-B",
                         bounds=list(zip(lower, upper)), options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 5000})
    assert result.success and result.status == Status.CONVERGED
    np.testing.assert_allclose(result.x, reference.x, atol=1e-7)
    assert result.x[0] == 0.5 and result.x[1] == 1.5  # on their bounds exactly
    assert max(abs(result.jac)) <= 1e-5 < 1 < max(abs(rosen_der(result.x)))  # the projected gradient vanishes
    assert all(np.all((lower <= x) & (x <= upper)) for x in seen)  # every iterate in the box


def test_non_negative_least_squares_is_nnls() -> None:
    model = LeastSquares(6, fit_intercept=False, lower_bounds=0.0)
    lower, upper = model.bounds()
    result, _ = owlqn_minimize(lambda w: model.objective(w, X, Y), np.zeros(6), None, TIGHT, lower=lower,
                               upper=upper)
    expected, _ = nnls(X, Y)
    np.testing.assert_allclose(result.x, expected, atol=1e-8)
    assert result.success and np.count_nonzero(result.x == 0.0) == np.count_nonzero(expected == 0.0) >= 1


def test_bounds_with_l1_are_a_positive_lasso() -> None:
    model = LeastSquares(6, l1=0.05, lower_bounds=0.0)
    lower, upper = model.bounds()
    result, _ = owlqn_minimize(lambda w: model.objective(w, X, Y), np.zeros(7), model.l1_weights(), TIGHT,
                               lower=lower, upper=upper)
    reference = Lasso(alpha=0.05, positive=True, tol=1e-14, max_iter=100_000).fit(X, Y)
    np.testing.assert_allclose(result.x[:6], reference.coef_, atol=1e-7)
    assert result.x[6] == pytest.approx(reference.intercept_, abs=1e-7)
    assert np.all(result.x[:6] >= 0) and np.array_equal(result.x[:6] == 0, reference.coef_ == 0)


def test_per_feature_bounds_on_a_logistic_model_leave_the_intercept_free() -> None:
    y = (X @ np.array([2.0, -1.0, 0.0, 0.0, 0.5, 1.0]) + 1.5 > 0).astype(float)
    model = Logistic(6, l2=1e-2, lower_bounds=[-0.5] * 6, upper_bounds=[0.5, 0.5, 0.5, 0.5, 0.1, 0.5])
    lower, upper = model.bounds()
    assert lower[6] == -np.inf and upper[6] == np.inf
    result, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(7), None, TIGHT, lower=lower, upper=upper)
    reference = minimize(lambda w: model.objective(w, X, y), np.zeros(7), jac=True, method="L-BFGS-B",
                         bounds=list(zip(lower, upper)), options={"gtol": 1e-12, "ftol": 1e-16})
    np.testing.assert_allclose(result.x, reference.x, atol=1e-7)
    assert result.x[4] == 0.1 and result.x[0] == 0.5 and result.x[6] > 0.5  # on bounds; the intercept is not


def test_no_bound_and_no_l1_is_lbfgs_bit_for_bit() -> None:
    x0 = np.array([-1.2, 1.0, 0.5])
    plain, _ = lbfgs_minimize(_rosen, x0, TIGHT)
    unbounded, _ = owlqn_minimize(_rosen, x0, None, TIGHT, lower=-np.inf, upper=[np.inf] * 3)
    np.testing.assert_array_equal(unbounded.x, plain.x)
    assert unbounded.nit == plain.nit


def test_the_projected_gradient_rules() -> None:
    box = Constraints(lower=np.array([0.0, 0.0, -1.0]), upper=np.array([1.0, 1.0, 1.0]))
    x, g = np.array([0.0, 0.0, 1.0]), np.array([2.0, -2.0, -3.0])
    np.testing.assert_array_equal(box.pseudo_gradient(x, g), [0.0, -2.0, 0.0])  # blocked where -g leaves the box
    p = np.array([-1.0, 1.0, 1.0])
    box.align(x, p, box.pseudo_gradient(x, g))
    np.testing.assert_array_equal(p, [0.0, 1.0, 0.0])
    trial = np.array([-0.5, 2.0, 0.3])
    box.project_trial(trial, None)
    np.testing.assert_array_equal(trial, [0.0, 1.0, 0.3])


@pytest.mark.parametrize(("lower", "upper", "match"), [
    ([0.0, 2.0, 0.0], 1.0, r"the bounds exclude every point: lower\[1\] = 2 > upper\[1\] = 1"),
    ([0.0, np.nan, 0.0], None, r"lower holds NaN at coordinate 1"),
    ([0.0, 1.0], None, r"lower must be a number or 3 numbers \(one per coordinate\), got shape \(2,\)"),
    (np.inf, None, "a lower bound of inf or an upper bound of -inf excludes every point"),
])
def test_bounds_that_exclude_every_point_are_refused(lower, upper, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        owlqn_minimize(_rosen, np.zeros(3), None, TIGHT, lower=lower, upper=upper)


def test_a_model_refuses_bounds_that_exclude_every_point() -> None:
    with pytest.raises(ConfigurationError, match=r"lower\[2\] = 1 > upper\[2\] = 0 \(lower_bounds and upper_bounds, "
                                                 r"by feature\)"):
        LeastSquares(3, lower_bounds=[0.0, 0.0, 1.0], upper_bounds=0.0)
    with pytest.raises(ConfigurationError, match=r"upper_bounds must be a number or 3 numbers \(one per feature\)"):
        LeastSquares(3, upper_bounds=[1.0, 2.0])
