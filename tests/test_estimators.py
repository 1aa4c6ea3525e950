"""scikit-learn estimators: reference agreement, input types, composition and checks."""

from __future__ import annotations

import copy
import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet as SkElasticNet
from sklearn.linear_model import Lasso as SkLasso
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.estimators import (
    ElasticNet,
    HuberRegressor,
    Lasso,
    LinearRegression,
    LogisticRegression,
    MLPClassifier,
    TweedieRegressor,
)
from dasklbfgs.estimators.linear import _logistic_penalty
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax

# Lasso is ElasticNet with l1_ratio fixed at 1 (one method): its checks would repeat ElasticNet's.
# The checks' data are tiny: one shard each (many shards are tested with the solvers).
ONE_SHARD = 100_000


@parametrize_with_checks([LogisticRegression(shard_rows=ONE_SHARD), LinearRegression(shard_rows=ONE_SHARD),
                          ElasticNet(shard_rows=ONE_SHARD), MLPClassifier((8,), max_iter=40, shard_rows=ONE_SHARD),
                          TweedieRegressor(power=1.5, shard_rows=ONE_SHARD), HuberRegressor(shard_rows=ONE_SHARD)])
def test_scikit_learn_estimator_checks(estimator, check, client) -> None:
    if "sample_weight_equivalence" in check.func.__name__ and "tol" in estimator.get_params():
        # weighted and repeated rows are compared to 1e-7: run both fits to that precision
        estimator.set_params(tol=1e-10)
        if isinstance(estimator, HuberRegressor):
            # 15 rows, 30 features: the fit interpolates and the scale goes to its bound (1e-15), where
            # the problem has no precision left (scikit-learn's own differs by 2e-4 there); scikit-learn
            # checks its HuberRegressor at max_iter=5, which both fits follow to 1e-14 (on a copy: the
            # other checks keep the instance's max_iter)
            estimator = clone(estimator).set_params(max_iter=5)
        if isinstance(estimator, MLPClassifier):
            # A non-convex fit stopped at max_iter, not at an optimum: the weighted and the repeated
            # rows' fits start a rounding apart (two summation orders) and that gap grows some 30x
            # every ten iterations, to about the checks' 1e-7 by 40 iterations (0.5 of it with
            # OpenBLAS's SkylakeX kernels, 0.04 with Haswell's). At 20 it is 3e-4 of it or less.
            estimator = clone(estimator).set_params(max_iter=20)
        if isinstance(estimator, LogisticRegression):
            # Both fits stop where f's rounding stops L-BFGS (ftol = 64 eps, 21 iterations in), which
            # knows the coefficients only to sqrt(64 eps / lambda_min) ~ 7e-7 (lambda_min ~ l2 = 1 / sum w
            # ~ 0.03: 30 features on 15 rows): where in that the sparse rows' fit stops is the rounding's
            # choice (0.2 of the checks' 1e-7 on OpenBLAS's Sandybridge kernels). At 15 iterations both
            # stop before that, their same steps apart by rounding only (1e-8 of it on every kernel).
            estimator = clone(estimator).set_params(max_iter=15)
    check(estimator)


@pytest.mark.parametrize("loader", [load_wine, load_breast_cancer])
def test_same_coefficients_as_scikit_learn(client, loader) -> None:
    X, y = loader(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    ours = LogisticRegression(C=0.5, tol=1e-9, max_iter=2000).fit(X, y)
    ref = SkLogisticRegression(C=0.5, tol=1e-10, max_iter=10000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=2e-5)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=2e-5)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)
    assert ours.coef_.shape == ref.coef_.shape
    assert ours.n_iter_.shape == (1,) and len(ours.loss_curve_) == ours.n_iter_[0]


