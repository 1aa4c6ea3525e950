"""Per-row offsets: stored with their rows by every writer, refused when bad (naming shard and
row), and used by training (every path of Sandblaster, a replica solver), evaluation and
prediction: a Poisson fit with a log-exposure offset is statsmodels' ``GLM(..., offset=)``."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import statsmodels.api as sm
from sklearn.metrics import mean_poisson_deviance

import dasklbfgs
from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import InvalidDataError, ModelDataMismatchError
from dasklbfgs.models import MLP, Logistic, Poisson

RNG = np.random.default_rng(11)
N, D = 600, 4
X = RNG.normal(size=(N, D))
EXPOSURE = RNG.uniform(0.2, 3.0, size=N)
OFFSET = np.log(EXPOSURE)
COEF = np.array([0.4, -0.3, 0.2, 0.0])
COUNTS = RNG.poisson(EXPOSURE * np.exp(X @ COEF - 0.5)).astype(float)
WEIGHTS = RNG.uniform(0.5, 2.0, size=N)
TIGHT = {"gtol": 1e-10, "ftol": 1e-14, "maxiter": 500}


def _statsmodels(family, y, offset, weights=None):
    """statsmodels' unpenalised fit, in our layout (coefficients, then the intercept)."""
    fit = sm.GLM(y, sm.add_constant(X, prepend=False), family=family, offset=offset,
                 var_weights=weights).fit(tol=1e-13, maxiter=200)
    return np.asarray(fit.params)


@pytest.fixture(scope="module")
def counts(tmp_path_factory):
    return ShardedDataset.create(tmp_path_factory.mktemp("offsets") / "counts.zarr", X, COUNTS, offset=OFFSET,
                                 shard_rows=128)


def test_every_writer_stores_the_offsets_with_their_rows(tmp_path, client, counts) -> None:
    assert counts.has_offsets and not counts.is_weighted and "offsets" in repr(counts)
    np.testing.assert_array_equal(counts.load_offsets(0, N), OFFSET)
    np.testing.assert_array_equal(counts.load_offsets(100, 300), OFFSET[100:300])
    assert [rows.offset.tolist() for rows in counts.load_shards([1, 4])] == [
        OFFSET[128:256].tolist(), OFFSET[512:].tolist()]
    blocks = ShardedDataset.from_blocks(
        tmp_path / "blocks.zarr", ((X[i : i + 50], COUNTS[i : i + 50], None, OFFSET[i : i + 50])
                                   for i in range(0, N, 50)), shard_rows=128)
    lazy = ShardedDataset.create(tmp_path / "dask.zarr", da.from_array(X, chunks=(100, D)), COUNTS,
                                 offset=da.from_array(OFFSET, chunks=100), shard_rows=128)  # by the workers
    frame = pd.DataFrame({**{f"x{j}": X[:, j] for j in range(D)}, "claims": COUNTS, "log_exposure": OFFSET})
    table = ShardedDataset.from_dataframe(tmp_path / "frame.zarr", frame, label="claims", offset="log_exposure",
                                          shard_rows=128, client=client)
    assert table.feature_names == [f"x{j}" for j in range(D)]  # the offset is not a feature
    for written in (blocks, lazy, table):
        np.testing.assert_array_equal(written.load_offsets(0, N), OFFSET)
        np.testing.assert_array_equal(written.load_rows(0, N)[0], X)
    assert blocks.describe()["offsets"] is True
    np.testing.assert_array_equal(lazy.offsets_to_dask().compute(), OFFSET)


