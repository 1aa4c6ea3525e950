"""Newton's method in one process (dasklbfgs.optim.newton), against scipy, statsmodels and NIST."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der, rosen_hess

from dasklbfgs.errors import NonFiniteObjectiveError
from dasklbfgs.models.linear import LeastSquares, Logistic
from dasklbfgs.optim.lbfgs import MSG_GTOL, Status
from dasklbfgs.optim.newton import NewtonOptions, dependent_coordinates, newton_minimize, optimality
from dasklbfgs.optim.owlqn import constraints_of


def mean_objective(model, X, y):
    """``x -> (f, g, H)`` of ``model``'s mean objective on the rows ``X, y``."""
    n = len(y)

    def evaluate(x):
        loss, sums = model.loss_grad_sum(x, X, y)
        f, g = model.objective_from_sums(x, loss, sums, n)
        H = model.hessian_sum(x, X, y) / n
        H[np.diag_indices_from(H)] += model.penalty_curvature()
        return f, g, H

    return evaluate


@pytest.fixture(scope="module")
def binary():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2000, 10))
    y = (X @ rng.normal(size=10) + rng.logistic(size=2000) > 0).astype(float)
    return X, y


def test_logistic_regression_reaches_statsmodels_optimum_in_a_few_iterations(binary) -> None:
    import statsmodels.api as sm

    X, y = binary
    model = Logistic(10)
    result, state = newton_minimize(mean_objective(model, X, y), np.zeros(11), NewtonOptions(gtol=1e-10))
    reference = sm.GLM(y, sm.add_constant(X, prepend=False), family=sm.families.Binomial()).fit(tol=1e-13)
    assert result.status == Status.CONVERGED and result.message == MSG_GTOL
    assert result.nit <= 8 and result.nfev == result.nit + 1  # every step taken whole
    np.testing.assert_allclose(result.x, reference.params, rtol=1e-9, atol=1e-12)
    assert result.history[-1]["gnorm"] <= 1e-10
    np.testing.assert_array_equal(state.H, mean_objective(model, X, y)(result.x)[2])  # the Hessian at x


def test_l1_and_bounds_take_the_proximal_step_to_scipys_optimum_of_the_split_problem(binary) -> None:
    """min f(x) + l1 |x| over a box is min f(u - v) + l1 (u + v) over u, v >= 0 (and the box):
    scipy's L-BFGS-B solves that exactly formulated problem."""
    X, y = binary
    l1, lower = 0.05, -0.3
    model = Logistic(10, l1=l1)
    evaluate = mean_objective(Logistic(10), X, y)
    constraints = constraints_of(model.l1_weights(), 11, lower=np.r_[np.full(10, lower), -np.inf])
    result, _ = newton_minimize(evaluate, np.zeros(11), NewtonOptions(gtol=1e-10), constraints=constraints)

    def split(uv):
        u, v = uv[:11], uv[11:]
        f, g, _ = evaluate(u - v)
        weights = np.r_[np.full(10, l1), 0.0]
        return f + weights @ (u + v), np.r_[g + weights, -g + weights]

    # coefficients: u - v >= lower holds at the optimum once v <= -lower (u, v never both positive there)
    bounds = [(0, None)] * 11 + [(0, -lower)] * 10 + [(0, None)]
    reference = minimize(split, np.zeros(22), jac=True, method="L-BFGS-B", bounds=bounds,
                         options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000})
    expected = reference.x[:11] - reference.x[11:]
    assert result.success and result.nit <= 8
    np.testing.assert_allclose(result.x, expected, atol=1e-7)
    assert np.sum(result.x[:10] == 0) >= 2 and np.sum(result.x[:10] == lower) >= 2  # some at 0, some on the bound
    assert result.fun == pytest.approx(reference.fun, rel=1e-12)