def test_sparse_input_fits_as_scikit_learn_does_on_it(client) -> None:
    """scipy.sparse X is stored as CSR shards and never densified; the fit is scikit-learn's
    on the same sparse matrix, and predictions take sparse X too."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(600, 2000, density=0.01, format="csr", random_state=0)  # wide: 2000 features, ~20 a row
    y = (X @ rng.normal(size=2000) + 0.05 * rng.normal(size=600) > 0).astype(int)
    ours = LogisticRegression(C=10.0, tol=1e-9, max_iter=2000, standardize=False).fit(X, y)
    ref = SkLogisticRegression(C=10.0, tol=1e-10, max_iter=10000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=2e-5)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)
    assert np.array_equal(ours.predict(sp.csc_matrix(X)), ref.predict(X))
    target = X @ np.linspace(-1, 1, 2000)
    fitted = LinearRegression(alpha=1.0, tol=1e-10, max_iter=2000).fit(sp.coo_matrix(X), target)
    np.testing.assert_allclose(fitted.coef_, Ridge(alpha=1.0, tol=1e-12).fit(X, target).coef_, atol=2e-5)
    with pytest.raises(TypeError, match="dense data is required"):  # the MLP takes dense data, as scikit-learn's
        MLPClassifier((4,), max_iter=2).fit(X, y)


def test_solver_options_reach_the_solver(client) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    # one L-BFGS pair of memory converges too, but needs more iterations than ten
    short = LogisticRegression(tol=1e-8, max_iter=500, solver_options={"history": 1}).fit(X, y)
    full = LogisticRegression(tol=1e-8, max_iter=500).fit(X, y)
    assert short.n_iter_[0] > full.n_iter_[0]
    # One pair converges linearly, its last decreases of f shrinking only ~0.5x a step: stopped at one
    # within ftol (64 eps), f is still ~1e-13 above f*, which leaves x within sqrt(2e-13 / lambda_min)
    # = sqrt(2e-13 / 1.75e-3) ~ 1.5e-5 of the optimum (seen: 1.5e-6 to 5.6e-6 as the BLAS kernel varies)
    np.testing.assert_allclose(short.coef_, full.coef_, atol=2e-5)


def test_estimator_choices_are_defaults_solver_options_can_change() -> None:
    from dasklbfgs.models import Logistic

    class Data:
        n_samples = 1000

    model = Logistic(30)
    sandblaster = LogisticRegression(solver_options={"ftol": 1e-3})._options(model, Data())
    assert sandblaster.ftol == 1e-3 and sandblaster.standardize is True
    easgd = LogisticRegression(solver="easgd", n_replicas=2, solver_options={"n_param_shards": 3})
    options = easgd._options(model, Data())
    assert options.n_param_shards == 3 and options.n_replicas == 2
    assert LogisticRegression(solver="easgd")._options(model, Data()).n_param_shards == 1  # easgd's own default


def test_linear_regression_matches_ridge(client) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    target = X @ np.linspace(-1, 1, X.shape[1]) + 0.1 * np.random.default_rng(0).normal(size=len(X))
    ours = LinearRegression(alpha=3.0, tol=1e-10, max_iter=2000).fit(X, target)
    ref = Ridge(alpha=3.0).fit(X, target)
    # Ridge solves exactly; L-BFGS stops when f stops decreasing (max|g| ~ 2e-8 here, with
    # the smallest Hessian eigenvalue ~ 5e-3 on these collinear features): ~5e-6 in coef.
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=2e-5)
    assert ours.intercept_ == pytest.approx(ref.intercept_, abs=1e-6)
    # The two fits' R^2 differ to first order in those 5e-6 (at a ridge optimum d SSR = 2 alpha
    # coef . d coef): by 6e-11 to 7e-10, as the BLAS kernel's rounding moves where L-BFGS stops.
    # What the score must give is scikit-learn's R^2 of our coefficients, to two summation orders.
    theirs = _holding(ref, ours).score(X, target)
    assert ours.score(X, target) == pytest.approx(theirs, rel=_summed(theirs, len(X)), abs=0)


def test_any_labels_dask_and_xarray_inputs(client) -> None:
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    names = np.array(["barolo", "grignolino", "barbera"])[y]
    numpy_fit = LogisticRegression(tol=1e-8).fit(X, names)
    assert list(numpy_fit.classes_) == ["barbera", "barolo", "grignolino"]
    assert set(numpy_fit.predict(X)) <= set(names)
    dask_fit = LogisticRegression(tol=1e-8).fit(da.from_array(X, chunks=50), da.from_array(names, chunks=50))
    np.testing.assert_allclose(dask_fit.coef_, numpy_fit.coef_, atol=1e-6)
    dataset = xr.Dataset({"X": (("sample", "feature"), X), "y": (("sample",), y)})
    xr_fit = LogisticRegression(tol=1e-8).fit(dataset)
    assert xr_fit.score(X, y) == pytest.approx(numpy_fit.score(X, names))
    w = np.linspace(0.2, 2.0, len(y))  # an xarray.Dataset's 'w' variable is its sample weights
    weighted = LogisticRegression(tol=1e-8).fit(dataset.assign(w=(("sample",), w)))
    np.testing.assert_allclose(weighted.coef_, LogisticRegression(tol=1e-8).fit(X, y, sample_weight=w).coef_, atol=1e-6)
    assert np.abs(weighted.coef_ - xr_fit.coef_).max() > 1e-3


def test_sharded_dataset_input(client, tmp_path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    data = ShardedDataset.create(tmp_path / "bc", X, y, shard_rows=100)
    fitted = LogisticRegression(tol=1e-8).fit(data)
    reference = LogisticRegression(tol=1e-8).fit(X, y)
    np.testing.assert_allclose(fitted.coef_, reference.coef_, atol=1e-6)
    shifted = ShardedDataset.create(tmp_path / "shifted", X, y + 1, shard_rows=100)
    with pytest.raises(InvalidDataError, match=r"class labels in .* must be 0..K-1 .* got \[1, 2\]"):
        LogisticRegression().fit(shifted)
    with pytest.raises(ConfigurationError, match=r"pass y=None when X is a ShardedDataset"):
        LogisticRegression().fit(data, y)


def test_predictions_of_dask_input_and_datasets_are_lazy_and_computed_by_the_workers(client, tmp_path) -> None:
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    names = np.array(["barolo", "grignolino", "barbera"])[y]
    fitted = LogisticRegression(tol=1e-8).fit(X, names)
    lazy_X = da.from_array(X, chunks=(50, 7))  # column chunks too: each block gets whole rows
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        lazy = getattr(fitted, method)(lazy_X)
        assert isinstance(lazy, da.Array) and lazy.chunks[0] == (50, 50, 50, 28)
        np.testing.assert_array_equal(lazy.compute(), getattr(fitted, method)(X))
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=3)
    np.testing.assert_array_equal(fitted.predict(frame).compute(), fitted.predict(X))
    assert fitted.score(lazy_X, da.from_array(names, chunks=50)) == pytest.approx(fitted.score(X, names), abs=1e-15)
    w = np.linspace(0.5, 2.0, len(y))
    assert fitted.score(lazy_X, names, sample_weight=w) == pytest.approx(fitted.score(X, names, sample_weight=w),
                                                                          abs=1e-15)
    regression = LinearRegression().fit(X, X[:, 0] * 2 + y)
    data = ShardedDataset.create(tmp_path / "wine", X, X[:, 0] * 2 + y, sample_weight=w, shard_rows=64)
    assert regression.predict(data).chunks[0] == (64, 64, 50)
    np.testing.assert_allclose(regression.predict(data).compute(), regression.predict(X), rtol=1e-14)
    assert regression.score(data) == pytest.approx(regression.score(X, X[:, 0] * 2 + y, sample_weight=w), rel=1e-12)
    with pytest.raises(ValueError, match="X has 4 features, but LogisticRegression is expecting 13 features"):
        fitted.predict(da.zeros((10, 4)))
    with pytest.raises(ConfigurationError, match="a ShardedDataset holds its labels and weights"):
        regression.score(data, y)
    column = da.from_array((X[:, 0] * 2 + y)[:, None], chunks=50)  # y as a column, as scikit-learn takes it
    assert regression.score(da.from_array(X, chunks=50), column) == pytest.approx(
        regression.score(X, X[:, 0] * 2 + y), rel=1e-12)
    with pytest.raises(ConfigurationError, match=r"score\(X, y\) needs y for dask input"):
        regression.score(da.from_array(X, chunks=50))


def test_pipeline_clone_and_grid_search(client) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), LogisticRegression())
    search = GridSearchCV(pipe, {"logisticregression__C": [0.01, 1.0]}, cv=3).fit(X, y)
    assert search.best_score_ > 0.9
    copy = clone(LogisticRegression(C=3.0, solver="downpour"))
    assert copy.get_params()["C"] == 3.0 and copy.get_params()["solver"] == "downpour"


def test_downpour_solver(client) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    fitted = LogisticRegression(solver="downpour", max_iter=5, batch_size=32, random_state=0).fit(X, y)
    assert fitted.score(X, y) > 0.9
    assert fitted.loss_curve_ and fitted.n_iter_[0] == 5


def test_mlp_classifier_matches_the_in_process_objective_minimum(client) -> None:
    """Same weights as L-BFGS-B on the same objective in one process, and sklearn-level accuracy."""
    from scipy.optimize import minimize
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier as SkMLPClassifier

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    train, test = slice(0, 1200), slice(1200, None)
    ours = MLPClassifier((16,), activation="tanh", alpha=1e-2, max_iter=60, random_state=3).fit(X[train], y[train])
    model = MLP(64, (16,), 10, activation="tanh", l2=1e-2 / 1200)
    reference = minimize(model.objective, model.init_params(3), args=(X[train], y[train]), jac=True,
                         method="L-BFGS-B", options={"maxiter": 60, "gtol": 1e-4})
    flat = np.concatenate([a.ravel() for pair in zip(ours.coefs_, ours.intercepts_) for a in pair])
    np.testing.assert_allclose(flat, reference.x, rtol=1e-5, atol=1e-6)
    assert [c.shape for c in ours.coefs_] == [(64, 16), (16, 10)] and ours.n_layers_ == 3
    sk = SkMLPClassifier((16,), activation="tanh", alpha=1e-2, solver="lbfgs", max_iter=60,
                         random_state=3).fit(X[train], y[train])
    assert ours.score(X[test], y[test]) >= sk.score(X[test], y[test]) - 0.03
    np.testing.assert_allclose(ours.predict_proba(X[test]).sum(axis=1), 1.0)
    # model parallelism through the options vocabulary: each portion on a replica split over 2 workers
    split = MLPClassifier((16,), activation="tanh", alpha=1e-2, max_iter=60, random_state=3,
                          solver_options={"model_partitions": 2}).fit(X[train], y[train])
    np.testing.assert_allclose(np.concatenate([c.ravel() for c in split.coefs_]),
                               np.concatenate([c.ravel() for c in ours.coefs_]), rtol=1e-8, atol=1e-10)

    labels = np.array(["b", "a"])[(y % 2)]
    fitted = MLPClassifier((8,), solver="downpour", max_iter=4, batch_size=32, random_state=0).fit(X, labels)
    assert list(fitted.classes_) == ["a", "b"] and fitted.score(X, labels) > 0.85


def test_not_converging_warns(client) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.warns(ConvergenceWarning, match=r"LogisticRegression did not converge: STOP: TOTAL NO. OF ITERATIONS"):
        LogisticRegression(max_iter=2, standardize=False).fit(X, y)


@pytest.mark.parametrize(
    ("estimator", "match"),
    [
        (LogisticRegression(solver="lbfgs"),
         r"solver must be one of \('sandblaster', 'newton', 'downpour', 'sync', 'easgd', 'gossip', 'neighbours'\), "
         r"got 'lbfgs'"),
        (LogisticRegression(C=0), r"C must be a positive number, got 0"),
        (LogisticRegression(max_iter=0), r"max_iter must be an integer >= 1, got 0"),
        (LinearRegression(alpha=-1), r"alpha must be a number >= 0, got -1"),
        (MLPClassifier(activation="softplus"), r"activation must be one of .* got 'softplus'"),
        (MLPClassifier(hidden_layer_sizes=(4, 0)), r"hidden\[1\] must be an integer >= 1, got 0"),
        (MLPClassifier(alpha=-1.0), r"alpha must be a number >= 0, got -1.0"),
        (LogisticRegression(solver_options={"maxiter": 3}), r"solver_options \['maxiter'\] are set by the estimator"),
        (LogisticRegression(solver_options={"n_fetch": 3}), r"sandblaster does not take option 'n_fetch'"),
        (LogisticRegression(solver="downpour", solver_options={"n_fetch": 0}), r"n_fetch must be an integer >= 1"),
        (LogisticRegression(solver_options=[("history", 3)]), r"solver_options must be a dict or None"),
        (LogisticRegression(l1_ratio=1.5), r"l1_ratio must be a number in \[0, 1\] \(0: L2 penalty, 1: L1, .* got 1.5"),
        (LogisticRegression(penalty="l3"), r"penalty must be one of \('l1', 'l2', 'elasticnet', None\) .* got 'l3'"),
        (LogisticRegression(warm_start="yes"), r"warm_start must be True or False, got 'yes'"),
        (ElasticNet(l1_ratio=-0.1), r"l1_ratio must be a number in \[0, 1\] .* got -0.1"),
        (Lasso(alpha=-1), r"alpha must be a number >= 0, got -1"),
        (ElasticNet(solver="sync"), r"solver 'sync' does not minimise an l1 penalty, .* train it with another "
                                      r"solver or set l1=0 \(l1 is minimised by solver 'sandblaster', 'newton' or "
                                      r"'downpour' with optimizer='ftrl'\)"),
        (LogisticRegression(l1_ratio=0.5, solver="easgd"), r"solver 'easgd' does not minimise an l1 penalty"),
        (LogisticRegression(class_weight="even"), r"class_weight must be None, 'balanced' or a dict \{label: weight\}, "
                                                  r"got 'even'"),
        (LogisticRegression(hash_features=0), r"hash_features must be a positive integer, got 0"),
        (MLPClassifier(one_hot_max_levels=-1), r"one_hot_max_levels must be a non-negative integer, got -1"),
    ],
)
def test_parameter_errors(client, estimator, match) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.raises(ConfigurationError, match=match):
        estimator.fit(X[:50], y[:50])


@pytest.mark.parametrize("class_weight", [None, "balanced", {0: 3.0, 2: 0.5}])
def test_weighted_fits_match_scikit_learn_s(client, class_weight) -> None:
    """sample_weight and class_weight give scikit-learn's weighted optimum: logistic
    (multinomial and binary), ridge and the elastic net."""
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    w = np.random.default_rng(2).uniform(0.0, 3.0, len(y))
    for labels, weights in ((y, class_weight), (y > 0, {0: 3.0} if isinstance(class_weight, dict) else class_weight)):
        ours = LogisticRegression(C=0.2, class_weight=weights, tol=1e-9).fit(X, labels, sample_weight=w)
        ref = SkLogisticRegression(C=0.2, class_weight=weights, tol=1e-12, max_iter=10000).fit(X, labels,
                                                                                               sample_weight=w)
        np.testing.assert_allclose(_params_of(ours), _params_of(ref), atol=1e-6)
    if class_weight is None:
        target = X[:, 0] - 2 * X[:, 1] + 0.1 * y
        ours = LinearRegression(alpha=3.0, tol=1e-10).fit(X, target, sample_weight=w)
        # Ridge solves exactly; L-BFGS stops on the relative decrease of f (ftol = 64 eps, before
        # max|g| reaches 1e-10), f then within ~ftol of f*: x is known to sqrt(2 ftol / lambda_min) =
        # sqrt(2.8e-14 / 0.11) = 5e-7 (seen: 1.0e-7, on every BLAS kernel tried)
        np.testing.assert_allclose(_params_of(ours), _params_of(Ridge(alpha=3.0).fit(X, target, sample_weight=w)),
                                   atol=5e-7)
        ours = ElasticNet(alpha=0.05, tol=1e-10, max_iter=2000).fit(X, target, sample_weight=w)
        ref = SkElasticNet(alpha=0.05, tol=1e-12, max_iter=100_000).fit(X, target, sample_weight=w)
        np.testing.assert_allclose(_params_of(ours), _params_of(ref), atol=1e-6)


def test_sample_weight_errors(client, tmp_path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.raises(InvalidDataError, match=r"sample_weight holds a negative weight \(-1.0\) in shard 0 at row 3"):
        LogisticRegression().fit(X[:40], y[:40], sample_weight=np.r_[np.ones(3), -1.0, np.ones(36)])
    with pytest.raises(ValueError, match=r"Sample weights must contain at least one non-zero number"):
        LogisticRegression().fit(X[:40], y[:40], sample_weight=np.zeros(40))
    with pytest.raises(ValueError, match=r"sample_weight.shape == \(39,\), expected \(40,\)"):
        LinearRegression().fit(X[:40], y[:40], sample_weight=np.ones(39))
    data = ShardedDataset.create(tmp_path / "d", X[:40], y[:40], shard_rows=20)
    with pytest.raises(ConfigurationError, match=r"a ShardedDataset carries its own sample weights"):
        LogisticRegression().fit(data, sample_weight=np.ones(40))
    with pytest.raises(ValueError, match=r"The classes, \[1\], are not in class_weight"):
        LogisticRegression(class_weight={0: 2.0, 5: 1.0}).fit(X[:40], y[:40])


def test_bad_data(client) -> None:
    X = np.ones((10, 2))
    with pytest.raises(InvalidDataError, match=r"only one class: \[1.0\]"):
        LogisticRegression().fit(X, np.ones(10))
    with pytest.raises(ValueError, match=r"Found input variables with inconsistent numbers of samples: \[10, 9\]"):
        LogisticRegression().fit(X, np.arange(9) % 2)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        LogisticRegression().fit(X, np.arange(10) % 2)


def _sparse_truth_problem(n: int = 240, d: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features on unequal scales, a target driven by four of them (so L1 zeros some)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d)
    w = np.zeros(d)
    w[:4] = rng.normal(size=4) * 2
    return X, X @ w + 1.5 + 0.3 * rng.normal(size=n)


def _assert_same_optimum(objective, ours: np.ndarray, theirs: np.ndarray, n_coef: int) -> None:
    """Same objective within 1e-6 relative and the same non-zero coefficients (ours exact zeros)."""
    assert abs(objective(ours) - objective(theirs)) <= 1e-6 * abs(objective(ours))
    np.testing.assert_array_equal(ours[:n_coef] != 0, np.abs(theirs[:n_coef]) > 1e-8)
    assert 0 < np.count_nonzero(ours[:n_coef]) < n_coef


def _params_of(estimator) -> np.ndarray:
    """A fitted linear estimator's coef_ and intercept_ in the models' flat layout."""
    return np.r_[np.atleast_2d(estimator.coef_).T.ravel(), estimator.intercept_]


def _holding(reference, estimator):
    """A copy of scikit-learn's fitted ``reference`` holding ``estimator``'s coefficients: its
    score is scikit-learn's figure for our fit."""
    theirs = copy.copy(reference)
    theirs.coef_, theirs.intercept_ = estimator.coef_, estimator.intercept_
    return theirs


