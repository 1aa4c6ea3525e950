"""Sandblaster's Newton procedure (solver="newton") on the session's two-worker LocalCluster,
against statsmodels' IRLS, scikit-learn and Sandblaster's L-BFGS."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs import ShardedDataset, minimize, sandblaster_newton
from dasklbfgs.errors import CollinearityWarning, ConfigurationError
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax
from dasklbfgs.models.glm import Gamma, NegativeBinomial, Poisson
from dasklbfgs.optim.lbfgs import MSG_GTOL
from tests.solvers.sandblaster.conftest import load_all


@pytest.fixture(scope="module")
def counts(tmp_path_factory) -> tuple[ShardedDataset, dict]:
    """Poisson counts with exposures (offsets) and sample weights, 4 shards."""
    rng = np.random.default_rng(5)
    n, d = 4000, 6
    X = rng.normal(size=(n, d))
    offset = np.log(rng.uniform(0.5, 2.0, size=n))
    w = rng.uniform(0.5, 2.0, size=n)
    y = rng.poisson(np.exp(0.3 + X @ rng.normal(scale=0.3, size=d) + offset)).astype(np.float64)
    data = ShardedDataset.create(tmp_path_factory.mktemp("counts") / "d", X, y, sample_weight=w, offset=offset,
                                 shard_rows=1000, feature_names=[f"x{j}" for j in range(d)])
    return data, {"X": X, "y": y, "offset": offset, "w": w}


def test_poisson_with_offsets_and_weights_is_statsmodels_irls_optimum_in_a_few_passes(client, counts) -> None:
    import statsmodels.api as sm

    data, rows = counts
    result = sandblaster_newton(Poisson(6), data, client=client, gtol=1e-10)
    reference = sm.GLM(rows["y"], sm.add_constant(rows["X"], prepend=False), family=sm.families.Poisson(),
                       offset=rows["offset"], var_weights=rows["w"]).fit(tol=1e-14)
    assert result.success and result.message == MSG_GTOL, result.message
    assert result.nfev <= 8  # passes over the data, each with its Hessian
    np.testing.assert_allclose(result.x, reference.params, rtol=1e-9, atol=1e-11)
    # result.hess is the mean objective's Hessian at x: statsmodels' information over the total weight
    np.testing.assert_allclose(result.hess, -reference.model.hessian(reference.params) / rows["w"].sum(),
                               rtol=1e-8)
    assert result.stats["evaluations"] == result.nfev and result.solver == "newton"


@pytest.mark.parametrize("make", [
    lambda: Gamma(6, link="inverse", start_mean=2.0),
    lambda: NegativeBinomial(6, dispersion=0.5),
    lambda: Logistic(8, l2=1e-3),
], ids=["gamma-inverse", "negative-binomial", "logistic-very-ill"])
def test_glms_reach_their_optimum_in_fewer_passes_than_lbfgs(client, counts, datasets, make) -> None:
    """Each against Sandblaster's L-BFGS run to its own tight optimum: the same point, reached in
    a handful of passes (L-BFGS needs tens to hundreds on the ill-conditioned logistic)."""
    model = make()
    data = datasets["logistic-very-ill"] if isinstance(model, Logistic) else counts[0]
    if isinstance(model, Gamma):  # positive amounts with the counts' features
        X, _ = load_all(data)
        amounts = np.random.default_rng(6).gamma(2.0, 1.0 / (0.5 + 0.05 * np.abs(X @ np.ones(6))))
        data = ShardedDataset.create(data.path.parent / "amounts", X, amounts, shard_rows=1000, overwrite=True)
    newton = minimize(model, data, "newton", client=client, gtol=1e-10)
    lbfgs = minimize(model, data, "sandblaster", client=client, gtol=1e-10, ftol=0.0, maxiter=2000)
    assert newton.success, newton.message
    assert newton.nfev <= 12 and newton.nfev < lbfgs.nfev
    assert newton.fun <= lbfgs.fun + 1e-12 * abs(lbfgs.fun)
    np.testing.assert_allclose(newton.x, lbfgs.x, rtol=1e-5, atol=1e-6)


def test_l1_and_bounds_reach_owlqns_optimum_with_exact_zeros(client, datasets) -> None:
    data = datasets["logistic-ill"]
    model = Logistic(8, l1=0.01, lower_bounds=-0.5, upper_bounds=0.5)
    newton = sandblaster_newton(model, data, client=client, gtol=1e-10)
    lbfgs = minimize(model, data, "sandblaster", client=client, gtol=1e-10, ftol=0.0, maxiter=2000)
    assert newton.success and newton.nfev <= 12, newton.message
    np.testing.assert_array_equal(np.flatnonzero(newton.x), np.flatnonzero(lbfgs.x))
    assert np.all(np.abs(newton.x[:8]) <= 0.5) and np.any(np.abs(newton.x[:8]) == 0.5)
    assert newton.fun <= lbfgs.fun + 1e-12 * abs(lbfgs.fun)
    np.testing.assert_allclose(newton.x, lbfgs.x, atol=1e-6)


def test_softmax_and_sparse_rows_match_scikit_learns_newton_cholesky(client, tmp_path) -> None:
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(8)
    n, d, k = 3000, 12, 3
    X = sp.random(n, d, density=0.4, format="csr", random_state=9)
    y = (X @ rng.normal(size=(d, k)) + rng.gumbel(size=(n, k))).argmax(axis=1)
    data = ShardedDataset.create(tmp_path / "sparse", X, y, shard_rows=800)
    l2 = 1e-2
    result = sandblaster_newton(Softmax(d, k, l2=l2), data, client=client, gtol=1e-10)
    theirs = LogisticRegression(C=1.0 / (n * l2), solver="newton-cholesky", tol=1e-12, max_iter=100).fit(X, y)
    W = result.x[: d * k].reshape(d, k)
    b = result.x[d * k:]
    # scikit-learn's multinomial coefficients sum to zero over the classes; ours too, with l2
    np.testing.assert_allclose(W.T, theirs.coef_, atol=1e-7)
    np.testing.assert_allclose(b - b.mean(), theirs.intercept_ - theirs.intercept_.mean(), atol=1e-7)
    assert result.success and result.nfev <= 10


def test_collinear_columns_are_named_in_a_warning_and_the_fit_goes_on(client, tmp_path) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 3))
    X = np.c_[X, X[:, 0] + 2 * X[:, 1]]
    y = (X[:, :3] @ [1.0, -1.0, 0.5] + rng.logistic(size=2000) > 0).astype(np.int64)
    data = ShardedDataset.create(tmp_path / "collinear", X, y, shard_rows=500,
                                 feature_names=["age", "income", "tenure", "score"])
    with pytest.warns(CollinearityWarning, match=r"is singular: column \d \('(age|income|score)'\) is a linear "
                      r"combination of the other columns.*set l2 > 0"):
        result = sandblaster_newton(Logistic(4), data, client=client, gtol=1e-9)
    assert result.success
    lbfgs = minimize(Logistic(4), data, "sandblaster", client=client, gtol=1e-9, ftol=0.0, maxiter=1000)
    assert result.fun <= lbfgs.fun + 1e-12


def test_what_newton_cannot_train_is_refused_before_any_work(client, datasets, counts, tmp_path) -> None:
    with pytest.raises(ConfigurationError, match=r"solver 'newton' needs the Hessian of the model's loss, and "
                       r"MLP\(.*\) has none.*solver 'sandblaster'"):
        minimize(MLP(8, hidden=(4,), n_classes=3), datasets["multinomial"], "newton", client=client)
    with pytest.raises(ConfigurationError, match=r"NegativeBinomial\(.*\) has none \(.*dispersion estimated"):
        minimize(NegativeBinomial(6, dispersion=None), counts[0], "newton", client=client)
    wide = ShardedDataset.create(tmp_path / "wide", sp.random(4, 6000, density=0.001, format="csr", random_state=1),
                                 np.arange(4.0), shard_rows=4)
    with pytest.raises(ConfigurationError, match=r"solver 'newton' forms the 6001 x 6001 Hessian of "
                       r"LeastSquares\(.*\) \(6001 parameters\), 288096008 bytes .* more than the 256.0 MiB it "
                       r"allows.*solver 'sandblaster'"):
        sandblaster_newton(LeastSquares(6000), wide, client=client)
    many = ShardedDataset.create(tmp_path / "many", sp.random(22, 4999, density=0.001, format="csr", random_state=2),
                                 np.arange(22.0), shard_rows=2)
    with pytest.raises(ConfigurationError, match=r"solver 'newton' receives a 5000 x 5000 Hessian from each of the 11 "
                       r"portions of .*many.* before adding them, 2.0 GiB in all, more than the 2.0 GiB it allows: "
                       r"give larger portions \(portion_rows\), fewer shards"):
        sandblaster_newton(LeastSquares(4999), many, client=client)
    with pytest.raises(ConfigurationError, match=r"newton option maxiter must be an integer >= 1, got 0"):
        sandblaster_newton(LeastSquares(8), datasets["regression"], client=client, maxiter=0)


def test_held_out_scores_callback_and_report_as_sandblasters(client, datasets) -> None:
    from dasklbfgs.scoring import evaluate

    data = datasets["logistic"]
    seen = []
    result = minimize(Logistic(8, l2=1e-3), data, "newton", client=client, eval_data=datasets["logistic-ill"],
                      score=True, callback=lambda intermediate: seen.append(intermediate.step))
    assert seen == [entry["step"] for entry in result.history] and len(seen) == result.nit
    assert all("eval_objective" in entry for entry in result.history)  # eval_every=1, as Sandblaster's
    assert result.history[-1]["eval_objective"] == pytest.approx(
        evaluate(Logistic(8, l2=1e-3), result.x, datasets["logistic-ill"])["objective"], rel=1e-12)
    assert set(result.scores) == {"train", "test"} and "accuracy" in result.scores["train"]
    assert result.stats.lines(result)[0].startswith(f"work       {result.nit} iterations")
