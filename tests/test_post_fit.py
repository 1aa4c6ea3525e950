"""The estimators once fitted: tables scored through the transform their fit recorded (the
ingest's one-hot and hashed columns), pandas here and Dask by the workers; the estimator's
own client computing the scores; X that is not 2-D refused."""

from __future__ import annotations

import time

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from distributed import Client
from sklearn.datasets import load_wine
from sklearn.feature_extraction import FeatureHasher
from sklearn.preprocessing import StandardScaler

from dasklbfgs import ShardedDataset
from dasklbfgs.data.frame_input import decide_features
from dasklbfgs.errors import ConfigurationError, InvalidDataError, ModelDataMismatchError
from dasklbfgs.estimators import LinearRegression, LogisticRegression, MLPClassifier
from tests._tables import one_hot, table

FEATURES = ["age", "income", "member", "city"]
HASHED = {"hash_features": 2**8, "one_hot_max_levels": 8}  # user (~400 levels) hashed, city one-hot
METHODS = ("predict", "predict_proba", "predict_log_proba", "decision_function")


def _scaled(df: pd.DataFrame) -> pd.DataFrame:
    """Age in decades: the features on similar scales, for a quick fit."""
    return df.assign(age=df.age / 10.0)


@pytest.mark.parametrize("hashed", [False, True], ids=["one-hot", "hashed"])
def test_a_table_is_scored_with_the_transform_its_dataset_recorded(client, tmp_path, hashed) -> None:
    """A fit on a dataset written from a table predicts from raw tables of the same columns
    (in any order, with others beside) what it predicts from the dataset's rows."""
    df = _scaled(table(600, seed=6))
    columns = [*FEATURES, "user"] if hashed else FEATURES
    data = ShardedDataset.from_dataframe(tmp_path / "data", dd.from_pandas(df, npartitions=3), label="label",
                                         features=columns, shard_rows=128, client=client, **(HASHED if hashed else {}))
    assert data.is_sparse == hashed
    fitted = LogisticRegression(C=0.5, tol=1e-6).fit(data)
    assert fitted.frame_features_ == data.frame_features and fitted.n_features_in_ == data.n_features
    raw = df[[*reversed(columns), "label"]]  # the columns in another order, the label beside
    for method in METHODS:
        on_rows = getattr(fitted, method)(data).compute()
        np.testing.assert_allclose(getattr(fitted, method)(raw), on_rows, rtol=1e-12, atol=1e-15)
        lazy = getattr(fitted, method)(dd.from_pandas(raw, npartitions=4))
        assert isinstance(lazy, da.Array) and lazy.chunks[0] == (150, 150, 150, 150)
        np.testing.assert_allclose(lazy.compute(), on_rows, rtol=1e-12, atol=1e-15)
    assert fitted.score(raw, (df.label == "yes").astype(int)) == pytest.approx(fitted.score(data), abs=1e-15)
    assert fitted.score(dd.from_pandas(raw, npartitions=2), (df.label == "yes").astype(int)) == pytest.approx(
        fitted.score(data), abs=1e-15)


def test_unseen_levels_set_no_column_and_hashed_ones_are_hashed_as_feature_hasher_does(client, tmp_path) -> None:
    df = _scaled(table(600, seed=7))
    data = ShardedDataset.from_dataframe(tmp_path / "data", df, label="label", features=[*FEATURES, "user"],
                                         shard_rows=200, client=client, **HASHED)
    fitted = LogisticRegression(C=0.5, tol=1e-6).fit(data)
    new = pd.DataFrame({"age": [3.0, 4.5, 6.1], "income": [0.5, -1.0, 0.0], "member": [True, False, True],
                        "city": ["lima", None, "rome"], "user": ["u3", "someone new", "u3"]})
    hashed = FeatureHasher(2**8, input_type="string").transform([[f"user={u}"] for u in new.user])
    rows = sp.hstack([sp.csr_array(new[["age", "income", "member"]].to_numpy(float)), sp.csr_array(one_hot(new)),
                      hashed]).toarray()  # scikit-learn's encoders: unseen and missing cities in no column
    np.testing.assert_allclose(fitted.decision_function(new), rows @ fitted.coef_[0] + fitted.intercept_[0],
                               rtol=1e-12)
    np.testing.assert_allclose(fitted.decision_function(dd.from_pandas(new, npartitions=2)).compute(),
                               rows @ fitted.coef_[0] + fitted.intercept_[0], rtol=1e-12)


def test_a_fit_on_a_table_encodes_it_as_the_ingest_does(client, tmp_path) -> None:
    """pandas and Dask tables with text columns fit what the dataset written from them fits,
    and their predictions are scored through the same transform."""
    df = _scaled(table(600, seed=8))
    data = ShardedDataset.from_dataframe(tmp_path / "data", df, label="label", features=FEATURES, shard_rows=200,
                                         client=client)
    from_data = LogisticRegression(C=0.5, tol=1e-8).fit(data)
    from_pandas = LogisticRegression(C=0.5, tol=1e-8).fit(df[FEATURES], df.label)
    frame = dd.from_pandas(df, npartitions=3)
    from_dask = LogisticRegression(C=0.5, tol=1e-8).fit(frame[FEATURES], frame.label)
    for fitted in (from_pandas, from_dask):
        np.testing.assert_allclose(fitted.coef_, from_data.coef_, atol=1e-6)
        assert list(fitted.classes_) == ["no", "yes"]
        assert list(fitted.feature_names_in_) == data.feature_names and fitted.frame_features_.label is None
        assert fitted.frame_features_.one_hot == data.frame_features.one_hot
        np.testing.assert_array_equal(fitted.predict(frame).compute(), fitted.predict(df))
    np.testing.assert_array_equal(from_pandas.predict(df), from_pandas.classes_[from_data.predict(data).compute()])
    hashed = LinearRegression(alpha=1.0, **HASHED).fit(df[[*FEATURES, "user"]], df.income * 2 + df.age)
    assert hashed.frame_features_.hashed == ("user",) and hashed.n_features_in_ == 1 + 2 + 3 + 2**8
    assert hashed.score(frame, frame.income * 2 + frame.age) == pytest.approx(
        hashed.score(df, df.income * 2 + df.age), abs=1e-12)
    refit = from_pandas.fit(df[["age", "income"]], df.label)  # numbers only: no transform kept from before
    assert not hasattr(refit, "frame_features_") and list(refit.feature_names_in_) == ["age", "income"]