def _summed(score: float, n: int) -> float:
    """The relative tolerance of an R^2 or D^2 = 1 - S / S0 whose sums of n positive terms were
    added in two orders (of terms each good to a few ulps), each sum good to n eps: 2 n eps
    (1 - score) / score."""
    return 2 * n * np.finfo(np.float64).eps * max(1.0, (1.0 - score) / abs(score))


def _with_l1(model, l1: float):
    """The model's full objective: its smooth part plus the l1 term on the coefficients."""
    return lambda params, X, y: model.objective(params, X, y)[0] + l1 * np.abs(params[: model.n_coef]).sum()


@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_elastic_net_and_lasso_reach_scikit_learns_optimum(client, l1_ratio) -> None:
    X, y = _sparse_truth_problem()
    alpha = 0.3
    ours = (Lasso(alpha, tol=1e-10, max_iter=1000) if l1_ratio == 1 else
            ElasticNet(alpha, l1_ratio=l1_ratio, tol=1e-10, max_iter=1000)).fit(X, y)
    ref = (SkLasso(alpha, tol=1e-14, max_iter=100_000) if l1_ratio == 1 else
           SkElasticNet(alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=100_000)).fit(X, y)
    model = LeastSquares(X.shape[1], l2=alpha * (1 - l1_ratio))  # mean 0.5 r^2: scikit-learn's 1/(2n) ||r||^2
    objective = _with_l1(model, alpha * l1_ratio)
    _assert_same_optimum(lambda p: objective(p, X, y), _params_of(ours), _params_of(ref), X.shape[1])
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), abs=1e-6)


