"""Cross-validation on cached shards: scikit-learn's folds shard by shard, and the penalty and
coefficients scikit-learn's CV estimators choose on the same folds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from distributed import get_task_stream
from sklearn.linear_model import LassoCV, LogisticRegressionCV
from sklearn.model_selection import KFold, StratifiedKFold

from dasklbfgs import ShardedDataset
from dasklbfgs.data.folds import kfold, stratified_kfold
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import LeastSquares, Logistic
from dasklbfgs.selection.cv import cross_validated_path
from tests.solvers.test_leftovers import _actors, _keys, _left_behind

TIGHT = {"gtol": 1e-10, "ftol": 1e-14}


def _reference_folds(splitter, n, y) -> np.ndarray:
    folds = np.empty(n, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a class smaller than the folds
        for i, (_, test) in enumerate(splitter.split(np.zeros(n), y)):
            folds[test] = i
    return folds


def test_folds_are_scikit_learns_shard_by_shard() -> None:
    rng = np.random.default_rng(0)
    for trial in range(150):
        n, k, classes = int(rng.integers(6, 200)), int(rng.integers(2, 6)), int(rng.integers(2, 5))
        y = rng.integers(0, classes, size=n)
        if trial % 3 == 2:  # classes first seen in another order than their labels', and a rare class
            y = np.where(rng.uniform(size=n) < 0.1, 0, classes - 1 - y % classes)
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 6))), replace=False))
        shards = np.split(np.arange(n), cuts)
        found = kfold([len(s) for s in shards], k)
        ours = np.concatenate([found.of_shard(i, y[s]) for i, s in enumerate(shards)])
        np.testing.assert_array_equal(ours, _reference_folds(KFold(k), n, y))
        if np.bincount(y).max() < k:
            continue
        counts = np.array([np.bincount(y[s], minlength=y.max() + 1) for s in shards])
        first = np.array([np.flatnonzero(y == c)[0] if np.any(y == c) else n for c in range(y.max() + 1)])
        found = stratified_kfold(counts, first, k)
        ours = np.concatenate([found.of_shard(i, y[s]) for i, s in enumerate(shards)])
        np.testing.assert_array_equal(ours, _reference_folds(StratifiedKFold(k), n, y))
    with pytest.raises(ConfigurationError, match="cv must be an integer number of folds >= 2, got 1"):
        kfold([10], 1)
    with pytest.raises(ConfigurationError, match="cv=4 folds need at least 4 rows; the dataset has 3"):
        kfold([3], 4)
    with pytest.raises(ConfigurationError, match=r"cv=5 stratified folds need a class with at least 5 rows; "
                                                  r"the class counts are \[3, 2\]"):
        stratified_kfold(np.array([[3, 2]]), np.array([0, 1]), 5)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_a_cross_validated_lasso_is_lasso_cvs(client, tmp_path, weighted) -> None:
    rng = np.random.default_rng(1)
    n, d = 1000, 6
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.5, -1.0, 0.5, 0, 0, 0]) + 0.2 + rng.normal(size=n)
    w = rng.uniform(0.2, 3.0, size=n) if weighted else None
    data = ShardedDataset.create(tmp_path / "r", X, y, sample_weight=w, shard_rows=300)
    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    with get_task_stream(client) as stream:
        found = cross_validated_path(LeastSquares(d, l1=1.0), data, cv=4, n_alphas=6, eps=1e-2, client=client,
                                     **TIGHT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = LassoCV(alphas=found.alphas, cv=KFold(4), tol=1e-14, max_iter=100_000).fit(X, y, w)
    assert found.selected_by == "mse" and found.best_alpha == reference.alpha_
    np.testing.assert_allclose(found.mean_scores["mse"], reference.mse_path_.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(found.coef[:d], reference.coef_, atol=1e-7)
    assert found.coef[d] == pytest.approx(reference.intercept_, abs=1e-7)
    assert found.scores["mse"].shape == (4, 6) and len(found.folds) == 4
    loads = sum(task["key"].startswith("sandblaster-shard-cached-") and "-copy-" not in task["key"]
                for task in stream.data)  # (a backup's or a move's copy is taken from a worker, not read)
    assert loads == data.n_shards  # every fold, and the refit, on the rows read once
    assert _left_behind(client, keys_before, actors_before) == ([], [])  # the views released too


def test_a_cross_validated_logistic_chooses_logistic_regression_cvs_c(client, tmp_path) -> None:
    rng = np.random.default_rng(2)
    n, d = 900, 5
    X = rng.normal(size=(n, d))
    y = (X[:, 0] - X[:, 1] + 0.5 * rng.logistic(size=n) > 0.8).astype(np.int64)  # unbalanced: strata matter
    data = ShardedDataset.create(tmp_path / "c", X, y, shard_rows=250)
    l2 = [1.0, 0.1, 0.01, 0.001]
    found = cross_validated_path(Logistic(d), data, cv=3, l2=l2, client=client, **TIGHT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn's coming l1_ratios and attribute changes
        reference = LogisticRegressionCV(Cs=[1 / (n * 2 / 3 * a) for a in found.alphas], cv=StratifiedKFold(3),
                                         scoring="neg_log_loss", tol=1e-10, max_iter=10_000).fit(X, y)
    assert found.selected_by == "log_loss" and found.stats["stratified"]
    # scikit-learn's C scales the summed loss of a fold's training rows: about 2n/3 of them here
    assert found.best_index == int(np.argmax(reference.scores_[1].mean(axis=0)))
    np.testing.assert_allclose(found.mean_scores["log_loss"], -reference.scores_[1].mean(axis=0), rtol=5e-3)
    with pytest.raises(ConfigurationError, match=r"cv must be an integer number of folds >= 2, got 1"):
        cross_validated_path(Logistic(d), data, cv=1, l2=l2, client=client)
    with pytest.raises(ConfigurationError, match=r"stratified folds deal each class's rows to the folds; "
                                                  r"LeastSquares\(.*\) is not a classifier"):
        cross_validated_path(LeastSquares(d, l1=1.0), data, cv=3, stratified=True, client=client)
    with pytest.raises(ConfigurationError, match=r"metrics \['r2'\] are not metrics of a classification model"):
        cross_validated_path(Logistic(d), data, cv=3, l2=l2[:1], metric="r2", client=client)
