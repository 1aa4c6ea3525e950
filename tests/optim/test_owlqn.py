"""OWL-QN against scikit-learn's L1 and elastic-net solvers: same objective, same support."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import rosen, rosen_der
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LeastSquares, Logistic
from dasklbfgs.optim import LBFGSOptions, Status, lbfgs_minimize, owlqn_minimize, pseudo_gradient
from dasklbfgs.optim.owlqn import l1_weights

TIGHT = LBFGSOptions(gtol=1e-9, ftol=1e-14)


def sparse_problem(n: int = 200, d: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d)  # unequal column scales
    w = np.zeros(d)
    w[:5] = rng.normal(size=5) * 2
    return X, X @ w + 0.3 * rng.normal(size=n), w


def full_objective(model, X, y, l1):
    return lambda w: model.objective(w, X, y)[0] + l1 * np.abs(w[: model.n_coef]).sum()


@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_least_squares_matches_lasso_and_elastic_net(l1_ratio) -> None:
    X, y, _ = sparse_problem()
    alpha = 0.2
    l1, l2 = alpha * l1_ratio, alpha * (1 - l1_ratio)
    model = LeastSquares(X.shape[1], l2=l2, fit_intercept=False)
    res, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(X.shape[1]), l1, TIGHT)
    reference = (Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000) if l1_ratio == 1 else
                 ElasticNet(alpha=alpha, l1_ratio=l1_ratio, fit_intercept=False, tol=1e-14, max_iter=100_000))
    reference.fit(X, y)
    objective = full_objective(model, X, y, l1)
    assert res.success, res.message
    assert res.fun == pytest.approx(objective(res.x), rel=1e-15)
    assert res.fun <= objective(reference.coef_) * (1 + 1e-6)
    assert objective(reference.coef_) <= res.fun * (1 + 1e-6)
    np.testing.assert_array_equal(np.flatnonzero(res.x), np.flatnonzero(reference.coef_))
    assert 0 < np.count_nonzero(res.x) < X.shape[1]
    assert np.all(res.x[reference.coef_ == 0] == 0.0)  # exact zeros, not tiny values


def test_logistic_matches_liblinear_and_leaves_the_intercept_unpenalised() -> None:
    X, score, _ = sparse_problem(n=300, seed=1)
    y = (score + np.random.default_rng(2).normal(size=score.size) > 1.0).astype(float)
    n, d = X.shape
    l1 = 0.02
    model = Logistic(d, fit_intercept=True)
    res, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(d + 1), l1, TIGHT,
                            penalised=slice(0, d))
    # liblinear penalises its intercept; saga does not (C = 1 / (n l1) for our mean loss)
    reference = LogisticRegression(l1_ratio=1.0, C=1.0 / (n * l1), solver="saga", tol=1e-12,
                                   max_iter=200_000).fit(X, y)
    theirs = np.r_[reference.coef_.ravel(), reference.intercept_]
    objective = full_objective(model, X, y, l1)
    assert res.success, res.message
    assert abs(res.fun - objective(theirs)) <= 1e-6 * abs(res.fun)
    np.testing.assert_array_equal(np.flatnonzero(res.x[:d]), np.flatnonzero(np.abs(theirs[:d]) > 1e-8))
    assert res.x[d] != 0.0 and np.count_nonzero(res.x[:d]) < d
    assert np.max(np.abs(res.jac)) <= 1e-7  # converged on the pseudo-gradient


def test_logistic_without_intercept_matches_liblinear() -> None:
    X, score, _ = sparse_problem(n=300, seed=3)
    y = (score > 0).astype(float)
    n, d = X.shape
    l1 = 0.05
    model = Logistic(d, fit_intercept=False)
    res, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(d), l1, TIGHT)
    reference = LogisticRegression(l1_ratio=1.0, C=1.0 / (n * l1), solver="liblinear", fit_intercept=False,
                                   tol=1e-12, max_iter=100_000).fit(X, y)
    objective = full_objective(model, X, y, l1)
    assert res.success, res.message
    assert abs(res.fun - objective(reference.coef_.ravel())) <= 1e-6 * abs(res.fun)
    np.testing.assert_array_equal(np.flatnonzero(res.x), np.flatnonzero(reference.coef_.ravel()))


def test_pseudo_gradient_rules() -> None:
    x = np.array([1.0, -2.0, 0.0, 0.0, 0.0, 0.0])
    g = np.array([0.5, 0.5, -3.0, 3.0, 0.5, 0.5])
    w = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    # off zero: g + w sign(x); at zero: g + w if negative, g - w if positive, else 0; w = 0: g
    np.testing.assert_array_equal(pseudo_gradient(x, g, w), [1.5, -0.5, -2.0, 2.0, 0.0, 0.5])


def test_zero_l1_is_lbfgs_bit_for_bit() -> None:
    x0 = np.full(6, -1.2)
    ours, _ = owlqn_minimize(lambda x: (rosen(x), rosen_der(x)), x0, 0.0)
    plain, _ = lbfgs_minimize(lambda x: (rosen(x), rosen_der(x)), x0)
    assert ours.nit == plain.nit and ours.nfev == plain.nfev
    np.testing.assert_array_equal(ours.x, plain.x)


def test_large_l1_gives_all_zeros_at_once() -> None:
    X, y, _ = sparse_problem()
    model = LeastSquares(X.shape[1], fit_intercept=False)
    l1 = 2 * np.max(np.abs(X.T @ y)) / X.shape[0]  # above the largest |gradient| at zero
    res, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(X.shape[1]), l1)
    assert res.success and res.nit == 0 and res.message == "CONVERGENCE: NORM OF PROJECTED GRADIENT <= GTOL"
    assert np.all(res.x == 0.0)


def test_limits_and_callback_are_not_success() -> None:
    X, y, _ = sparse_problem()
    model = LeastSquares(X.shape[1], fit_intercept=False)
    evaluate = lambda w: model.objective(w, X, y)  # noqa: E731
    res, state = owlqn_minimize(evaluate, np.zeros(X.shape[1]), 0.1, LBFGSOptions(maxiter=2, gtol=0))
    assert (res.status, res.success, res.nit) == (Status.LIMIT, False, 2)
    assert "ITERATIONS REACHED LIMIT" in res.message
    res, _ = owlqn_minimize(evaluate, np.zeros(X.shape[1]), 0.1, LBFGSOptions(maxfun=3, gtol=0))
    assert res.status == Status.LIMIT and not res.success and res.nfev <= 3

    def stop(_intermediate):
        raise StopIteration

    res, _ = owlqn_minimize(evaluate, np.zeros(X.shape[1]), 0.1, callback=stop)
    assert res.status == Status.CALLBACK_STOP and not res.success and res.nit == 1


def test_continues_from_a_state() -> None:
    X, y, _ = sparse_problem()
    model = LeastSquares(X.shape[1], fit_intercept=False)
    evaluate = lambda w: model.objective(w, X, y)  # noqa: E731
    whole, _ = owlqn_minimize(evaluate, np.zeros(X.shape[1]), 0.1, TIGHT)
    _, state = owlqn_minimize(evaluate, np.zeros(X.shape[1]), 0.1, LBFGSOptions(maxiter=4, gtol=1e-9, ftol=1e-14))
    resumed, _ = owlqn_minimize(evaluate, None, 0.1, TIGHT, state=state)
    np.testing.assert_array_equal(resumed.x, whole.x)
    assert resumed.nit == whole.nit


def test_non_finite_objective_along_the_search_is_reported() -> None:
    def evaluate(x):
        f = float(x @ x - 2 * x.sum())
        return (f, 2 * x - 2) if np.all(x < 0.5) else (np.inf, np.full_like(x, np.nan))

    res, _ = owlqn_minimize(evaluate, np.zeros(3), 0.1, LBFGSOptions(max_line_search=3))
    assert not res.success and res.status == Status.NON_FINITE
    assert "non-finite" in res.message and np.all(np.isfinite(res.x))


@pytest.mark.parametrize("l1, match", [(-0.1, "l1 must be non-negative and finite, got -0.1"),
                                       (np.nan, "non-negative and finite"),
                                       ([0.1, 0.2], r"l1 must be a number or 3 numbers")])
def test_bad_l1_is_refused(l1, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        owlqn_minimize(lambda x: (float(x @ x), 2 * x), np.ones(3), l1)


def test_weights_from_mask_indices_and_slice() -> None:
    np.testing.assert_array_equal(l1_weights(0.5, 4, slice(0, 3)), [0.5, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(l1_weights([1.0, 2.0, 3.0, 4.0], 4, np.array([True, False, True, False])),
                                  [1.0, 0.0, 3.0, 0.0])
    np.testing.assert_array_equal(l1_weights(1.0, 3, [2]), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("l1", [0.0, 0.05], ids=["lbfgs", "owlqn"])
def test_a_warm_start_steps_first_by_the_earlier_runs_curvature(l1) -> None:
    """initial_scale = gamma of a run at a nearby penalty: the first trial is x - gamma g
    (not a step of length 1), and the warm-started fit reaches the same optimum in fewer
    evaluations."""
    from dasklbfgs.optim.lbfgs import inverse_hessian_scale

    X, y, _ = sparse_problem(400, 30, seed=4)
    model = LeastSquares(30)
    objective = full_objective(model, X, y, 0.0)
    weights = l1_weights(1.2 * l1, model.n_params, np.arange(model.n_params) < model.n_coef)
    nearby, state = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(31), weights, TIGHT)
    gamma = inverse_hessian_scale(state.basis)
    assert gamma is not None and gamma > 0 and inverse_hessian_scale(type(state.basis)(31, 3)) is None
    trials = []

    def recorded(w):
        trials.append(w.copy())
        return model.objective(w, X, y)

    start = nearby.x
    weights = l1_weights(l1, model.n_params, np.arange(model.n_params) < model.n_coef)
    plain, _ = owlqn_minimize(lambda w: model.objective(w, X, y), start, weights, TIGHT)
    warm, _ = owlqn_minimize(recorded, start, weights, TIGHT.replace(initial_scale=gamma))
    g = model.objective(start, X, y)[1]
    v = pseudo_gradient(start, g, weights)
    np.testing.assert_allclose(trials[1], start - gamma * v, rtol=1e-12, atol=1e-15)  # the first trial point
    assert warm.nfev < plain.nfev
    assert objective(warm.x) + l1 * np.abs(warm.x[:30]).sum() == pytest.approx(
        objective(plain.x) + l1 * np.abs(plain.x[:30]).sum(), rel=1e-10)
    with pytest.raises(ConfigurationError, match="lbfgs option initial_scale must be a positive number or None"):
        LBFGSOptions(initial_scale=0.0)