def test_positive_coefficients_are_scikit_learns(client) -> None:
    """``positive=True``: scikit-learn's non-negative least squares and positive lasso, held
    by Sandblaster's projected method (coefficients it holds at 0 are exactly 0.0)."""
    from sklearn.linear_model import LinearRegression as SkLinearRegression

    X, y = _sparse_truth_problem()
    y = y - 2.0 * X[:, 0]  # a coefficient the bound holds at zero
    ours = LinearRegression(positive=True, tol=1e-10, max_iter=2000).fit(X, y)
    ref = SkLinearRegression(positive=True).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
    assert np.all(ours.coef_ >= 0) and np.array_equal(ours.coef_ == 0, ref.coef_ == 0) and ours.coef_[0] == 0
    lasso = Lasso(0.1, positive=True, tol=1e-10, max_iter=1000).fit(X, y)
    sk_lasso = SkLasso(0.1, positive=True, tol=1e-14, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(lasso.coef_, sk_lasso.coef_, atol=1e-6)
    with pytest.raises(ConfigurationError, match="positive must be True or False, got 'yes'"):
        Lasso(0.1, positive="yes").fit(X, y)


@pytest.mark.parametrize(("l1_ratio", "n_classes"), [(1.0, 2), (0.5, 3)])
def test_l1_and_elastic_net_logistic_reach_scikit_learns_optimum(client, l1_ratio, n_classes) -> None:
    X, score = _sparse_truth_problem(seed=1)
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    y = np.searchsorted(cuts, score + np.random.default_rng(2).normal(size=score.size))
    C = 0.05
    ours = LogisticRegression(C=C, l1_ratio=l1_ratio, tol=1e-10, max_iter=1000).fit(X, y)
    ref = SkLogisticRegression(C=C, l1_ratio=l1_ratio, solver="saga", tol=1e-12, max_iter=200_000).fit(X, y)
    n, d = X.shape
    K = 1 if n_classes == 2 else n_classes
    penalties = {"l2": (1 - l1_ratio) / (C * n)}
    model = Logistic(d, **penalties) if K == 1 else Softmax(d, K, **penalties)
    objective = _with_l1(model, l1_ratio / (C * n))
    _assert_same_optimum(lambda p: objective(p, X, y), _params_of(ours), _params_of(ref), d * K)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-4)


