"""Regularization paths against scikit-learn's: the same penalties, the same coefficients,
warm starts cheaper than cold fits, the KKT conditions met, and bad input refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from distributed import get_task_stream
from scipy import sparse
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression, Ridge, lasso_path

import dasklbfgs
from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import MLP, LeastSquares, Logistic
from dasklbfgs.selection import path as path_module
from dasklbfgs.selection.chosen import choose_penalty
from dasklbfgs.selection.options import PathOptions
from dasklbfgs.selection.path import PathPlan

TIGHT = {"gtol": 1e-10, "ftol": 1e-14}
N, D = 1200, 8


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, D)) * rng.uniform(0.5, 2.0, size=D)
    y = X @ np.array([2.0, -1.0, 0.5, 0.2, 0, 0, 0, 0]) + 0.3 + rng.normal(size=N)
    return X, y, ShardedDataset.create(tmp_path_factory.mktemp("path") / "r", X, y, shard_rows=300)


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(N, D))
    y = (X[:, 0] - 0.5 * X[:, 1] + 0.25 * X[:, 2] + rng.logistic(size=N) > 0.3).astype(np.int64)
    root = tmp_path_factory.mktemp("path")
    return (X, y, ShardedDataset.create(root / "train", X[:900], y[:900], shard_rows=300),
            ShardedDataset.create(root / "test", X[900:], y[900:], shard_rows=300))


def test_a_lasso_path_is_scikit_learns(client, regression) -> None:
    X, y, data = regression
    with get_task_stream(client) as stream:
        path = dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), data, n_alphas=8, eps=1e-2, client=client,
                                             **TIGHT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn renames n_alphas
        alphas, _, _ = lasso_path(X - X.mean(axis=0), y - y.mean(), eps=1e-2, n_alphas=8)
    # the same grid from the same largest penalty (ours at the fitted intercept: equal to rounding)
    np.testing.assert_allclose(path.alphas, alphas, rtol=1e-10)
    assert path.penalty == "l1" and path.alpha_max == pytest.approx(alphas[0], rel=1e-10)
    assert path.n_nonzero[0] == 0 and path.n_nonzero[-1] > 4
    for alpha, coefs, nonzero in zip(path.alphas, path.coefs, path.n_nonzero):
        lasso = Lasso(alpha=alpha, tol=1e-14, max_iter=100_000).fit(X, y)
        assert nonzero == np.count_nonzero(lasso.coef_)  # the same coefficients exactly zero
        np.testing.assert_allclose(coefs[:D], lasso.coef_, atol=1e-7)
        assert coefs[D] == pytest.approx(lasso.intercept_, abs=1e-7)
    assert np.all(path.success) and np.all(path.optimality < 1e-6)  # the KKT conditions, to the tolerances
    loads = sum(task["key"].startswith("sandblaster-shard-") and "-copy-" not in task["key"]
                for task in stream.data)  # (a backup's or a move's copy is taken from a worker, not read)
    assert loads == data.n_shards  # the rows read once for the whole path (and its start)


def test_warm_starts_take_fewer_iterations_than_cold_fits(client, classification, monkeypatch) -> None:
    X, y, train, test = classification
    model = Logistic(D, l1=0.01)
    with dasklbfgs.cached(train, client=client) as shards:  # a path on shards the caller keeps
        path = dasklbfgs.regularization_path(model, shards, l1=[0.002, 0.02, 0.005], eval_data=test,
                                             metrics=["log_loss", "accuracy", "roc_auc"], **TIGHT)
        assert not shards.closed
    np.testing.assert_array_equal(path.alphas, [0.02, 0.005, 0.002])  # strongest first
    cold = [minimize(Logistic(D, l1=a), train, client=client, **TIGHT) for a in path.alphas]
    assert path.nit.sum() < sum(r.nit for r in cold)
    for fitted, reference in zip(path.coefs, cold):
        np.testing.assert_allclose(fitted, reference.x, atol=1e-6)
    n = 900
    for alpha, coefs, scores in zip(path.alphas, path.coefs, path.scores):
        sk = LogisticRegression(l1_ratio=1.0, C=1 / (n * alpha), solver="saga", tol=1e-12, max_iter=50_000)
        sk.fit(X[:900], y[:900])
        np.testing.assert_allclose(coefs[:D], sk.coef_[0], atol=2e-4)
        held_out = dasklbfgs.evaluate(Logistic(D), coefs, test, client=client, metrics=["log_loss", "accuracy"])
        assert scores["log_loss"] == pytest.approx(held_out["log_loss"], rel=1e-12)
        assert scores["accuracy"] == held_out["accuracy"]
    losses = [s["log_loss"] for s in path.scores]
    assert path.best() == int(np.argmin(losses)) and path.best("roc_auc") == int(np.argmax(
        [s["roc_auc"] for s in path.scores]))
    with pytest.raises(ConfigurationError, match="the path's held-out scores have no 'rmse' to choose by; they have "
                                                 "accuracy, log_loss, objective, roc_auc"):
        path.best("rmse")
    # a callback that stops a fit ends the path there, with the fits reached
    stops = iter(range(12, 0, -1))

    def third_fit_stops(intermediate) -> None:
        if next(stops) == 1:
            raise StopIteration("enough")

    short = dasklbfgs.regularization_path(model, train, l1=[0.002, 0.02, 0.005], client=client,
                                          callback=third_fit_stops, **TIGHT)
    assert 1 <= len(short) < 3 and short.stats["stopped"] == "enough" and not short.success[-1]
    np.testing.assert_array_equal(short.alphas, path.alphas[: len(short)])
    assert path.stats["stopped"] is None
    # a wide path keeps its fits as CSR rows (here: every path): the same fits, saved as CSR parts
    monkeypatch.setattr(path_module, "DENSE_COEFS_BYTES", 0)
    with dasklbfgs.cached(train, client=client) as shards:
        wide = dasklbfgs.regularization_path(model, shards, l1=[0.002, 0.02, 0.005], **TIGHT)
        chosen = choose_penalty(PathPlan.checked(model, PathOptions.from_mapping({"l1_values": (0.002, 0.02, 0.005)}),
                                                 TIGHT), shards, client=client)
    assert sparse.issparse(wide.coefs) and wide.coefs.shape == path.coefs.shape
    for i in range(len(path)):
        np.testing.assert_array_equal(wide.coef(i), path.coefs[i])  # the same runs, bit for bit
    np.testing.assert_array_equal(wide.n_nonzero, path.n_nonzero)
    parts = chosen.arrays
    saved = sparse.csr_array((parts["path_coefs_data"], parts["path_coefs_indices"], parts["path_coefs_indptr"]),
                             shape=tuple(parts["path_coefs_shape"]))
    np.testing.assert_array_equal(saved.toarray(), path.coefs)


def test_ridge_and_elastic_net_paths(client, regression) -> None:
    X, y, data = regression
    ridge = dasklbfgs.regularization_path(LeastSquares(D), data, l2=[1.0, 0.1], client=client, **TIGHT)
    assert ridge.penalty == "l2" and ridge.alpha_max is None and np.all(ridge.l1 == 0)
    with pytest.raises(ConfigurationError, match="the path has no held-out scores to choose by: give it eval_data"):
        ridge.best()
    for l2, coefs in zip(ridge.alphas, ridge.coefs):  # scikit-learn's alpha is the summed loss's: N * l2
        reference = Ridge(alpha=N * l2, tol=1e-12).fit(X, y)
        np.testing.assert_allclose(coefs[:D], reference.coef_, atol=1e-7)
    # the model's own elastic net: l1 from the largest penalty down, l2 kept in the model's ratio
    net = dasklbfgs.regularization_path(LeastSquares(D, l1=0.3, l2=0.1), data, n_alphas=3, eps=0.1,
                                        client=client, **TIGHT)
    np.testing.assert_allclose(net.l2, net.l1 / 3, rtol=1e-15)
    assert net.n_nonzero[0] == 0
    l1, l2 = net.l1[-1], net.l2[-1]
    reference = ElasticNet(alpha=l1 + l2, l1_ratio=l1 / (l1 + l2), tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(net.coefs[-1][:D], reference.coef_, atol=1e-7)
    # the ridge path's own sequence: glmnet's convention, the lasso's largest penalty / 1e-3
    own = dasklbfgs.regularization_path(LeastSquares(D, l2=1.0), data, n_alphas=2, eps=0.5, client=client)
    assert own.alphas[0] == pytest.approx(net.alpha_max * 1000, rel=1e-9)


@pytest.mark.parametrize("call, match", [
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, l1=[0.1], l2=[0.1]),
     "give the values of one penalty to vary, l1 or l2, not both"),
    (lambda d: dasklbfgs.regularization_path(MLP(D, (3,), 2), d, l2=[0.1]), "is not one"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D), d), "has no penalty to vary"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D), d, l1=[0.1, -1.0]),
     r"path option l1_values must be a non-empty list of numbers >= 0 or None, got \[0.1, -1.0\]"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D), d, l2=[]), "path option l2_values must be a non-empty"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, n_alphas=0),
     "path option n_alphas must be an integer >= 1, got 0"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, eps=1.5),
     r"path option eps must be a number in \(0, 1\), got 1.5"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, maxiter=0),
     "sandblaster option maxiter must be an integer >= 1, got 0"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, x0=np.zeros(D + 1)),
     "x0 is not an option of a regularization path: each fit starts from the last"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, online_passes=1),
     "online_passes is not an option of a regularization path: online passes would move each fit"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, checkpoint_path="/tmp/x"),
     "checkpoint_path is not an option of a regularization path: one checkpoint cannot hold"),
    (lambda d: dasklbfgs.regularization_path(LeastSquares(D, l1=1.0), d, metrics=["rmse", "nope"]),
     "nope"),
])
def test_bad_paths_are_refused_before_a_fit(regression, call, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call(regression[2])
