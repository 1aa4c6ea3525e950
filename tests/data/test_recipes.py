"""Dataset recipes: synthetic planted models and scikit-learn's bundled datasets."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from sklearn.datasets import load_wine

from dasklbfgs import ShardedDataset, make_dataset
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.errors import ConfigurationError, DatasetExistsError, NotADatasetError


def test_logistic_recipe_writes_train_and_test(tmp_path) -> None:
    splits = make_dataset("logistic", tmp_path / "d", rows=1000, features=6, shard_rows=300, seed=3)
    train, test = splits["train"], splits["test"]
    assert (train.n_samples, train.n_features, train.n_shards) == (1000, 6, 4)
    assert test.n_samples == 200
    assert set(train.label_counts) == {0, 1}
    assert train.attrs["task"] == "binary" and train.attrs["n_classes"] == 2
    # Held-out rows are new draws, not copies of training rows.
    assert not np.isin(test.load_rows(0, 5)[0][:, 0], train.load_rows(0, 1000)[0][:, 0]).any()


def test_synthetic_rows_do_not_depend_on_shard_size(tmp_path) -> None:
    a = make_dataset("regression", tmp_path / "a", rows=500, features=3, shard_rows=64, seed=1)["train"]
    b = make_dataset("regression", tmp_path / "b", rows=500, features=3, shard_rows=500, seed=1)["train"]
    np.testing.assert_array_equal(a.load_rows(0, 500)[1], b.load_rows(0, 500)[1])
    c = make_dataset("regression", tmp_path / "c", rows=500, features=3, shard_rows=500, seed=2)["train"]
    assert not np.array_equal(a.load_rows(0, 500)[1], c.load_rows(0, 500)[1])


def test_planted_model_is_recoverable_from_regression_data() -> None:
    problem = SyntheticProblem("regression", n_features=4, seed=0, noise=0.01)
    X, y = next(problem.blocks(5000))
    coef, intercept = problem.planted()
    A = np.column_stack([X, np.ones(len(X))])
    fit = np.linalg.lstsq(A, y, rcond=None)[0]
    np.testing.assert_allclose(fit, np.r_[coef[:, 0], intercept], atol=0.01)


@pytest.mark.parametrize(("kind", "model"), [("counts", "poisson"), ("amounts", "gamma")])
def test_claims_recipes_plant_a_log_linear_mean(tmp_path, kind, model) -> None:
    """``counts`` (Poisson claim counts) and ``amounts`` (Gamma claim sizes) plant the mean
    ``exp(margin / 4 + shift)``: scikit-learn's unpenalised GLM on the rows recovers the planted
    coefficients, and the datasets imply their family's model."""
    from sklearn.linear_model import GammaRegressor, PoissonRegressor

    from dasklbfgs.models.registry import default_model

    train = make_dataset(kind, tmp_path / kind, rows=40_000, features=3, test_fraction=0)["train"]
    X, y = train.load_rows(0, train.n_samples)
    assert default_model(train) == model and (y.min() >= 0 if kind == "counts" else y.min() > 0)
    fitted = (PoissonRegressor if kind == "counts" else GammaRegressor)(alpha=0.0, max_iter=1000).fit(X, y)
    coef, intercept = SyntheticProblem(kind, n_features=3).planted()
    np.testing.assert_allclose(fitted.coef_, coef[:, 0] / 4.0, atol=0.03)
    assert fitted.intercept_ == pytest.approx(intercept[0] / 4.0 + (-1.5 if kind == "counts" else 7.0), abs=0.03)