def _warnings_of(call) -> list[tuple[str, str]]:
    """(category, message) of each warning ``call()`` gives but ConvergenceWarning, sorted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return sorted((w.category.__name__, str(w.message)) for w in caught if w.category is not ConvergenceWarning)


@pytest.mark.parametrize(("penalty", "C", "l1_ratio"), [
    ("deprecated", 1.0, 0.0), ("deprecated", 1.0, None), ("deprecated", np.inf, 0.5), ("l1", 1.0, 0.0),
    ("l1", 1.0, 1.0), ("l2", 1.0, 0.5), ("elasticnet", 2.0, 0.3), (None, 3.0, 0.0), (None, 1.0, 0.0),
])
def test_penalty_is_read_and_warned_about_as_scikit_learn_does(penalty, C, l1_ratio) -> None:
    """The same FutureWarnings and UserWarnings as scikit-learn's own fit, word for word."""
    X, y = load_breast_cancer(return_X_y=True)
    reference = SkLogisticRegression(penalty=penalty, C=C, l1_ratio=l1_ratio, solver="saga", max_iter=1)
    read = []
    assert _warnings_of(lambda: read.append(_logistic_penalty(penalty, C, l1_ratio))) == _warnings_of(
        lambda: reference.fit(X[:40], y[:40]))
    expected_share = {"l1": 1.0, "l2": 0.0, None: 0.0}.get(penalty, l1_ratio or 0.0)
    strength, share = read[0]
    assert strength == (0.0 if penalty is None or C == np.inf else 1 / C)
    assert share == (0.0 if strength == 0.0 else expected_share)


def test_deprecated_penalty_fits_what_l1_ratio_fits(client) -> None:
    X, score = _sparse_truth_problem(seed=3)
    y = score + np.random.default_rng(4).normal(size=score.size) > 1.5
    with pytest.warns(FutureWarning,
                      match=r"'penalty' was deprecated in version 1.8 .* l1_ratio=1 instead of penalty='l1'"):
        old = LogisticRegression(penalty="l1", C=0.05, l1_ratio=1.0, tol=1e-8).fit(X, y)
    new = LogisticRegression(C=0.05, l1_ratio=1.0, tol=1e-8).fit(X, y)
    np.testing.assert_array_equal(old.coef_, new.coef_)
    with pytest.warns(FutureWarning, match=r"'penalty' was deprecated"), \
            pytest.raises(ConfigurationError, match=r"l1_ratio must be specified when penalty is elasticnet"):
        LogisticRegression(penalty="elasticnet", l1_ratio=None).fit(X, y)
    assert 0 < np.count_nonzero(new.coef_) < X.shape[1]  # the L1 penalty removed some features
    unpenalised = LogisticRegression(C=np.inf, tol=1e-8).fit(X, y)
    ref = SkLogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(unpenalised.coef_, ref.coef_, atol=1e-6)


def test_warm_start_reuses_the_fit(client) -> None:
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    cold = LogisticRegression(C=0.5, l1_ratio=0.5, tol=1e-6, max_iter=500)
    warm = clone(cold).set_params(warm_start=True)
    cold.fit(X, y), warm.fit(X, y)
    np.testing.assert_array_equal(warm.coef_, cold.coef_)  # the first fit starts from zeros either way
    first = warm.coef_.copy()
    assert warm.fit(X, y).n_iter_[0] == 0  # refit on the same data: already converged where it starts
    np.testing.assert_array_equal(warm.coef_, first)
    warm.set_params(C=0.55).fit(X, y)  # a regularisation path: the next C from the last optimum
    cold.set_params(C=0.55).fit(X, y)
    assert warm.n_iter_[0] < cold.n_iter_[0]
    n = len(X)  # the same optimum, within what tol leaves: objective to 1e-9, same zeros
    objective = _with_l1(Softmax(X.shape[1], 3, l2=0.5 / (0.55 * n)), 0.5 / (0.55 * n))
    assert objective(_params_of(warm), X, y) == pytest.approx(objective(_params_of(cold), X, y), rel=1e-9)
    assert np.array_equal(warm.coef_ == 0, cold.coef_ == 0)

    target = X @ np.linspace(-1, 1, X.shape[1])
    lasso = Lasso(0.05, tol=1e-9, warm_start=True).fit(X, target)
    first_iterations = lasso.n_iter_[0]
    lasso.set_params(alpha=0.06).fit(X, target)  # a path: the next alpha from the last optimum
    fresh = Lasso(0.06, tol=1e-9).fit(X, target)
    assert lasso.n_iter_[0] < min(first_iterations, fresh.n_iter_[0])
    np.testing.assert_allclose(lasso.coef_, fresh.coef_, atol=1e-6)
    with pytest.raises(ConfigurationError, match=r"warm_start=True starts from the fitted coef_, of shape \(13,\), "
                                                 r"but this data needs 5 features x 1 output\(s\); "
                                                 r"fit with warm_start=False"):
        lasso.fit(X[:, :5], target)