def test_nists_longley_certified_values_to_the_digits_statsmodels_gets() -> None:
    """Longley (NIST StRD, higher difficulty): the normal equations square a condition number
    of 4e4 (unit columns), yet the Newton steps refine the solve on the exactly recomputed
    gradient to 11 or more correct digits in every coefficient under each OpenBLAS kernel tried
    (11.1 the fewest; statsmodels' pinv: 12.1); asserted with half a digit of margin for others."""
    import statsmodels.api as sm

    data = sm.datasets.longley.load_pandas()
    X, y = data.exog.to_numpy(float), data.endog.to_numpy(float)
    certified = np.array([15.0618722713733, -0.358191792925910e-01, -2.02022980381683, -1.03322686717359,
                          -0.511041056535807e-01, 1829.15146461355, -3482258.63459582])
    result, _ = newton_minimize(mean_objective(LeastSquares(6), X, y), np.zeros(7), NewtonOptions(gtol=0.0))
    assert result.success and result.nfev <= 8
    digits = -np.log10(np.abs(result.x - certified) / np.abs(certified))
    assert digits.min() >= 10.5, digits


def test_an_indefinite_hessian_is_damped_to_rosenbrocks_minimum() -> None:
    """From (-1.2, 1) Rosenbrock's Hessian is indefinite along the way: the damped steps and the
    line search still reach (1, 1) as scipy's Newton-CG does."""
    result, _ = newton_minimize(lambda x: (rosen(x), rosen_der(x), rosen_hess(x)), np.array([-1.2, 1.0]),
                                NewtonOptions(gtol=1e-10))
    reference = minimize(rosen, np.array([-1.2, 1.0]), jac=rosen_der, hess=rosen_hess, method="Newton-CG",
                         options={"xtol": 1e-12})
    assert result.success
    np.testing.assert_allclose(result.x, [1.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(result.x, reference.x, atol=1e-7)

    def saddle(x):  # indefinite everywhere near the start: x0^2 - x1^2 + x1^4 / 4
        return (x[0] ** 2 - x[1] ** 2 + x[1] ** 4 / 4, np.array([2 * x[0], -2 * x[1] + x[1] ** 3]),
                np.array([[2.0, 0.0], [0.0, -2.0 + 3 * x[1] ** 2]]))

    result, _ = newton_minimize(saddle, np.array([1.0, 0.1]), NewtonOptions(gtol=1e-10))
    assert result.success
    np.testing.assert_allclose(np.abs(result.x), [0.0, np.sqrt(2.0)], atol=1e-9)  # a minimum, not the saddle


def test_collinear_columns_take_the_least_squares_step_and_are_found() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 4))
    X = np.c_[X, X[:, 0] - 2 * X[:, 3], np.zeros(500)]  # a combination, and a column with no value
    y = X[:, :4] @ [1.0, -1.0, 0.5, 2.0] + rng.normal(size=500)
    model = LeastSquares(6)
    evaluate = mean_objective(model, X, y)
    result, _ = newton_minimize(evaluate, np.zeros(7), NewtonOptions(gtol=1e-10))
    design = np.c_[X, np.ones(500)]
    best = np.linalg.lstsq(design, y, rcond=None)[0]
    assert result.success
    assert result.fun == pytest.approx(model.objective(best, X, y)[0], rel=1e-12)
    assert result.x[5] == 0.0  # no row moves it
    assert set(dependent_coordinates(evaluate(result.x)[2])) & {0, 3, 4} and 5 in dependent_coordinates(
        evaluate(result.x)[2])
    assert len(dependent_coordinates(evaluate(result.x)[2])) == 2
    assert dependent_coordinates(mean_objective(LeastSquares(4), X[:, :4], y)(np.zeros(5))[2]).size == 0


def test_a_step_out_of_the_domain_is_a_step_too_long() -> None:
    """``f = x - log x`` (minimum at 1) is infinite for x <= 0, where the first step from 3 lands."""
    def f(x):
        if x[0] <= 0:
            return np.inf, np.array([np.nan]), np.array([[np.nan]])
        return x[0] - np.log(x[0]), np.array([1 - 1 / x[0]]), np.array([[1 / x[0] ** 2]])

    result, _ = newton_minimize(f, np.array([3.0]), NewtonOptions(gtol=1e-12))
    assert result.success and result.x[0] == pytest.approx(1.0, abs=1e-12)
    assert result.nfev > result.nit + 1  # some trials were refused
    with pytest.raises(NonFiniteObjectiveError, match="the objective at x0 is not finite"):
        newton_minimize(f, np.array([-1.0]))


