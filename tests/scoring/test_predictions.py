"""Predictions by the workers: a lazy dask array, or a Zarr store chunked like the input
or a folder of Parquet files, row for row, committed atomically; equal to scikit-learn's
and the model's own predictions in this process."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid

import cloudpickle
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import zarr
from sklearn.linear_model import LinearRegression, LogisticRegression

from dasklbfgs import ShardedDataset, predict
from dasklbfgs.data.location import FILES_COMMIT, Location
from dasklbfgs.errors import ConfigurationError, CorruptDatasetError, ModelDataMismatchError, OutputExistsError
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.models.persist import save_params
from dasklbfgs.scoring.prediction_formats import prediction_columns
from dasklbfgs.scoring.predictions import PREDICTIONS_KEY
from tests._s3 import storage_flags

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the slow model below, on the workers

rng = np.random.default_rng(11)


class SlowLeastSquares(LeastSquares):
    """Each shard's predictions take a second: an interruption finds tasks running."""

    def predict(self, params, X):
        if len(X) > 1:  # not the probe of one row in this process
            time.sleep(1.0)
        return super().predict(params, X)


def _sklearn_softmax(model: Softmax, params: np.ndarray) -> LogisticRegression:
    """scikit-learn's multinomial logistic regression with ``params`` as its coefficients."""
    W, b = model.unpack(params)
    reference = LogisticRegression()
    reference.coef_, reference.intercept_, reference.classes_ = W.T, b, np.arange(model.n_classes)
    return reference


@pytest.fixture(scope="module")
def softmax_data(tmp_path_factory):
    X = rng.normal(size=(530, 5))
    data = ShardedDataset.create(tmp_path_factory.mktemp("pred") / "d", X, np.argmax(X[:, :3], axis=1),
                                 shard_rows=100)
    model = Softmax(5, 3)
    return data, X, model, rng.normal(size=model.n_params)


@pytest.mark.parametrize("kind, method", [("predict", "predict"), ("proba", "predict_proba"),
                                          ("decision", "decision_function")])
def test_a_lazy_prediction_has_a_chunk_per_shard_and_the_model_s_values(client, softmax_data, kind, method) -> None:
    data, X, model, params = softmax_data
    lazy = predict(model, params, data, kind=kind)
    assert isinstance(lazy, da.Array) and lazy.chunks[0] == (100, 100, 100, 100, 100, 30)
    np.testing.assert_array_equal(lazy.compute(), getattr(model, method)(params, X))


def test_predictions_written_by_the_workers_are_chunked_like_the_shards(client, softmax_data, tmp_path) -> None:
    data, X, model, params = softmax_data
    written = predict(model, params, data, output=tmp_path / "p", kind="proba", client=client)
    stored = zarr.open_group(str(tmp_path / "p"), mode="r")
    assert stored["predictions"].chunks == (100, 3) and stored["predictions"].shape == (530, 3)
    assert stored.attrs[PREDICTIONS_KEY]["kind"] == "proba" and stored.attrs[PREDICTIONS_KEY]["data"] == data.url
    np.testing.assert_array_equal(stored["predictions"][:], model.predict_proba(params, X))
    np.testing.assert_array_equal(written.compute(), model.predict_proba(params, X))
    xr = pytest.importorskip("xarray")
    assert xr.open_zarr(str(tmp_path / "p"), consolidated=False)["predictions"].dims == ("row", "column")
    with pytest.raises(OutputExistsError, match="already exists; pass overwrite=True"):
        predict(model, params, data, output=tmp_path / "p", client=client)
    predict(model, params, data, output=tmp_path / "p", client=client, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "p"), path="predictions")[:],
                                  model.predict(params, X))