def test_pandas_feature_names_round_trip(client, tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    values, target = _sparse_truth_problem(d=6)
    X = pd.DataFrame(values, columns=["age", "height", "weight", "income", "rooms", "distance"])
    y = pd.Series(target > np.median(target))
    fitted = LogisticRegression().fit(X, y)
    assert list(fitted.feature_names_in_) == list(X.columns) and fitted.n_features_in_ == 6
    with pytest.raises(ValueError, match=r"The feature names should match those that were passed during fit"):
        fitted.predict(X[X.columns[::-1]])
    with pytest.warns(UserWarning,
                      match=r"X does not have valid feature names, but LogisticRegression was fitted with"):
        from_array = fitted.predict(values)
    np.testing.assert_array_equal(from_array, fitted.predict(X))
    regression = ElasticNet(0.01).fit(X, target)
    assert list(regression.feature_names_in_) == list(X.columns)
    with pytest.raises(ValueError, match=r"Feature names unseen at fit time:\n- colour"):
        regression.predict(X.rename(columns={"rooms": "colour"}))
    unnamed = ShardedDataset.create(tmp_path / "unnamed", values, target, shard_rows=100)
    assert not hasattr(regression.fit(unnamed), "feature_names_in_")  # not a stale one from the fit before


def test_dask_input_is_written_by_the_workers_to_the_scratch_store_and_removed(client, s3) -> None:
    """A fit from dask arrays writes its temporary dataset with the workers at ``tmp_store``
    (an S3 prefix here), fits what the same rows in memory fit, and leaves nothing there."""
    import fsspec.core

    from dasklbfgs.data.location import Location

    bucket, options = s3
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    labels = np.where(y == 1, "malignant", "benign")
    scratch = f"{bucket}/scratch-{np.random.default_rng().integers(1 << 30)}"
    from_dask = LogisticRegression(C=0.5, shard_rows=100, tmp_store=Location.of(scratch, options), client=client)
    from_dask.fit(da.from_array(X, chunks=(123, 30)), da.from_array(labels, chunks=200))
    in_memory = LogisticRegression(C=0.5, shard_rows=100, client=client).fit(X, labels)
    np.testing.assert_array_equal(from_dask.coef_, in_memory.coef_)  # the same dataset bytes: the same bits
    assert list(from_dask.classes_) == ["benign", "malignant"] and from_dask.n_features_in_ == 30
    assert (from_dask.predict(X) == in_memory.predict(X)).all()
    fs, path = fsspec.core.url_to_fs(scratch, **options)
    assert not fs.exists(path) or fs.ls(path) == []


def test_the_configured_scratch_location_is_used(client, tmp_path) -> None:
    import dask

    from dasklbfgs.errors import StoreError

    X, y = load_breast_cancer(return_X_y=True)
    with dask.config.set({"dasklbfgs.scratch": "nosuchscheme://bucket/scratch"}):
        with pytest.raises(StoreError, match="nosuchscheme://bucket/scratch"):
            LogisticRegression(client=client).fit(X, y)
    from dasklbfgs._fit_stores import temporary_dataset

    with dask.config.set({"dasklbfgs.scratch": str(tmp_path)}):
        with temporary_dataset(None, client, lambda where: ShardedDataset.create(where, X, y, shard_rows=200)) as data:
            assert data.url.startswith(str(tmp_path)) and data.n_samples == len(y)
    assert list(tmp_path.iterdir()) == []


def test_cross_validated_estimators_choose_scikit_learns_alpha(client) -> None:
    """ElasticNetCV and LassoCV on scikit-learn's folds (KFold, rows in order): the same alphas,
    the same mean squared errors by fold, the same chosen alpha and coefficients."""
    from sklearn.linear_model import ElasticNetCV as SkElasticNetCV
    from sklearn.linear_model import LassoCV as SkLassoCV
    from sklearn.model_selection import KFold

    from dasklbfgs.estimators import ElasticNetCV, LassoCV

    rng = np.random.default_rng(12)
    X = rng.normal(size=(600, 5))
    y = X @ np.array([1.5, -1.0, 0.5, 0.0, 0.0]) + rng.normal(size=600)
    ours = ElasticNetCV(l1_ratio=0.7, alphas=6, cv=3, tol=1e-10, standardize=False, client=client).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkElasticNetCV(l1_ratio=0.7, alphas=6, cv=KFold(3), tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-9)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    assert ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-9) and ours.l1_ratio_ == 0.7
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-7)
    assert ours.intercept_ == pytest.approx(ref.intercept_, abs=1e-7)
    lasso = LassoCV(alphas=[0.3, 0.01, 0.1], cv=4, tol=1e-10, standardize=False, client=client).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkLassoCV(alphas=[0.3, 0.01, 0.1], cv=KFold(4), tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(lasso.alphas_, [0.3, 0.1, 0.01])
    assert lasso.alpha_ == ref.alpha_ and lasso.mse_path_.shape == (3, 4)
    np.testing.assert_allclose(lasso.coef_, ref.coef_, atol=1e-7)
    assert clone(LassoCV(alphas=[0.3, 0.01, 0.1], cv=4)).get_params()["alphas"] == [0.3, 0.01, 0.1]
    grid = ElasticNetCV(l1_ratio=[0.3, 0.9], alphas=4, cv=3, tol=1e-10, standardize=False, client=client).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkElasticNetCV(l1_ratio=[0.3, 0.9], alphas=4, cv=KFold(3), tol=1e-12, max_iter=100_000).fit(X, y)
    assert grid.alphas_.shape == ref.alphas_.shape == (2, 4) and grid.mse_path_.shape == ref.mse_path_.shape
    np.testing.assert_allclose(grid.alphas_, ref.alphas_, rtol=1e-9)
    np.testing.assert_allclose(grid.mse_path_, ref.mse_path_, rtol=1e-6)
    assert (grid.l1_ratio_, grid.alpha_) == (ref.l1_ratio_, pytest.approx(ref.alpha_, rel=1e-9))
    np.testing.assert_allclose(grid.coef_, ref.coef_, atol=1e-7)
    with pytest.raises(ConfigurationError, match=r"l1_ratio must be a number in \(0, 1\] \(1: the lasso\) or a "
                                                 r"non-empty list of them, got 0"):
        ElasticNetCV(l1_ratio=0, client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match=r"non-empty list of them, got \[0.5, 1.5\]"):
        ElasticNetCV(l1_ratio=[0.5, 1.5], client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match=r"alphas must be a number of alphas .* got \[-1\]"):
        LassoCV(alphas=[-1], client=client).fit(X, y)


def test_logistic_regression_cv_chooses_scikit_learns_C(client) -> None:
    """LogisticRegressionCV on scikit-learn's folds (StratifiedKFold, rows in order): the same
    held-out scores by fold and C, the same chosen C and l1 ratio, the same coefficients and
    fold paths, in scikit-learn's new and legacy attribute shapes; refit=False averages each
    fold's best as scikit-learn does."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegressionCV as SkLogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    from dasklbfgs.estimators import LogisticRegressionCV

    X, y = make_classification(600, 6, n_informative=4, n_redundant=0, flip_y=0.2, random_state=3)
    common = {"Cs": 4, "l1_ratios": (0,), "scoring": "neg_log_loss", "use_legacy_attributes": False}
    for refit in (True, False):
        ours = LogisticRegressionCV(cv=3, refit=refit, tol=1e-8, max_iter=1000, standardize=False, shard_rows=100,
                                    client=client, **common).fit(X, y)
        ref = SkLogisticRegressionCV(cv=StratifiedKFold(3), refit=refit, tol=1e-10, **common).fit(X, y)
        assert ours.scores_.shape == ref.scores_.shape == (3, 1, 4) and ours.C_ == ref.C_
        np.testing.assert_allclose(ours.Cs_, ref.Cs_)
        np.testing.assert_allclose(ours.scores_, ref.scores_, rtol=1e-6)
        np.testing.assert_allclose(ours.coefs_paths_, ref.coefs_paths_, atol=1e-6)
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-6)
        assert ours.n_iter_.shape == ref.n_iter_.shape and ours.l1_ratio_ == ref.l1_ratio_ == 0.0
    # three classes, an elastic-net grid, the legacy attributes and scikit-learn's FutureWarnings
    X, y = make_classification(450, 5, n_informative=4, n_redundant=0, n_classes=3, flip_y=0.2, random_state=4)
    grid = {"Cs": [1.0, 0.1], "l1_ratios": (0.5, 1), "scoring": "neg_log_loss"}  # saga converges there
    with pytest.warns(FutureWarning, match="use_legacy_attributes"):
        ours = LogisticRegressionCV(cv=3, tol=1e-8, max_iter=1000, standardize=False, shard_rows=150,
                                    client=client, **grid).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkLogisticRegressionCV(cv=StratifiedKFold(3), solver="saga", tol=1e-10, max_iter=100_000,
                                     **grid).fit(X, y)
    assert list(ours.scores_) == list(ref.scores_) == [0, 1, 2]
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1], rtol=1e-6)
    for label in ref.coefs_paths_:
        assert ours.coefs_paths_[label].shape == ref.coefs_paths_[label].shape == (3, 2, 2, 6)
        np.testing.assert_allclose(ours.coefs_paths_[label], ref.coefs_paths_[label], atol=1e-5)
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_array_equal(ours.l1_ratio_, ref.l1_ratio_)
    assert ours.n_iter_.shape == ref.n_iter_.shape == (1, 3, 2, 2)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    assert clone(LogisticRegressionCV(Cs=[1.0, 0.1])).get_params()["Cs"] == [1.0, 0.1]
    for bad, message in (({"Cs": [1.0, 0.0]}, r"Cs must be .* numbers > 0, got \[1.0, 0.0\]"),
                         ({"l1_ratios": (0.5, 2)}, r"l1_ratios must be a list of numbers in \[0, 1\].* got \(0.5, 2\)"),
                         ({"scoring": len}, r"scoring must be None or one of \['accuracy', .* got <built-in"),
                         ({"refit": "yes"}, "refit must be True or False, got 'yes'"),
                         ({"penalty": "elasticnet", "l1_ratios": None}, r"l1_ratios must be an array-like"),
                         ({"use_legacy_attributes": 2}, "use_legacy_attributes must be True, False or 'warn', got 2")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            with pytest.raises(ConfigurationError, match=message):
                LogisticRegressionCV(client=client, **{**grid, **bad}).fit(X, y)


def test_mlp_early_stopping_holds_out_a_fraction_and_keeps_the_best_scoring(client) -> None:
    """MLPClassifier(early_stopping=True) as scikit-learn's: validation_fraction of the rows held
    out (the solvers' seeded draw per shard), scored every iteration, the run stopped on them
    with the parameters of the best scoring (its held-out accuracy among validation_scores_)."""
    from dasklbfgs.data.folds import RandomSplit

    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 30))
    y = (X[:, 0] - X[:, 1] + rng.logistic(size=400) > 0).astype(np.int64)
    fitted = MLPClassifier((16,), alpha=0.0, max_iter=500, early_stopping=True, validation_fraction=0.2,
                           n_iter_no_change=3, tol=0.0, shard_rows=100, client=client).fit(X, y)
    assert fitted.n_iter_[0] < 500 and len(fitted.validation_scores_) >= 4
    assert fitted.best_validation_score_ == max(fitted.validation_scores_)
    held = np.concatenate([RandomSplit(0.2).of_shard(i, np.empty(100)) == 1 for i in range(4)])
    assert np.mean(fitted.predict(X[held]) == y[held]) in fitted.validation_scores_
    plain = MLPClassifier((16,), alpha=1.0, max_iter=500, shard_rows=100, client=client).fit(X, y)
    assert plain.validation_scores_ is None and plain.best_validation_score_ is None
    with pytest.raises(ConfigurationError, match="validation_fraction must be a number in \\(0, 1\\) or None, got 1"):
        MLPClassifier((4,), early_stopping=True, validation_fraction=1, client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match="early_stopping must be True or False, got 'yes'"):
        MLPClassifier((4,), early_stopping="yes", client=client).fit(X, y)


def test_glm_regressors_are_scikit_learns(client, tmp_path) -> None:
    """PoissonRegressor, GammaRegressor and TweedieRegressor (log link, and power 0 with the
    identity link: least squares) reach scikit-learn's coefficients on the same weighted
    data, predict its means, score its D^2 (also by the workers, on a dataset), and refuse
    labels outside their family's support."""
    from sklearn.linear_model import GammaRegressor as SkGammaRegressor
    from sklearn.linear_model import PoissonRegressor as SkPoissonRegressor
    from sklearn.linear_model import TweedieRegressor as SkTweedieRegressor

    from dasklbfgs.errors import ModelDataMismatchError
    from dasklbfgs.estimators import GammaRegressor, PoissonRegressor

    rng = np.random.default_rng(21)
    X = rng.normal(size=(600, 4))
    mu = np.exp(X @ np.array([0.3, -0.2, 0.1, 0.0]) + 0.5)
    w = rng.uniform(0.5, 2.0, size=600)
    cases = [(PoissonRegressor(alpha=0.05), SkPoissonRegressor(alpha=0.05), rng.poisson(mu).astype(float)),
             (GammaRegressor(alpha=0.05), SkGammaRegressor(alpha=0.05), rng.gamma(2.0, mu / 2.0)),
             (TweedieRegressor(power=1.5, alpha=0.05), SkTweedieRegressor(power=1.5, alpha=0.05),
              rng.poisson(mu) * rng.gamma(2.0, 0.5, 600)),
             (TweedieRegressor(power=0.0, alpha=0.05), SkTweedieRegressor(power=0.0, alpha=0.05), mu)]
    for ours, ref, y in cases:
        ours.set_params(tol=1e-10, max_iter=500, shard_rows=150, client=client).fit(X, y, sample_weight=w)
        ref.set_params(tol=1e-12, max_iter=10_000).fit(X, y, sample_weight=w)
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-7)
        assert ours.intercept_ == pytest.approx(ref.intercept_, abs=1e-7)
        np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-6)
        # D^2 is scikit-learn's for our coefficients, to two summation orders; the two fits' D^2
        # differ to first order in their coefficients (the penalty: the deviance is not stationary
        # at the optimum), by up to 6e-10 for the gamma fit depending on the BLAS kernel
        theirs = _holding(ref, ours).score(X, y, sample_weight=w)
        assert ours.score(X, y, sample_weight=w) == pytest.approx(theirs, rel=_summed(theirs, len(y)), abs=0)
        assert theirs == pytest.approx(ref.score(X, y, sample_weight=w), rel=1e-6)  # two fits, equal to 1e-7
    poisson, reference, counts = cases[0]
    data = ShardedDataset.create(tmp_path / "counts", X, counts, sample_weight=w, shard_rows=200)
    theirs = _holding(reference, poisson).score(X, counts, sample_weight=w)
    assert poisson.score(data) == pytest.approx(theirs, rel=_summed(theirs, len(counts)), abs=0)  # by the workers
    with pytest.raises(ModelDataMismatchError, match=r"needs labels >= 0 \(counts, amounts\), but y at .* has "
                                                     r"the smallest value -1"):
        PoissonRegressor(client=client).fit(X, np.where(np.arange(600) == 7, -1.0, counts))
    with pytest.raises(ModelDataMismatchError, match=r"needs labels > 0 \(its variance power is 2\), but y at .* "
                                                     r"has the smallest value 0"):
        GammaRegressor(client=client).fit(X, counts)
    with pytest.raises(ConfigurationError, match=r"power must be 0 or a number >= 1 .* got 0.5"):
        TweedieRegressor(power=0.5, client=client).fit(X, counts)
    with pytest.raises(ConfigurationError, match=r"link='identity' is fitted at power=0 \(least squares\) only"):
        TweedieRegressor(power=1.5, link="identity", client=client).fit(X, counts)


