"""Property-based tests: any valid array round-trips; any split of the rows into blocks
writes the same dataset; any row range reads back exactly."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dasklbfgs import ShardedDataset

finite = st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e300, max_value=1e300)


@st.composite
def datasets(draw):
    n = draw(st.integers(1, 60))
    d = draw(st.integers(1, 5))
    X = draw(arrays(np.float64, (n, d), elements=finite))
    y = draw(arrays(np.int64, (n,), elements=st.integers(-5, 5)))
    shard_rows = draw(st.integers(1, n + 3))
    return X, y, shard_rows


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(datasets(), st.data())
def test_round_trip_and_any_row_range(case, data) -> None:
    X, y, shard_rows = case
    with tempfile.TemporaryDirectory() as tmp:
        ds = ShardedDataset.create(Path(tmp) / "d", X, y, shard_rows=shard_rows)
        assert ds.n_shards == -(-len(X) // shard_rows)
        assert ds.shard_bounds[0][0] == 0 and ds.shard_bounds[-1][1] == len(X)
        start = data.draw(st.integers(0, len(X)))
        stop = data.draw(st.integers(start, len(X)))
        Xr, yr = ds.load_rows(start, stop)
        np.testing.assert_array_equal(Xr, X[start:stop])
        np.testing.assert_array_equal(yr, y[start:stop])
        assert ds.label_counts == {int(k): int(v) for k, v in zip(*np.unique(y, return_counts=True))}


@SETTINGS
@given(datasets(), st.lists(st.integers(1, 20), min_size=1, max_size=8))
def test_any_block_split_writes_the_same_dataset(case, sizes) -> None:
    X, y, shard_rows = case
    cuts = np.cumsum([0, *sizes])
    cuts = [int(c) for c in cuts if c < len(X)] + [len(X)]
    blocks = [(X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    with tempfile.TemporaryDirectory() as tmp:
        whole = ShardedDataset.create(Path(tmp) / "a", X, y, shard_rows=shard_rows)
        pieces = ShardedDataset.from_blocks(Path(tmp) / "b", blocks, shard_rows=shard_rows)
        assert pieces.shard_bounds == whole.shard_bounds
        np.testing.assert_array_equal(pieces.load_rows(0, len(X))[0], whole.load_rows(0, len(X))[0])
        schemas = [ds.schema for ds in (pieces, whole)]
        assert schemas[0].pop("write_id") != schemas[1].pop("write_id")  # each write has its own
        assert schemas[0] == schemas[1]