@pytest.mark.parametrize("kind", ["predict", "proba", "decision"])
def test_parquet_predictions_are_the_zarr_ones_and_scikit_learn_s_row_for_row(client, softmax_data, tmp_path,
                                                                              kind) -> None:
    data, X, model, params = softmax_data
    expected = getattr(_sklearn_softmax(model, params), {"predict": "predict", "proba": "predict_proba",
                                                         "decision": "decision_function"}[kind])(X)
    in_zarr = predict(model, params, data, output=tmp_path / "z", kind=kind, client=client).compute()
    written = predict(model, params, data, output=tmp_path / "p", kind=kind, format="parquet", client=client)
    assert isinstance(written, dd.DataFrame) and written.npartitions == 6
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        FILES_COMMIT, *(f"part-0000{i}.parquet" for i in range(6))]
    read = pd.read_parquet(tmp_path / "p")
    columns = {"predict": ["prediction"], "proba": ["proba_0", "proba_1", "proba_2"],
               "decision": ["decision_0", "decision_1", "decision_2"]}[kind]
    assert list(read.columns) == ["row", *columns] and read["row"].dtype == np.int64
    np.testing.assert_array_equal(read["row"], np.arange(530))
    values = read[columns].to_numpy().reshape(in_zarr.shape)
    np.testing.assert_array_equal(values, in_zarr)
    np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(written.compute().reset_index(drop=True), read)
    described = json.loads((tmp_path / "p" / FILES_COMMIT).read_text())[PREDICTIONS_KEY]
    assert described["kind"] == kind and described["data"] == data.url and described["columns"] == ["row", *columns]