def _huber_optimum(X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None, reference) -> np.ndarray:
    """The minimum of scikit-learn's HuberRegressor objective (its own function) at the
    reference's parameters, reached by L-BFGS-B with tolerances at the precision of floats:
    coefficients, intercept (if fitted) and scale."""
    from scipy.optimize import minimize as scipy_minimize
    from sklearn.linear_model._huber import _huber_loss_and_gradient

    n_params = X.shape[1] + (2 if reference.fit_intercept else 1)
    start = np.r_[np.zeros(n_params - 1), 1.0]
    w = np.ones(len(y)) if sample_weight is None else sample_weight
    bounds = [(None, None)] * (n_params - 1) + [(10 * np.finfo(np.float64).eps, None)]
    return scipy_minimize(_huber_loss_and_gradient, start, args=(X, y, reference.epsilon, reference.alpha, w),
                          jac=True, method="L-BFGS-B", bounds=bounds,
                          options={"gtol": 1e-12, "ftol": 1e-16, "maxiter": 10_000}).x


def _sklearn_objective(params: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None,
                       reference) -> float:
    from sklearn.linear_model._huber import _huber_loss_and_gradient

    w = np.ones(len(y)) if sample_weight is None else sample_weight
    return float(_huber_loss_and_gradient(params, X, y, reference.epsilon, reference.alpha, w)[0])


