"""Huber regression: the row kernel against its two branches, finite-difference gradients (the
scale's too), sparse and compact sums as the dense ones, scikit-learn's ``HuberRegressor``
objective and optimum (the scale estimated), scipy's optimum at a fixed scale, the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad
from scipy.optimize import minimize as scipy_minimize
from sklearn.linear_model import HuberRegressor as SkHuberRegressor
from sklearn.linear_model._huber import _huber_loss_and_gradient
from sklearn.metrics import r2_score

from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import MLP, Gamma, Huber, LeastSquares, model_for_dataset
from dasklbfgs.models._kernels import huber_link, huber_scale_link
from dasklbfgs.models.compact_rows import CompactColumns
from dasklbfgs.models.online_pass import adagrad_pass
from dasklbfgs.models.persist import model_config, model_from_config
from dasklbfgs.models.robust import SCALE_FLOOR
from dasklbfgs.models.sums import SparseSum
from dasklbfgs.solvers.sandblaster.standardize import Standardizer

RNG = np.random.default_rng(11)
N = 400
X = RNG.normal(size=(N, 4)) * np.array([1.0, 3.0, 0.5, 1.0])
Y = X @ np.array([1.5, -0.4, 2.0, 0.0]) + 3.0 + RNG.normal(size=N)
Y[RNG.choice(N, N // 20, replace=False)] += 50.0  # 5% outliers
W = RNG.uniform(0.5, 2.0, size=N)
OFFSET = RNG.normal(scale=0.3, size=N)
TIGHT = {"gtol": 1e-10, "ftol": 1e-15, "maxiter": 1000}
MODELS = {"joint": Huber(4, l2=0.01), "joint-no-intercept": Huber(4, epsilon=1.6, fit_intercept=False),
          "fixed": Huber(4, scale=1.3, l2=0.01), "joint-l1": Huber(4, l1=0.05)}


def _reference_objective(model: Huber, params: np.ndarray, w: np.ndarray) -> float:
    """The objective from its definition: ``sigma + sigma H(r / sigma)`` per row, the weighted
    mean, ``(l2 / 2) ||w||^2`` (the l1 term is the optimizer's)."""
    coef = params[:4]
    b = params[4] if model.fit_intercept else 0.0
    sigma = params[-1] if model.scale is None else model.scale
    t = (Y - X @ coef - b) / sigma
    H = np.where(np.abs(t) <= model.epsilon, t**2, 2 * model.epsilon * np.abs(t) - model.epsilon**2)
    return float(w @ (sigma + sigma * H) / w.sum() + 0.5 * model.l2 * coef @ coef)


def _start(model: Huber) -> np.ndarray:
    return model.init_params() + RNG.normal(scale=0.3, size=model.n_params)


def test_the_kernel_is_both_branches_and_infinite_without_a_scale() -> None:
    z, y, w = np.array([0.0, 0.5, -3.0, 4.0]), np.array([0.2, 0.5, 1.0, -1.0]), np.array([1.0, 2.0, 0.5, 3.0])
    eps, sigma = 1.5, 2.0  # rows 0 and 1 inside (|r| <= 3), rows 2 and 3 beyond (r = 4, -5)
    r = y - z
    inside = np.abs(r) <= eps * sigma
    loss = np.where(inside, sigma + r**2 / sigma, sigma + 2 * eps * np.abs(r) - eps**2 * sigma)
    dz = np.where(inside, -2 * r / sigma, -2 * eps * np.sign(r))
    d_sigma = np.where(inside, 1 - r**2 / sigma**2, 1 - eps**2)
    assert inside.tolist() == [True, True, False, False]
    total, derivative, scale_sum = huber_scale_link(z.copy(), y, w, epsilon=eps, scale=sigma)
    assert total == pytest.approx(w @ loss, rel=1e-15)
    np.testing.assert_allclose(derivative, w * dz, rtol=1e-15)
    assert scale_sum == pytest.approx(w @ d_sigma, rel=1e-15)
    unweighted = huber_scale_link(z.copy(), y, epsilon=eps, scale=sigma)
    assert unweighted[0] == pytest.approx(loss.sum(), rel=1e-15) and unweighted[2] == pytest.approx(d_sigma.sum())
    fixed = huber_link(z.copy(), y, w, epsilon=eps, scale=sigma)  # the constant sigma kept
    assert fixed[0] == total and np.array_equal(fixed[1], derivative)
    for bad in (0.0, -1.0, np.nan):
        out = huber_scale_link(z.copy(), y, w, epsilon=eps, scale=bad)
        assert out[0] == np.inf and np.all(out[1] == 0) and out[2] == 0


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_are_the_objectives_and_sparse_rows_give_the_same_sums(name) -> None:
    model = MODELS[name]
    x = _start(model)
    assert model.objective(x, X, Y, W)[0] == pytest.approx(_reference_objective(model, x, W), rel=1e-12)
    assert check_grad(lambda v: model.objective(v, X, Y, W)[0], lambda v: model.objective(v, X, Y, W)[1], x,
                      epsilon=1e-7) < 1e-5 * np.linalg.norm(model.objective(x, X, Y, W)[1]) + 1e-6
    if model.scale is None:  # the scale's own component against a central difference
        h, e = 1e-6, np.eye(model.n_params)[-1]
        central = (_reference_objective(model, x + h * e, W) - _reference_objective(model, x - h * e, W)) / (2 * h)
        assert model.objective(x, X, Y, W)[1][-1] == pytest.approx(central, rel=1e-6, abs=1e-9)
    for w, offset in ((W, OFFSET), (None, None)):
        dense = model.loss_grad_sum(x, X, Y, w, offset)
        sparse = model.loss_grad_sum(x, sp.csr_array(X), Y, w, offset)
        assert sparse[0] == pytest.approx(dense[0], rel=1e-12)
        np.testing.assert_allclose(sparse[1], dense[1], rtol=1e-12, atol=1e-12)
        portion = model.portion_loss_grad_sum(x, sp.csr_array(X), Y, w, offset)
        assert isinstance(portion[1], SparseSum) and portion[0] == sparse[0]
        np.testing.assert_array_equal(portion[1].to_dense(), sparse[1])  # the compact sums' bits
        narrow = np.zeros_like(X)
        narrow[:, [0, 2]] = X[:, [0, 2]]
        rows = CompactColumns.of(sp.csr_array(narrow))  # a shard that uses two columns
        positions = model.compact_positions(rows)
        assert positions.tolist() == [0, 2, *range(4, model.n_params)]  # intercept and sigma carried
        loss, values = model.compact_loss_grad_sum(x[positions], rows, Y, w, offset)
        whole = model.loss_grad_sum(x, narrow, Y, w, offset)
        assert loss == pytest.approx(whole[0], rel=1e-12)
        np.testing.assert_allclose(values, whole[1][positions], rtol=1e-12, atol=1e-12)
    scored = model.scored(x, X, Y, W, OFFSET)
    assert scored.loss == pytest.approx(model.loss_grad_sum(x, X, Y, W, OFFSET)[0], rel=1e-12)
    np.testing.assert_allclose(scored.outputs, X @ x[:4] + (x[4] if model.fit_intercept else 0) + OFFSET)


def test_the_objective_is_scikit_learns_and_the_fixed_scale_is_the_joint_models_at_it() -> None:
    """scikit-learn's HuberRegressor minimises the weighted sum plus ``alpha ||w||^2``: ours is that
    over the total weight N, at ``l2 = 2 alpha / N``. At ``scale = s`` the loss is the joint
    model's at ``sigma = s``."""
    alpha, total = 0.3, W.sum()
    joint = Huber(4, l2=2 * alpha / total)
    x = _start(joint)
    x[-1] = 1.7
    f, g = joint.objective(x, X, Y, W)
    loss, grad = _huber_loss_and_gradient(x, X, Y, 1.35, alpha, W)
    assert f * total == pytest.approx(loss, rel=1e-12)
    np.testing.assert_allclose(g * total, grad, rtol=1e-10, atol=1e-10)
    fixed = Huber(4, scale=1.7, l2=2 * alpha / total)
    f_fixed, g_fixed = fixed.objective(x[:-1], X, Y, W)
    assert f_fixed == f and np.array_equal(g_fixed, g[:-1])


def _sklearn_optimum(y: np.ndarray, alpha: float, w: np.ndarray) -> np.ndarray:
    """scikit-learn's objective (its own function) minimised tightly: its HuberRegressor stops at
    L-BFGS-B's default ftol, about 1e-6 from it."""
    start = np.r_[np.zeros(5), 1.0]
    bounds = [(None, None)] * 5 + [(SCALE_FLOOR, None)]
    return scipy_minimize(_huber_loss_and_gradient, start, args=(X, y, 1.35, alpha, w), jac=True, method="L-BFGS-B",
                          bounds=bounds, options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 10_000}).x


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_the_joint_optimum_is_scikit_learns(client, tmp_path, weighted) -> None:
    """On a ShardedDataset of four shards, from the local and the sharded state (which starts
    at ``init_params``: sigma 1, not the zeros it makes for the other linear models), standardized
    or not (sigma passed through the map)."""
    w = W if weighted else None
    data = ShardedDataset.create(tmp_path / "rows", X, Y, sample_weight=w, shard_rows=100)
    alpha, total = 0.5, W.sum() if weighted else float(N)
    model = Huber(4, l2=2 * alpha / total)
    expected = _sklearn_optimum(Y, alpha, np.ones(N) if w is None else w)
    reference = SkHuberRegressor(alpha=alpha, tol=1e-12, max_iter=10_000).fit(X, Y, sample_weight=w)
    for options in ({}, {"standardize": True}, {"state": "sharded", "n_param_shards": 2, "standardize": True}):
        result = minimize(model, data, client=client, score=True, **TIGHT, **options)
        assert result.success, (options, result.message)
        np.testing.assert_allclose(result.x, expected, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(result.x[:4], reference.coef_, atol=1e-5)
        assert result.x[4] == pytest.approx(reference.intercept_, abs=1e-5)
        assert result.x[5] == pytest.approx(reference.scale_, abs=1e-5)
    predicted = model.predict(result.x, X)
    np.testing.assert_allclose(predicted, reference.predict(X), atol=1e-4)
    assert result.scores["train"]["r2"] == pytest.approx(r2_score(Y, predicted, sample_weight=w), rel=1e-9)
    assert np.array_equal(model.outliers(result.x, X, Y), reference.outliers_)


def test_the_fixed_scale_optimum_is_scipys(client, tmp_path) -> None:
    """Any solver trains the fixed-scale model (no bounds); here Sandblaster with an l2, dense
    and sparse shards, against scipy's L-BFGS-B on the objective written from its definition."""
    model = Huber(4, epsilon=1.2, scale=0.8, l2=0.05)
    expected = scipy_minimize(lambda v: _reference_objective(model, v, W), np.zeros(5), method="L-BFGS-B",
                              jac=lambda v: model.objective(v, X, Y, W)[1],
                              options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 10_000}).x
    for rows in (X, sp.csr_array(X)):
        data = ShardedDataset.create(tmp_path / f"rows-{sp.issparse(rows)}", rows, Y, sample_weight=W, shard_rows=100)
        result = minimize(model, data, client=client, **{**TIGHT, "gtol": 1e-8})  # (then f moves by ~1 ulp)
        assert result.success, result.message
        np.testing.assert_allclose(result.x, expected, rtol=1e-7, atol=1e-7)
    assert model.bounds() is None and model.init_params().tolist() == [0.0] * 5 and model.starts_at_zero