def test_the_claims_recipe_plants_a_frequency_with_exposure_and_a_weighted_severity(tmp_path) -> None:
    """``claims``: counts with the offset log(exposure) and named policy features (statsmodels'
    Poisson GLM with the offset recovers the planted rate), and the severity splits of the same
    policies: their average claim sizes weighted by their counts (a Gamma GLM recovers the
    planted mean size, with the dispersion 1 / shape)."""
    import statsmodels.api as sm

    from dasklbfgs.data.claims import FEATURE_NAMES, SEVERITY_SHAPE, Claims
    from dasklbfgs.models.registry import default_model

    made = make_dataset("claims", tmp_path / "claims", rows=150_000, shard_rows=50_000)
    assert sorted(made) == ["severity-test", "severity-train", "test", "train"]
    train, severity = made["train"], made["severity-train"]
    assert train.has_offsets and not train.is_weighted and train.feature_names == FEATURE_NAMES
    assert severity.is_weighted and not severity.has_offsets
    assert (default_model(train), default_model(severity)) == ("poisson", "gamma")
    X, y = train.load_rows(0, train.n_samples)
    exposure = np.exp(train.load_offsets(0, train.n_samples))
    assert 0.05 <= exposure.min() and exposure.max() <= 1.0 and y.sum() / exposure.sum() == pytest.approx(0.1, rel=0.1)
    planted = Claims(0).planted()
    frequency = sm.GLM(y, sm.add_constant(X, prepend=False), family=sm.families.Poisson(),
                       offset=np.log(exposure)).fit()
    np.testing.assert_allclose(frequency.params, planted["frequency"], atol=4 * frequency.bse.max())
    Xs, sizes = severity.load_rows(0, severity.n_samples)
    counts = severity.load_weights(0, severity.n_samples)
    assert counts.min() >= 1 and severity.n_samples == np.count_nonzero(y)  # the policies with claims
    fit = sm.GLM(sizes, sm.add_constant(Xs, prepend=False), family=sm.families.Gamma(sm.families.links.Log()),
                 var_weights=counts).fit()
    np.testing.assert_allclose(fit.params, planted["severity"], atol=4 * fit.bse.max())
    assert fit.scale == pytest.approx(1 / SEVERITY_SHAPE, rel=0.1)
    wide = make_dataset("claims", tmp_path / "wide", rows=100, features=12, test_fraction=0)["train"]
    assert wide.feature_names == [*FEATURE_NAMES, "risk_1", "risk_2", "risk_3"]
    with pytest.raises(ConfigurationError, match="the claims recipe has at least 9 features"):
        make_dataset("claims", tmp_path / "other", rows=100, features=3)


def test_ill_conditioned_features_span_four_decades(tmp_path) -> None:
    train = make_dataset("multinomial", tmp_path / "d", rows=4000, features=5, shard_rows=4000,
                         n_classes=4, ill_conditioned=True, test_fraction=0)["train"]
    std = train.load_rows(0, 4000)[0].std(axis=0)
    assert std.max() / std.min() == pytest.approx(1e4, rel=0.1)
    assert set(train.label_counts) == {0, 1, 2, 3}


def test_bundled_wine_is_split_stratified(tmp_path) -> None:
    splits = make_dataset("wine", tmp_path / "wine", shard_rows=50, seed=0)
    train, test = splits["train"], splits["test"]
    X, y = load_wine(return_X_y=True)
    assert train.n_samples + test.n_samples == len(y)
    assert train.feature_names[0] == "alcohol"
    assert train.attrs["n_classes"] == 3
    both = np.vstack([train.load_rows(0, train.n_samples)[0], test.load_rows(0, test.n_samples)[0]])
    np.testing.assert_allclose(np.sort(both.sum(axis=1)), np.sort(X.sum(axis=1)))


def test_opening_the_folder_points_at_its_splits(tmp_path) -> None:
    make_dataset("breast_cancer", tmp_path / "bc", shard_rows=100)
    with pytest.raises(NotADatasetError, match=r"holds the datasets \['test', 'train'\], not one dataset; open one of "
                                               r"them, e.g. '.*bc/train'"):  # the one a training command wants
        ShardedDataset.open(tmp_path / "bc")
    zarr.create_group(store=str(tmp_path / "bc" / "scratch"), zarr_format=3)  # a group without y: not a dataset
    with pytest.raises(NotADatasetError, match=r"holds the datasets \['test', 'train'\], not one"):
        ShardedDataset.open(tmp_path / "bc")


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [
        ("nope", {}, r"dataset kind must be one of .* got 'nope'"),
        ("logistic", {"rows": 10}, r"the 'logistic' recipe needs rows and features"),
        ("logistic", {"rows": 0, "features": 2}, r"rows must be an integer >= 1 or None, got 0"),
        ("digits", {"rows": 10}, r"the 'digits' recipe takes no rows \(scikit-learn's bundled data have a fixed "
                                 r"size\), got 10"),
        ("wine", {"test_fraction": 1.0}, r"test_fraction must be a number in \[0, 1\), got 1.0"),
        ("multinomial", {"rows": 10, "features": 2, "n_classes": 1}, r"n_classes must be an integer >= 2 or None, "
                                                                     r"got 1"),
        ("patches", {"rows": 10, "vocab_size": 50}, r"the 'patches' recipe takes no vocab_size \(its options: "
                                                     r"rows, patch_size, image_source\), got 50"),
        ("logistic", {"rows": 10, "features": 2, "bogus": 1}, r"make_dataset does not take option 'bogus'"),
    ],
)
def test_recipe_errors(tmp_path, kind, kwargs, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make_dataset(kind, tmp_path / "d", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_recipe_refuses_existing_folder(tmp_path) -> None:
    make_dataset("wine", tmp_path / "d")
    with pytest.raises(DatasetExistsError, match=r"already exists"):
        make_dataset("wine", tmp_path / "d")
    make_dataset("wine", tmp_path / "d", overwrite=True, test_fraction=0)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["train"]