def test_tables_that_do_not_fit_the_transform_are_refused(client) -> None:
    df = _scaled(table(300, seed=9))
    fitted = LogisticRegression(C=0.5).fit(df[FEATURES], df.label)
    missing = r"X has no column\(s\) \['city'\]; LogisticRegression was fitted on a table whose columns " \
              r"\['age', 'income', 'member', 'city'\] became its features"
    with pytest.raises(InvalidDataError, match=missing):
        fitted.predict(df[["age", "income", "member"]])
    with pytest.raises(InvalidDataError, match=missing):  # at once, before any partition is read
        fitted.predict_proba(dd.from_pandas(df.drop(columns="city"), npartitions=2))
    with pytest.raises(InvalidDataError, match=r"column 'income' has a missing value at row 2; drop or impute"):
        fitted.predict(df.assign(income=df.income.where(df.index != 2)))
    with pytest.raises(InvalidDataError, match="column 'user' has more than 32 levels: hash it"):
        LogisticRegression().fit(df[[*FEATURES, "user"]], df.label)
    with pytest.raises(ConfigurationError, match=r"MLPClassifier takes dense rows, but hash_features=256 makes a "
                                                 r"table's rows sparse: leave it None"):
        MLPClassifier((4,), **HASHED).fit(df[[*FEATURES, "user"]], df.label)
    features, _ = decide_features(df[FEATURES], label=None, one_hot_max_levels=8, hash_features=None, client=None)
    with pytest.raises(ConfigurationError, match="these features were decided for a table without labels"):
        features.transform(df)


def _wine() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_wine(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_x_that_is_not_2_d_is_refused_naming_its_shape(client) -> None:
    X, y = _wine()
    fitted = LinearRegression().fit(X[:, :1], y)
    one_d = r"X must be 2-D \(samples x features\), got shape \(178,\); pass 2-D rows: X.reshape\(-1, 1\)"
    with pytest.raises(InvalidDataError, match=one_d):
        fitted.predict(da.from_array(X[:, 0], chunks=50))
    with pytest.raises(InvalidDataError, match=one_d):
        fitted.score(da.from_array(X[:, 0], chunks=50), y)
    with pytest.raises(InvalidDataError, match=one_d):
        fitted.predict(dd.from_pandas(pd.Series(X[:, 0]), npartitions=2))
    with pytest.raises(InvalidDataError, match=one_d):
        LinearRegression().fit(da.from_array(X[:, 0], chunks=50), da.from_array(y, chunks=50))
    with pytest.raises(InvalidDataError, match=r"X must be 2-D \(samples x features\), got shape \(178, 1, 1\)$"):
        fitted.predict(da.from_array(X[:, :1, None], chunks=50))
    column = fitted.predict(da.from_array(X[:, :1], chunks=50)).compute()  # the advice taken
    np.testing.assert_array_equal(column, fitted.predict(X[:, :1]))


def test_a_sparse_dataset_is_refused_by_an_estimator_of_dense_rows(client, tmp_path) -> None:
    import scipy.sparse as sparse

    X, y = _wine()
    fitted = MLPClassifier((4,), max_iter=5).fit(X[:60, :4], (y[:60] > y.mean()).astype(int))
    data = ShardedDataset.create(tmp_path / "csr", sparse.csr_matrix(X[:60, :4]), (y[:60] > y.mean()).astype(int),
                                 shard_rows=30)
    with pytest.raises(ModelDataMismatchError, match=r"MLPClassifier takes dense rows, but X at '.*csr' is sparse"):
        fitted.predict(data)


def _graphs_sent(by: Client, since: float) -> int:
    """How many task graphs ``by`` has sent the scheduler since ``since`` (its events)."""
    return sum(1 for at, event in by.get_events(by.id) if at >= since and event.get("action") == "update-graph")


def test_score_computes_with_the_estimator_s_client(client, tmp_path) -> None:
    """score on a dataset or dask input goes through the estimator's ``client`` (a second
    client of the same cluster here), not the active one."""
    X, y = _wine()
    data = ShardedDataset.create(tmp_path / "wine", X, y, shard_rows=64)
    fitted = LogisticRegression(tol=1e-6).fit(data)
    expected = fitted.score(X, y)
    with Client(client.scheduler.address, set_as_default=False) as own:
        fitted.set_params(client=own)
        since = time.time()
        assert fitted.score(data) == pytest.approx(expected, abs=1e-15)
        assert fitted.score(dd.from_pandas(pd.DataFrame(X), npartitions=3), y) == pytest.approx(expected, abs=1e-15)
        assert _graphs_sent(own, since) >= 3 and _graphs_sent(client, since) == 0