def test_layout_bounds_and_starts() -> None:
    joint, bounded = Huber(3), Huber(3, fit_intercept=False, lower_bounds=0.0, upper_bounds=[1.0, 2.0, 3.0])
    assert joint.n_params == 5 and joint.n_extra == 1 and bounded.n_params == 4
    assert joint.init_params().tolist() == [0, 0, 0, 0, 1.0] and joint.init_params(seed=3)[-1] == 1.0
    lower, upper = joint.bounds()
    assert lower.tolist() == [-np.inf] * 4 + [SCALE_FLOOR] and upper.tolist() == [np.inf] * 5
    lower, upper = bounded.bounds()
    assert lower.tolist() == [0, 0, 0, SCALE_FLOOR] and upper.tolist() == [1, 2, 3, np.inf]
    assert Huber(3, l1=0.2).l1_weights().tolist() == [0.2, 0.2, 0.2, 0, 0]  # neither intercept nor sigma
    params = np.array([1.0, 2.0, 3.0, 0.5, 9.0])
    W_, b = joint.unpack(params)
    assert W_.tolist() == [1, 2, 3] and b.tolist() == [0.5] and joint.scale_of(params) == 9.0
    assert joint.penalty(params)[1][-2:].tolist() == [0, 0]
    np.testing.assert_allclose(joint.decision_function(params, X[:3, :3]), X[:3, :3] @ [1, 2, 3] + 0.5)
    # the sharded state makes a zero start only for the models whose start is zeros
    assert LeastSquares(3).starts_at_zero and Gamma(3).starts_at_zero and Huber(3, scale=1.0).starts_at_zero
    assert not (joint.starts_at_zero or Gamma(3, link="inverse").starts_at_zero or MLP(3, (2,), 2).starts_at_zero)