def test_bad_offsets_are_refused_naming_where_and_nothing_is_written(tmp_path) -> None:
    bad = OFFSET.copy()
    bad[300] = np.inf
    with pytest.raises(InvalidDataError, match=r"offset holds a non-finite value \(inf\) in shard 2 at row 300"):
        ShardedDataset.create(tmp_path / "bad.zarr", X, COUNTS, offset=bad, shard_rows=128)
    with pytest.raises(InvalidDataError, match=r"offset must be 1-D with one number per row of X in the input: "
                                               r"X has 600 rows, offset has shape \(599,\)"):
        ShardedDataset.create(tmp_path / "bad.zarr", X, COUNTS, offset=OFFSET[:-1], shard_rows=128)
    with pytest.raises(InvalidDataError, match="the block starting at row 50 has no offsets but the first block had"):
        ShardedDataset.from_blocks(tmp_path / "bad.zarr", [(X[:50], COUNTS[:50], None, OFFSET[:50]),
                                                           (X[50:], COUNTS[50:])], shard_rows=128)
    assert not (tmp_path / "bad.zarr").exists()


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_a_poisson_fit_with_exposure_is_statsmodels(tmp_path, client, counts, weighted) -> None:
    data = counts if not weighted else ShardedDataset.create(
        tmp_path / "weighted.zarr", X, COUNTS, offset=OFFSET, sample_weight=WEIGHTS, shard_rows=128)
    expected = _statsmodels(sm.families.Poisson(), COUNTS, OFFSET, WEIGHTS if weighted else None)
    from_store = minimize(Poisson(D), data, client=client, cache=False, **TIGHT)
    cached = minimize(Poisson(D), data, client=client, **TIGHT)
    for result in (from_store, cached):
        assert result.success
        np.testing.assert_allclose(result.x, expected, rtol=1e-6, atol=1e-8)
    assert not np.allclose(minimize(Poisson(D), ShardedDataset.create(tmp_path / "plain.zarr", X, COUNTS,
                                                                      shard_rows=128), client=client).x,
                           expected, atol=1e-2)  # without the offsets, another fit


def test_evaluation_and_prediction_use_the_offsets(tmp_path, client, counts) -> None:
    params = _statsmodels(sm.families.Poisson(), COUNTS, OFFSET)
    means = EXPOSURE * np.exp(X @ params[:D] + params[D])
    np.testing.assert_allclose(dasklbfgs.predict(Poisson(D), params, counts).compute(), means, rtol=1e-12)
    written = dasklbfgs.predict(Poisson(D), params, counts, output=tmp_path / "predicted.zarr", client=client)
    np.testing.assert_allclose(np.asarray(written), means, rtol=1e-12)
    scores = dasklbfgs.evaluate(Poisson(D), params, counts, client=client)
    assert scores["mean_tweedie_deviance"] == pytest.approx(mean_poisson_deviance(COUNTS, means), rel=1e-10)
    held_out = minimize(Poisson(D), counts, client=client, eval_data=counts, **TIGHT).history[-1]
    assert held_out["eval_mean_tweedie_deviance"] == pytest.approx(scores["mean_tweedie_deviance"], rel=1e-6)
    assert "eval_d2" in held_out and "eval_rmse" not in held_out  # a GLM's run is scored by its deviance


def test_sparse_rows_an_online_start_and_a_logistic_offset(tmp_path, client) -> None:
    sparse = ShardedDataset.create(tmp_path / "sparse.zarr", sp.csr_array(X), COUNTS, offset=OFFSET, shard_rows=128)
    expected = _statsmodels(sm.families.Poisson(), COUNTS, OFFSET)
    np.testing.assert_allclose(minimize(Poisson(D), sparse, client=client, **TIGHT).x, expected, rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(minimize(Poisson(D), sparse, client=client, online_passes=1, **TIGHT).x, expected,
                               rtol=1e-6, atol=1e-8)
    labels = (RNG.uniform(size=N) < 1 / (1 + np.exp(-(X @ COEF + OFFSET)))).astype(float)
    binary = ShardedDataset.create(tmp_path / "binary.zarr", X, labels, offset=OFFSET, shard_rows=128)
    np.testing.assert_allclose(minimize(Logistic(D), binary, client=client, **TIGHT).x,
                               _statsmodels(sm.families.Binomial(), labels, OFFSET), rtol=1e-6, atol=1e-8)


def test_a_replica_solver_trains_on_the_offsets(client, counts) -> None:
    expected = _statsmodels(sm.families.Poisson(), COUNTS, OFFSET)
    result = minimize(Poisson(D), counts, "sync", client=client, replicas=2, epochs=60, batch_size=100,
                      learning_rate=0.3, seed=0)
    np.testing.assert_allclose(result.x, expected, atol=0.05)


def test_a_model_without_offsets_refuses_data_with_them(counts) -> None:
    with pytest.raises(ModelDataMismatchError, match=r"MLP does not take offsets, but the dataset at .* has them"):
        minimize(MLP(D, (3,)), counts)