def test_values_of_one_column_are_named_by_what_they_are(client, tmp_path) -> None:
    X = rng.normal(size=(250, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=100)
    params = rng.normal(size=4)
    regression, classifier = LinearRegression(), LogisticRegression()
    regression.coef_, regression.intercept_ = params[None, :3], params[3:]
    classifier.coef_, classifier.intercept_, classifier.classes_ = params[None, :3], params[3:], np.arange(2)
    predict(LeastSquares(3), params, data, output=tmp_path / "values", format="parquet", client=client)
    predict(Logistic(3), params, data, output=tmp_path / "scores", kind="decision", format="parquet", client=client)
    values, scores = pd.read_parquet(tmp_path / "values"), pd.read_parquet(tmp_path / "scores")
    assert list(values.columns) == ["row", "prediction"] and list(scores.columns) == ["row", "decision"]
    np.testing.assert_allclose(values["prediction"], regression.predict(X).ravel(), rtol=1e-12)
    np.testing.assert_allclose(scores["decision"], classifier.decision_function(X), rtol=1e-12)
    assert prediction_columns("decision", ()) == ["decision"]
    assert prediction_columns("proba", (2,)) == ["proba_0", "proba_1"]
    assert prediction_columns("predict", (3,)) == ["prediction_0", "prediction_1", "prediction_2"]
    with pytest.raises(ConfigurationError, match=r"'predict' predictions of shape \(2, 3\) per row do not fit "
                                                 r"columns; write them with format='zarr'"):
        prediction_columns("predict", (2, 3))


def test_an_existing_output_is_refused_without_overwrite_and_replaced_with_it(client, softmax_data,
                                                                             tmp_path) -> None:
    data, X, model, params = softmax_data
    predict(model, params, data, output=tmp_path / "p", client=client)  # a Zarr store
    with pytest.raises(OutputExistsError, match=r"'.*/p' already exists; pass overwrite=True to replace it"):
        predict(model, params, data, output=tmp_path / "p", format="parquet", client=client)
    predict(model, params, data, output=tmp_path / "p", kind="proba", format="parquet", client=client,
            overwrite=True)
    assert not (tmp_path / "p" / "zarr.json").exists()
    np.testing.assert_array_equal(pd.read_parquet(tmp_path / "p")[["proba_0", "proba_1", "proba_2"]],
                                  model.predict_proba(params, X))
    predict(model, params, data, output=tmp_path / "p", client=client, overwrite=True)  # Parquet replaced too
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "p"), path="predictions")[:],
                                  model.predict(params, X))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("not predictions")
    with pytest.raises(OutputExistsError, match=r"refusing to overwrite '.*/notes': it is not a Zarr store or a "
                                                r"folder of them, nor a folder of Parquet predictions"):
        predict(model, params, data, output=tmp_path / "notes", format="parquet", client=client, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["todo.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "p"]


def test_a_format_is_one_of_those_named_and_only_for_an_output(client, softmax_data, tmp_path) -> None:
    data, _, model, params = softmax_data
    with pytest.raises(ConfigurationError, match=r"format must be one of \['zarr', 'parquet'\], got 'csv'"):
        predict(model, params, data, output=tmp_path / "p", format="csv", client=client)
    with pytest.raises(ConfigurationError, match=r"format='parquet' is the format of an output; pass output="):
        predict(model, params, data, format="parquet")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("fmt", ["zarr", "parquet"])
def test_a_failed_prediction_leaves_nothing_at_the_output(client, tmp_path, fmt) -> None:
    X = rng.normal(size=(300, 4))
    data = ShardedDataset.create(tmp_path / "d", X, X[:, 0], shard_rows=100)
    (tmp_path / "d" / "X" / "c" / "2" / "0").unlink()  # the last shard's rows are gone
    with pytest.raises(CorruptDatasetError, match=r"missing the chunk file X/c/2/0"):
        predict(LeastSquares(4), np.ones(5), data, output=tmp_path / "p", format=fmt, client=client)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize("fmt", ["zarr", "parquet"])
def test_an_interrupted_prediction_leaves_nothing_once_its_tasks_have_ended(client, tmp_path, fmt) -> None:
    """Ctrl-C (here raised by the progress callback as the first shard ends) removes what
    was written only once the tasks still running have ended: nothing comes back after."""
    X = rng.normal(size=(400, 3))
    data = ShardedDataset.create(tmp_path / "d", X, X[:, 0], shard_rows=100)

    def interrupt(shards: int, rows: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        predict(SlowLeastSquares(3), np.ones(4), data, output=tmp_path / "p", format=fmt, client=client,
                on_progress=interrupt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    time.sleep(1.5)  # longer than a shard's task
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_predictions_that_do_not_fit_are_refused_naming_why(client, softmax_data, tmp_path) -> None:
    data, _, model, params = softmax_data
    with pytest.raises(ConfigurationError, match=r"kind must be one of \['predict', 'proba', 'decision'\], got "
                                                 r"'probs'"):
        predict(model, params, data, kind="probs")
    with pytest.raises(ConfigurationError, match=r"LeastSquares has no 'proba' predictions \(a regression model\); "
                                                 r"its kinds are \['predict', 'decision'\]"):
        predict(LeastSquares(5), np.zeros(6), data, kind="proba")
    with pytest.raises(ModelDataMismatchError, match=r"expects 4 features but the dataset at .* has 5"):
        predict(LeastSquares(4), np.zeros(5), data, output=tmp_path / "p", client=client)
    assert not (tmp_path / "p").exists()


def test_xarray_opens_written_predictions_without_a_warning(client, softmax_data, tmp_path, s3) -> None:
    """The array's metadata is consolidated into the root zarr.json, in the put that commits
    the predictions: ``xarray.open_zarr`` finds it (and warns without), here and at a URL."""
    import warnings

    from zarr.errors import ZarrUserWarning

    xr = pytest.importorskip("xarray")
    data, X, model, params = softmax_data
    bucket, options = s3
    url = f"{bucket}/predictions-{uuid.uuid4().hex[:6]}.zarr"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predict(model, params, data, output=tmp_path / "p", kind="proba", client=client)
        predict(model, params, data, output=url, storage_options=options, client=client)
    assert not [str(found.message) for found in caught if issubclass(found.category, ZarrUserWarning)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        here = xr.open_zarr(str(tmp_path / "p"))
        there = xr.open_zarr(Location.of(url, options).zarr_store(read_only=True))
    assert here["predictions"].dims == ("row", "column") and here.attrs[PREDICTIONS_KEY]["kind"] == "proba"
    np.testing.assert_array_equal(here["predictions"].values, model.predict_proba(params, X))
    assert there["predictions"].dims == ("row",)
    np.testing.assert_array_equal(there["predictions"].values, model.predict(params, X))


def test_the_summary_of_written_predictions_reads_as_a_sentence() -> None:
    from dasklbfgs.cli.predict import summary

    assert summary("predict", "parquet", 50_000, pd.DataFrame(columns=["row", "prediction"]), "s3://b/p", 1.34) == \
        "wrote 50,000 predictions (columns row, prediction) to s3://b/p in 1.3 s"
    assert summary("proba", "zarr", 50_000, np.empty((50_000, 2)), "/data/p", 0.5) == \
        "wrote the class probabilities of 50,000 rows (array 'predictions' of shape (50000, 2)) to /data/p in 0.5 s"
    assert summary("decision", "parquet", 1, pd.DataFrame(columns=["row", "decision"]), "p", 0.0) == \
        "wrote the decision scores of 1 row (columns row, decision) to p in 0.0 s"


def test_the_command_line_writes_predictions_to_a_bucket(client, softmax_data, tmp_path, s3, capsys) -> None:
    from dasklbfgs.cli.main import main

    data, X, model, params = softmax_data
    save_params(tmp_path / "m.npz", model, params)
    url = f"{s3[0]}/predictions-{uuid.uuid4().hex[:6]}.zarr"
    args = ["predict", "--params", str(tmp_path / "m.npz"), "--data", str(data.path), "--output", url,
            "--scheduler", client.scheduler.address, *storage_flags(s3[1])]
    assert main(args) == 0
    assert f"wrote 530 predictions (array 'predictions' of shape (530,)) to {url} in " in capsys.readouterr().out
    stored = zarr.open_array(Location.of(url, s3[1]).zarr_store(read_only=True), path="predictions", mode="r")
    np.testing.assert_array_equal(stored[:], model.predict(params, X))
    assert main(args) == 2
    assert "already exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--kind", "proba", "--quiet"]) == 0 and capsys.readouterr().out == ""


def test_the_command_line_writes_parquet_to_a_bucket_and_replaces_a_store_there(client, softmax_data, tmp_path, s3,
                                                                                  capsys) -> None:
    from dasklbfgs.cli.main import main

    data, X, model, params = softmax_data
    save_params(tmp_path / "m.npz", model, params)
    url = f"{s3[0]}/predictions-{uuid.uuid4().hex[:6]}"
    args = ["predict", "--params", str(tmp_path / "m.npz"), "--data", str(data.path), "--output", url,
            "--scheduler", client.scheduler.address, *storage_flags(s3[1])]
    assert main([*args, "--kind", "proba"]) == 0  # a Zarr store first
    capsys.readouterr()
    assert main([*args, "--kind", "proba", "--format", "parquet"]) == 2
    assert f"'{url}' already exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*args, "--kind", "proba", "--format", "parquet", "--overwrite"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"wrote the class probabilities of 530 rows (columns row, proba_0, proba_1, proba_2) to "
                          f"{url} in ")
    assert err == ""  # no progress line: stderr is not a terminal
    read = pd.read_parquet(url, storage_options=s3[1])
    np.testing.assert_array_equal(read["row"], np.arange(530))
    np.testing.assert_array_equal(read[["proba_0", "proba_1", "proba_2"]], model.predict_proba(params, X))
    where = Location.of(url, s3[1])
    assert where.children() == [FILES_COMMIT, *(f"part-0000{i}.parquet" for i in range(6))]
    own = f".{where.url.rsplit('/', 1)[-1]}.writing-"  # (the bucket is shared: other tests leave theirs)
    assert [name for name in where.parent.children() if name.startswith(own)] == []


def test_the_command_line_shows_its_progress_on_a_terminal(client, softmax_data, tmp_path, monkeypatch,
                                                          capsys) -> None:
    from dasklbfgs.cli.main import main

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    data, _, model, params = softmax_data
    save_params(tmp_path / "m.npz", model, params)
    args = ["predict", "--params", str(tmp_path / "m.npz"), "--data", str(data.path), "--output",
            str(tmp_path / "p"), "--format", "parquet", "--scheduler", client.scheduler.address]
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(args) == 0
    last = terminal.getvalue().rstrip("\n").rsplit("\r", 1)[-1]
    assert last.startswith("predicting [####################] 6/6 rows/s=") and terminal.getvalue().endswith("\n")
    assert capsys.readouterr().out.startswith(f"wrote 530 predictions (columns row, prediction) to {tmp_path / 'p'} "
                                              "in ")
    terminal.truncate(0)
    assert main([*args, "--overwrite", "--quiet"]) == 0 and terminal.getvalue() == ""