def test_standardizing_passes_the_scale_through() -> None:
    model = Huber(4, l1=0.1, lower_bounds=-1.0)
    mean, m2 = X.mean(axis=0), X.var(axis=0) * N
    transform = Standardizer.from_moments(N, mean, m2, n_outputs=1, fit_intercept=True, l2=0.0)
    x = _start(model)
    theta = transform.to_theta(x)
    assert theta[-1] == x[-1] and theta.shape == x.shape
    np.testing.assert_allclose(transform.to_params(theta), x, rtol=1e-14)
    np.testing.assert_allclose(theta[:4], x[:4] * X.std(axis=0), rtol=1e-12)
    g = model.objective(x, X, Y)[1]
    assert transform.gradient_to_theta(g)[-1] == g[-1] and transform.gradient_to_params(g)[-1] == g[-1]
    assert transform.l1_weights_to_theta(model.l1_weights())[-2:].tolist() == [0, 0]
    lower = transform.bounds_to_theta(model.bounds()[0])
    assert lower[-1] == SCALE_FLOOR and lower[4] == -np.inf
    without = Standardizer.from_moments(N, mean, m2, n_outputs=1, fit_intercept=False)
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert without.to_theta(y)[-1] == 5.0 and without.to_params(without.to_theta(y))[-1] == 5.0


