"""Sample weights in a sharded dataset: stored per shard beside y, checked before anything
is written, read back per row range, described."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs import ShardedDataset
from dasklbfgs.cli.format import format_description
from dasklbfgs.errors import InvalidDataError

rng = np.random.default_rng(5)
X = rng.normal(size=(90, 4))
Y = rng.integers(0, 3, 90).astype(np.float64)
W = rng.random(90) * 2


@pytest.mark.parametrize("kind", ["numpy", "sparse", "dask", "xarray", "blocks"])
def test_weights_round_trip_with_their_rows(tmp_path, kind) -> None:
    if kind == "xarray":
        import xarray as xr

        source = xr.Dataset({"X": (("sample", "feature"), X), "y": ("sample", Y), "w": ("sample", W)})
        data = ShardedDataset.create(tmp_path / "d", source, shard_rows=25)
    elif kind == "blocks":  # uneven blocks of (X, y, w)
        cuts = [0, 7, 40, 41, 90]
        data = ShardedDataset.from_blocks(tmp_path / "d", [(X[a:b], Y[a:b], W[a:b]) for a, b in zip(cuts, cuts[1:])],
                                          shard_rows=25)
    else:
        given = {"numpy": X, "sparse": sp.csr_array(X), "dask": da.from_array(X, chunks=(30, 4))}[kind]
        weights = da.from_array(W, chunks=30) if kind == "dask" else W
        data = ShardedDataset.create(tmp_path / "d", given, Y, sample_weight=weights, shard_rows=25)
    assert data.is_weighted and data.total_weight == pytest.approx(W.sum(), rel=1e-15)
    np.testing.assert_array_equal(data.load_weights(0, 90), W)
    np.testing.assert_array_equal(data.load_weights(20, 55), W[20:55])
    np.testing.assert_array_equal(data.load_shard_weights(3), W[75:])
    assert data.label_weights == pytest.approx({k: W[Y == k].sum() for k in range(3)})
    assert "weighted" in repr(data)
    info = data.describe()
    assert info["weighted"] and info["total_weight"] == data.total_weight
    assert f"weights   sample weights, total {W.sum():.6g}" in format_description(info)


def test_unweighted_data_have_no_weights_and_weigh_one_per_row(tmp_path) -> None:
    data = ShardedDataset.create(tmp_path / "d", X, Y, shard_rows=25)
    assert not data.is_weighted and data.load_weights(0, 10) is None
    assert data.total_weight == 90.0 and data.label_weights is None
    assert "weights" not in format_description(data.describe())


def _with(position: int, value: float) -> np.ndarray:
    weights = W.copy()
    weights[position] = value
    return weights


@pytest.mark.parametrize(("weights", "match"), [
    (_with(60, -0.5), r"sample_weight holds a negative weight \(-0.5\) in shard 2 at row 60; weights must be >= 0"),
    (_with(31, np.nan), r"sample_weight holds a non-finite value \(nan\) in shard 1 at row 31; drop or impute"),
    (_with(89, np.inf), r"sample_weight holds a non-finite value \(inf\) in shard 3 at row 89"),
    (np.zeros(90), r"every sample_weight is 0 \(over 90 rows\): the weighted objective is undefined"),
    (W[:80], r"sample_weight must be 1-D with one number per row of X in the input: X has 90 rows, "
             r"sample_weight has shape \(80,\)"),
    (np.ones((90, 1)), r"sample_weight must be 1-D with one number per row of X in the input"),
    (np.array(["a"] * 90), r"sample_weight must hold real numbers, got dtype <U1"),
])
def test_bad_weights_are_refused_naming_shard_and_row_and_leave_nothing(tmp_path, weights, match) -> None:
    with pytest.raises(InvalidDataError, match=match):
        ShardedDataset.create(tmp_path / "bad", X, Y, sample_weight=weights, shard_rows=25)
    assert list(tmp_path.iterdir()) == []


def test_blocks_give_weights_all_or_none(tmp_path) -> None:
    with pytest.raises(InvalidDataError, match=r"the block starting at row 30 has no sample weights but the first "
                                               r"block had; give sample weights with every block or none"):
        ShardedDataset.from_blocks(tmp_path / "m", [(X[:30], Y[:30], W[:30]), (X[30:], Y[30:])], shard_rows=25)
    with pytest.raises(InvalidDataError, match=r"the block starting at row 30 has sample weights but the first "
                                               r"block had none"):
        ShardedDataset.from_blocks(tmp_path / "m", [(X[:30], Y[:30]), (X[30:], Y[30:], W[30:])], shard_rows=25)
    with pytest.raises(InvalidDataError, match=r"a block must be \(X, y\), \(X, y, sample_weight\) or "
                                               r"\(X, y, sample_weight, offset\), got tuple of length 5"):
        ShardedDataset.from_blocks(tmp_path / "m", [(X, Y, W, W, W)], shard_rows=25)
    assert list(tmp_path.iterdir()) == []