def test_huber_regressor_is_scikit_learns(client, tmp_path) -> None:
    """HuberRegressor reaches scikit-learn's coefficients, intercept and scale on data with 5% of
    the labels shifted by +50, weighted or not, standardized (the default: the scale passed
    through) or not, with or without an intercept; its outliers_ and R² score are scikit-learn's;
    a ShardedDataset fits the same (no outliers_: its rows are not here); warm_start starts from
    the fitted scale too; the scale's bound keeps it from the replica methods."""
    from sklearn.linear_model import HuberRegressor as SkHuberRegressor
    from sklearn.metrics import r2_score

    from dasklbfgs.models import Huber

    rng = np.random.default_rng(17)
    X = rng.normal(size=(600, 4))
    y = X @ np.array([1.5, -2.0, 0.5, 0.0]) + 3.0 + rng.normal(size=600)
    y[rng.choice(600, 30, replace=False)] += 50.0
    w = rng.uniform(0.5, 2.0, size=600)
    cases = [({}, None), ({"alpha": 0.1}, w), ({"fit_intercept": False, "epsilon": 1.8}, w),
             ({"standardize": False, "alpha": 0.01}, None)]
    for params, sample_weight in cases:
        ours = HuberRegressor(tol=1e-10, max_iter=1000, shard_rows=150, client=client, **params)
        ours.fit(X, y, sample_weight=sample_weight)
        ref = SkHuberRegressor(tol=1e-12, max_iter=10_000, **{k: v for k, v in params.items() if k != "standardize"})
        ref.fit(X, y, sample_weight=sample_weight)
        # scikit-learn's fit stops at L-BFGS-B's default ftol (it sets no other), up to some 1e-5 short of
        # the optimum of its objective, which its own function minimised tightly gives: ours is that
        optimum = _huber_optimum(X, y, sample_weight, ref)
        found = np.r_[ours.coef_, [ours.intercept_] if ref.fit_intercept else [], ours.scale_]
        np.testing.assert_allclose(found, optimum, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=5e-5)
        assert ours.intercept_ == pytest.approx(ref.intercept_, abs=5e-5)
        assert ours.scale_ == pytest.approx(ref.scale_, abs=5e-5)
        assert _sklearn_objective(found, X, y, sample_weight, ref) <= _sklearn_objective(
            np.r_[ref.coef_, [ref.intercept_] if ref.fit_intercept else [], ref.scale_], X, y, sample_weight, ref)
        assert 5 <= ours.n_iter_ <= 1000 and isinstance(ours.n_iter_, int)
        predicted = X @ optimum[:4] + (optimum[4] if ref.fit_intercept else 0.0)
        np.testing.assert_allclose(ours.predict(X), predicted, rtol=1e-7, atol=1e-6)
        assert ours.outliers_.dtype == bool
        assert np.array_equal(ours.outliers_, np.abs(y - predicted) > ours.epsilon * optimum[-1]), params
        assert ours.score(X, y, sample_weight=sample_weight) == pytest.approx(
            r2_score(y, predicted, sample_weight=sample_weight), rel=1e-6)
    assert ours.outliers_.sum() >= 30  # the shifted labels among them
    data = ShardedDataset.create(tmp_path / "rows", X, y, sample_weight=w, shard_rows=200)
    weighted = HuberRegressor(alpha=0.1, tol=1e-10, max_iter=1000, client=client).fit(X, y, sample_weight=w)
    from_data = HuberRegressor(alpha=0.1, tol=1e-10, max_iter=1000, client=client).fit(data)
    np.testing.assert_allclose(from_data.coef_, weighted.coef_, atol=1e-7)
    assert from_data.scale_ == pytest.approx(weighted.scale_, abs=1e-7) and not hasattr(from_data, "outliers_")
    # R^2 = 1 - SSR / SST summed by the workers, shard by shard, and here in one pass: two
    # summation orders of n positive terms, each sum good to n eps, so R^2 to 2 n eps (1 - R^2) / R^2
    here = from_data.score(X, y, sample_weight=w)
    summed = 2 * len(y) * np.finfo(np.float64).eps * max(1.0, (1.0 - here) / here)
    assert from_data.score(data) == pytest.approx(here, rel=summed, abs=0)  # by the workers
    assert here == pytest.approx(weighted.score(X, y, sample_weight=w), rel=1e-6)  # two fits, equal to 1e-7
    warm = HuberRegressor(alpha=0.1, tol=1e-7, max_iter=1000, warm_start=True, client=client)
    first = warm.fit(X, y, sample_weight=w).scale_
    warm.fit(X, y, sample_weight=w)  # from the fitted coefficients and scale: converged already
    assert warm.n_iter_ == 0 and warm.scale_ == first and first == pytest.approx(weighted.scale_, abs=1e-6)
    for epsilon in (1.0, 0.5, "1.35"):
        with pytest.raises(ConfigurationError, match=r"epsilon must be a finite number > 1"):
            HuberRegressor(epsilon=epsilon, client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match=r"alpha must be a number >= 0, got -1"):
        HuberRegressor(alpha=-1, client=client).fit(X, y)
    with pytest.raises(ConfigurationError, match=r"solver 'downpour' does not keep bounds .* Huber"):
        HuberRegressor(solver="downpour", client=client).fit(X, y)
    assert isinstance(HuberRegressor()._model_of(4), Huber)