def test_online_passes_take_the_fixed_scale_and_name_what_the_joint_one_lacks() -> None:
    fixed = adagrad_pass(Huber(4, scale=1.0), np.zeros(5), sp.csr_array(X), Y, learning_rate=0.1)
    assert np.all(np.isfinite(fixed.params)) and fixed.loss > 0
    dense = adagrad_pass(Huber(4), Huber(4).init_params(), X, Y, learning_rate=0.1)  # dense rows: the row sums
    assert np.all(np.isfinite(dense.params))
    with pytest.raises(ConfigurationError, match=r"estimates its scale with the coefficients.*fix the scale"):
        adagrad_pass(Huber(4), Huber(4).init_params(), sp.csr_array(X), Y, learning_rate=0.1)


def test_options_are_checked_and_round_trip(tmp_path) -> None:
    for epsilon in (1.0, 0.5, -2.0, np.nan, np.inf, True, "1.35", None):
        with pytest.raises(ConfigurationError, match=rf"epsilon must be a finite number > 1 .*got {epsilon!r}"):
            Huber(4, epsilon=epsilon)
    for scale in (0.0, -1.0, np.nan, np.inf, False, "1"):
        with pytest.raises(ConfigurationError, match=rf"scale must be None .* or a finite number > 0, got {scale!r}"):
            Huber(4, scale=scale)
    with pytest.raises(ConfigurationError, match=r"fit_intercept must be True or False"):
        Huber(4, fit_intercept="yes")
    data = ShardedDataset.create(tmp_path / "rows", X, Y - 100.0, shard_rows=200)  # any real labels
    made = model_for_dataset("huber", data, l2=0.1, epsilon=2.0, non_negative=True)
    assert isinstance(made, Huber) and made.epsilon == 2.0 and made.scale is None and made.lower_bounds == 0.0
    made.check_data(data)
    assert model_for_dataset("huber", data).epsilon == 1.35
    with pytest.raises(ConfigurationError, match=r"does not take option\(s\) \['epsilon'\]"):
        model_for_dataset("least_squares", data, epsilon=2.0)
    for model in (made, Huber(4, scale=2.5, l1=0.1), Huber(4, fit_intercept=False)):
        config = model_config(model)
        assert "epsilon" in config and config["scale"] == model.scale
        again = model_from_config(config)
        assert again == model and model_config(again) == config
    assert model.task == "regression" and getattr(model, "deviance_power", 0.0) == 0.0  # R², RMSE