def test_limits_end_the_run() -> None:
    result, _ = newton_minimize(lambda x: (rosen(x), rosen_der(x), rosen_hess(x)), np.array([-1.2, 1.0]),
                                NewtonOptions(maxiter=2))
    assert result.status == Status.LIMIT and result.nit == 2 and "ITERATIONS" in result.message


def test_constraints_that_never_bind_keep_newtons_digits() -> None:
    """A box no coefficient reaches, or a negligible l1 term, takes Newton's own step on the
    face coordinate descent finds: Longley's digits as without them, in a few passes."""
    import statsmodels.api as sm

    data = sm.datasets.longley.load_pandas()
    X, y = data.exog.to_numpy(float), data.endog.to_numpy(float)
    evaluate = mean_objective(LeastSquares(6), X, y)
    free, _ = newton_minimize(evaluate, np.zeros(7), NewtonOptions(gtol=0.0))
    for constraints in (constraints_of(None, 7, lower=np.r_[np.full(6, -1e9), -np.inf]), constraints_of(1e-12, 7)):
        result, _ = newton_minimize(evaluate, np.zeros(7), NewtonOptions(gtol=0.0), constraints=constraints)
        assert result.success and result.nfev <= 10  # (coordinate descent alone: 50 iterations, no digit)
        np.testing.assert_allclose(result.x, free.x, rtol=1e-8)


def test_constraints_with_an_indefinite_hessian_reach_a_minimum() -> None:
    """A double well from its concave middle: the constrained step is taken on the Hessian made
    positive definite, so it moves off the hump to x = 1 rather than calling the start converged."""
    def well(x):
        return -x[0] ** 2 / 2 + x[0] ** 4 / 4, np.array([-x[0] + x[0] ** 3]), np.array([[-1 + 3 * x[0] ** 2]])

    for constraints in (constraints_of(1e-3, 1), constraints_of(None, 1, lower=-5.0, upper=5.0)):
        result, _ = newton_minimize(well, np.array([0.1]), NewtonOptions(gtol=1e-10), constraints=constraints)
        assert result.success and result.x[0] == pytest.approx(1.0, abs=1e-3)
        assert optimality(result.x, result.jac, constraints) <= 1e-10


def test_a_large_constant_in_the_objective_does_not_end_the_run() -> None:
    """F = 1e12 + a pseudo-Huber term: its steps predict decreases far below 1e-10 of F yet F
    resolves them; the run backtracks down to where F no longer tells the iterate from the
    minimum (F's rounding at 1e12 is 1e-4), rather than stopping at x0 = 10 (F 0.45 above)."""
    def f(x):
        root = np.sqrt(1 + x[0] ** 2)
        return 1e12 + 0.05 * (root - 1), np.array([0.05 * x[0] / root]), np.array([[0.05 / root ** 3]])

    result, _ = newton_minimize(f, np.array([10.0]), NewtonOptions(gtol=1e-10))
    assert result.success and abs(result.x[0]) < 0.5
    assert 0.05 * (np.sqrt(1 + result.x[0] ** 2) - 1) <= 1e4 * np.finfo(float).eps * 1e12


def test_a_hessian_that_turns_non_finite_is_never_a_success() -> None:
    def f(x):
        H = np.array([[np.inf, np.nan], [np.nan, 2.0]]) if abs(x[0] - 1.0) < 0.6 else 2.0 * np.eye(2)
        return ((x[0] - 1) ** 2 + (x[1] - 2) ** 2 + 0.1 * x[0] ** 4,
                np.array([2 * (x[0] - 1) + 0.4 * x[0] ** 3, 2 * (x[1] - 2)]), H)

    result, _ = newton_minimize(f, np.zeros(2), NewtonOptions(gtol=1e-10, maxfun=60))
    assert not result.success and result.status in (Status.NON_FINITE, Status.LIMIT)
    assert np.all(np.isfinite(result.x))


def test_dependent_coordinates_of_an_indefinite_full_rank_hessian_are_none() -> None:
    H = np.diag([-2.0, -1.0, 3.0])
    H[0, 2] = H[2, 0] = 0.5
    assert dependent_coordinates(H).size == 0
    singular = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(dependent_coordinates(singular), [1, 2])
