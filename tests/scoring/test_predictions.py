"""Predictions by the workers: a lazy dask array, or a Zarr store chunked like the input,
row for row, committed atomically; equal to the model's own predictions in this process."""

from __future__ import annotations

import uuid

import dask.array as da
import numpy as np
import pytest
import zarr

from dasklbfgs import ShardedDataset, predict
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, CorruptDatasetError, DatasetExistsError, ModelDataMismatchError
from dasklbfgs.models import LeastSquares, Softmax
from dasklbfgs.models.persist import save_params
from dasklbfgs.scoring.predictions import PREDICTIONS_KEY
from tests._s3 import storage_flags

rng = np.random.default_rng(11)


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
    with pytest.raises(DatasetExistsError, match="already exists; pass overwrite=True"):
        predict(model, params, data, output=tmp_path / "p", client=client)
    predict(model, params, data, output=tmp_path / "p", client=client, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "p"), path="predictions")[:],
                                  model.predict(params, X))


def test_a_failed_prediction_leaves_nothing_at_the_output(client, tmp_path) -> None:
    X = rng.normal(size=(300, 4))
    data = ShardedDataset.create(tmp_path / "d", X, X[:, 0], shard_rows=100)
    (tmp_path / "d" / "X" / "c" / "2" / "0").unlink()  # the last shard's rows are gone
    with pytest.raises(CorruptDatasetError, match=r"missing the chunk file X/c/2/0"):
        predict(LeastSquares(4), np.ones(5), data, output=tmp_path / "p", client=client)
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


def test_the_command_line_writes_predictions_to_a_bucket(client, softmax_data, tmp_path, s3, capsys) -> None:
    from dasklbfgs.cli.main import main

    data, X, model, params = softmax_data
    save_params(tmp_path / "m.npz", model, params)
    url = f"{s3[0]}/predictions-{uuid.uuid4().hex[:6]}.zarr"
    args = ["predict", "--params", str(tmp_path / "m.npz"), "--data", str(data.path), "--output", url,
            "--scheduler", client.scheduler.address, *storage_flags(s3[1])]
    assert main(args) == 0
    assert f"wrote predict predictions, shape (530,), to {url} in " in capsys.readouterr().out
    stored = zarr.open_array(Location.of(url, s3[1]).zarr_store(read_only=True), path="predictions", mode="r")
    np.testing.assert_array_equal(stored[:], model.predict(params, X))
    assert main(args) == 2
    assert "already exists; pass overwrite=True" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--kind", "proba", "--quiet"]) == 0 and capsys.readouterr().out == ""
