"""ShardedDataset: round trips for every input type, views, and every error path."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import xarray as xr
import zarr

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import (
    ConfigurationError,
    CorruptDatasetError,
    DatasetExistsError,
    InvalidDataError,
    NotADatasetError,
)


@pytest.fixture
def Xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(103, 4)), rng.integers(0, 3, size=103)


def test_create_from_numpy_round_trips(tmp_path, Xy) -> None:
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25, feature_names=list("abcd"),
                               attrs={"task": "multiclass"})
    assert (ds.n_samples, ds.n_features, ds.n_shards) == (103, 4, 5)
    assert ds.shard_bounds == [(0, 25), (25, 50), (50, 75), (75, 100), (100, 103)]
    assert ds.dtype == np.float64
    assert ds.attrs["task"] == "multiclass"
    assert ds.feature_names == ["a", "b", "c", "d"]
    assert ds.label_counts == {k: int(v) for k, v in zip(*np.unique(y, return_counts=True))}
    Xr, yr = ds.load_rows(0, 103)
    np.testing.assert_array_equal(Xr, X)
    np.testing.assert_array_equal(yr, y)
    reopened = ShardedDataset.open(tmp_path / "d")
    np.testing.assert_array_equal(reopened.load_shard(4)[0], X[100:])


def test_create_keeps_float32_and_converts_ints(tmp_path, Xy) -> None:
    X, y = Xy
    assert ShardedDataset.create(tmp_path / "a", X.astype(np.float32), y, shard_rows=50).dtype == np.float32
    ints = ShardedDataset.create(tmp_path / "b", (X * 10).astype(np.int32), y, shard_rows=50)
    assert ints.dtype == np.float64
    np.testing.assert_array_equal(ints.load_rows(0, 3)[0], (X[:3] * 10).astype(np.int32))


def test_create_from_dask_arrays(tmp_path, Xy) -> None:
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", da.from_array(X, chunks=(17, 4)),
                               da.from_array(y, chunks=31), shard_rows=40)
    np.testing.assert_array_equal(ds.load_rows(0, 103)[0], X)
    assert ds.shard_rows == 40


def test_create_from_xarray_dataset_takes_feature_names(tmp_path, Xy) -> None:
    X, y = Xy
    source = xr.Dataset(
        {"X": (("sample", "feature"), X), "y": (("sample",), y)},
        coords={"feature": ["f0", "f1", "f2", "f3"]},
    )
    ds = ShardedDataset.create(tmp_path / "d", source, shard_rows=30)
    assert ds.feature_names == ["f0", "f1", "f2", "f3"]
    view = ds.to_xarray()
    assert view["X"].dims == ("sample", "feature")
    assert list(view["feature"].values) == ["f0", "f1", "f2", "f3"]
    xr.testing.assert_equal(view["X"].reset_coords(drop=True).compute(),
                            source["X"].reset_coords(drop=True))
    np.testing.assert_array_equal(view["y"].values, y)


def test_xarray_opens_a_dense_dataset_without_a_warning_however_written(client, tmp_path, Xy) -> None:
    """The arrays' metadata is consolidated into the root zarr.json, in the put that commits the
    schema: ``xarray.open_zarr`` finds it (and warns without). A sparse dataset's is not: its
    thousands of shard arrays would lengthen every read of that document, and xarray holds no CSR."""
    X, y = Xy
    w = np.linspace(0.5, 1.5, len(y))
    written = [ShardedDataset.create(tmp_path / "here", X, y, sample_weight=w, shard_rows=25),
               ShardedDataset.from_dask(tmp_path / "workers", da.from_array(X, chunks=(40, 4)), y, w, shard_rows=25,
                                        client=client)]
    for data in written:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opened = xr.open_zarr(str(data.path))
        assert opened["X"].dims == ("sample", "feature") and opened.attrs["dasklbfgs"]["n_samples"] == 103
        np.testing.assert_array_equal(opened["X"].values, X)
        np.testing.assert_array_equal(opened["y"].values, y)
        np.testing.assert_array_equal(opened["w"].values, w)
        np.testing.assert_array_equal(data.to_xarray()["X"].values, X)
    sparse = ShardedDataset.create(tmp_path / "sparse", sp.random(103, 4, density=0.5, format="csr", random_state=0),
                                   y, shard_rows=25)
    assert "consolidated_metadata" not in json.loads((sparse.path / "zarr.json").read_text())
    assert "consolidated_metadata" in json.loads((written[0].path / "zarr.json").read_text())


def test_from_blocks_of_uneven_sizes(tmp_path, Xy) -> None:
    X, y = Xy
    cuts = [0, 7, 8, 60, 61, 103]
    blocks = ((X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))
    ds = ShardedDataset.from_blocks(tmp_path / "d", blocks, shard_rows=20)
    assert ds.n_shards == 6
    np.testing.assert_array_equal(ds.load_rows(0, 103)[0], X)
    np.testing.assert_array_equal(ds.load_rows(0, 103)[1], y)


def test_to_dask_has_one_chunk_per_shard(tmp_path, Xy) -> None:
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=50)
    dX, dy = ds.to_dask()
    assert dX.chunks[0] == (50, 50, 3)
    np.testing.assert_allclose(dX.sum(axis=0).compute(), X.sum(axis=0))
    np.testing.assert_array_equal(dy.compute(), y)


def test_load_rows_reads_only_the_chunks_touched(tmp_path, Xy) -> None:
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25, compressor=None)
    for chunk in (tmp_path / "d" / "X" / "c").iterdir():
        if chunk.name != "1":  # keep only the second row chunk of X
            for f in chunk.rglob("*"):
                f.unlink() if f.is_file() else None
    Xr, _ = ds.load_rows(30, 45)
    np.testing.assert_array_equal(Xr, X[30:45])
    # A range needing a deleted chunk is refused (not read as the fill value); the range
    # above worked, so only the chunks touched were read.
    with pytest.raises(CorruptDatasetError, match=r"missing the chunk file X/c/0/0 \(shard 0, rows 0-25\)"):
        ds.load_rows(0, 5)


CODECS = {
    "default": "default", "none": None, "zstd": zarr.codecs.ZstdCodec(level=3),
    "zstd-checksum": zarr.codecs.ZstdCodec(level=1, checksum=True),
    "blosc-lz4": zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    "gzip (through zarr)": zarr.codecs.GzipCodec(),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_whole_shards_decode_into_the_result_with_zarrs_bits(tmp_path, codec, dtype) -> None:
    """Whole shards are decoded straight from their chunk files (Blosc, Zstd, none; other
    codecs through zarr): the same bits and dtypes as zarr's read, the padded last shard
    cut to its rows, weights and 2-D y too; ranges that cut a shard go through zarr."""
    from dasklbfgs.data._chunks import chunk_decoder

    rng = np.random.default_rng(1)
    X, Y, w = rng.normal(size=(107, 6)), rng.normal(size=(107, 2)).astype(np.float32), rng.random(107)
    ds = ShardedDataset.create(tmp_path / "d", X, Y, sample_weight=w, shard_rows=20, compressor=CODECS[codec],
                               dtype=dtype)
    group = zarr.open_group(str(tmp_path / "d"), mode="r")
    assert (chunk_decoder(group["X"].metadata) is None) == codec.endswith("(through zarr)")
    for start, stop in [(0, 107), (20, 60), (100, 107), (80, 107), (0, 20), (5, 47), (101, 104)]:
        Xr, Yr = ds.load_rows(start, stop)
        assert Xr.dtype == dtype and Yr.dtype == np.float32
        np.testing.assert_array_equal(Xr, group["X"][start:stop])
        np.testing.assert_array_equal(Xr, X[start:stop].astype(dtype))
        np.testing.assert_array_equal(Yr, Y[start:stop])
        np.testing.assert_array_equal(ds.load_weights(start, stop), w[start:stop])
    X4, _ = ds.load_shard(4)
    assert X4.flags.c_contiguous and X4.flags.aligned and X4.flags.writeable


@pytest.mark.parametrize("codec", ["default", "none", "zstd", "blosc-lz4"])
def test_a_damaged_chunk_is_named_not_decoded_as_garbage(tmp_path, Xy, codec) -> None:
    """A truncated chunk file is an error naming the shard (Blosc itself would read past
    the end of the file its header describes)."""
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25, compressor=CODECS[codec])
    chunk = tmp_path / "d" / "X" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-9])  # truncated
    np.testing.assert_array_equal(ds.load_shard(0)[0], X[:25])  # the other shards still read
    with pytest.raises(CorruptDatasetError, match=r"cannot decode X of the dataset at .* in shard\(s\) \[1\] "
                                                  r"\(rows \[25, 50\)\): .*a chunk file is damaged, "
                                                  r"rewrite the dataset"):
        ds.load_shard(1)


def test_two_dimensional_y(tmp_path) -> None:
    X, Y = np.ones((10, 2)), np.arange(20.0).reshape(10, 2)
    ds = ShardedDataset.create(tmp_path / "d", X, Y, shard_rows=4)
    assert ds.y_shape == (10, 2)
    np.testing.assert_array_equal(ds.load_rows(2, 6)[1], Y[2:6])
    assert ds.label_counts is None


def test_describe_reports_sizes_and_labels(tmp_path, Xy) -> None:
    X, y = Xy
    info = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=50).describe()
    assert info["nbytes_in_memory"] == X.nbytes + y.nbytes
    assert 0 < info["nbytes_stored"]
    assert sum(info["label_counts"].values()) == 103
    json.dumps(info)


def test_pickles_by_path(tmp_path, Xy) -> None:
    import pickle

    ds = ShardedDataset.create(tmp_path / "d", *Xy, shard_rows=50)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.path == ds.path and clone.n_shards == ds.n_shards
    X_clone, y_clone = clone.load_rows(40, 100)  # the clone reads the same rows from the store
    np.testing.assert_array_equal(X_clone, Xy[0][40:100])
    np.testing.assert_array_equal(y_clone, Xy[1][40:100])


def test_unpickling_does_not_open_the_store(tmp_path, Xy) -> None:
    """A dataset travels as its path and schema: a Dask scheduler that cannot see the files
    can unpickle it; reading from a store that has gone names the path."""
    import pickle

    ds = ShardedDataset.create(tmp_path / "d", *Xy, shard_rows=50)
    payload = pickle.dumps(ds)
    (tmp_path / "d").rename(tmp_path / "moved")
    clone = pickle.loads(payload)
    assert clone.n_samples == ds.n_samples and clone.shard_bounds == ds.shard_bounds
    with pytest.raises(NotADatasetError, match=r"no dataset at '.*/d' any more: the path does not exist"):
        clone.load_rows(0, 10)
    (tmp_path / "moved").rename(tmp_path / "d")
    np.testing.assert_array_equal(clone.load_rows(0, 10)[0], Xy[0][:10])


def test_overwrite_replaces_only_after_success(tmp_path, Xy) -> None:
    X, y = Xy
    ShardedDataset.create(tmp_path / "d", X, y, shard_rows=50)
    bad = X.copy()
    bad[70, 2] = np.nan
    with pytest.raises(InvalidDataError, match=r"shard 1 at row 70, column 2"):
        ShardedDataset.create(tmp_path / "d", bad, y, shard_rows=50, overwrite=True)
    # The old dataset is intact and nothing else was left behind.
    np.testing.assert_array_equal(ShardedDataset.open(tmp_path / "d").load_rows(0, 103)[0], X)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    ShardedDataset.create(tmp_path / "d", X[:10], y[:10], shard_rows=5, overwrite=True)
    assert ShardedDataset.open(tmp_path / "d").n_samples == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize(
    ("X", "y", "kwargs", "error", "match"),
    [
        (np.ones(10), np.ones(10), {}, InvalidDataError, r"X must be 2-D .* got 1-D"),
        (np.ones((10, 2)), np.ones(9), {}, InvalidDataError, r"X has 10 rows, y has 9"),
        (np.array([["a", "b"]] * 3), np.ones(3), {}, InvalidDataError, r"X must hold real numbers, got dtype <U1"),
        (np.ones((3, 2)), np.array(["x", "y", "z"]), {}, InvalidDataError, r"y must hold real numbers"),
        (np.ones((0, 2)), np.ones(0), {}, InvalidDataError, r"the dataset is empty \(shape \(0, 2\)\)"),
        (np.ones((4, 2)), np.array([0, 1, np.inf, 0]), {}, InvalidDataError,
         r"y holds a non-finite value \(inf\) in shard 1 at row 2"),
        (np.ones((4, 2)), np.ones(4), {"shard_rows": 0}, ConfigurationError,
         r"shard_rows must be a positive integer, got 0"),
        (np.ones((4, 2)), np.ones(4), {"shard_rows": 2.5}, ConfigurationError,
         r"shard_rows must be a positive integer, got 2.5"),
        (np.ones((4, 2)), np.ones(4), {"feature_names": ["a"]}, InvalidDataError,
         r"feature_names has 1 names but X has 2"),
        (np.ones((4, 2)), np.ones(4), {"attrs": {"dasklbfgs": 1}}, ConfigurationError, r"reserved"),
        (np.ones((4, 2)), np.ones(4), {"dtype": "bool"}, ConfigurationError,
         r"dtype must be a floating or integer dtype, got bool"),
        (np.ones((4, 2)), np.ones((4, 1, 1)), {}, InvalidDataError, r"y must be 1-D or 2-D, got 3-D"),
    ],
)
def test_bad_input_raises_and_leaves_nothing(tmp_path, X, y, kwargs, error, match) -> None:
    kwargs = {"shard_rows": 2, **kwargs}
    with pytest.raises(error, match=match):
        ShardedDataset.create(tmp_path / "d", X, y, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_nan_in_a_later_block_names_its_shard(tmp_path) -> None:
    def blocks():
        yield np.ones((5, 2)), np.zeros(5)
        yield np.array([[1.0, np.nan]]), np.zeros(1)

    with pytest.raises(InvalidDataError, match=r"X holds a non-finite value \(nan\) in shard 1 at row 5, column 1"):
        ShardedDataset.from_blocks(tmp_path / "d", blocks(), shard_rows=4)
    assert list(tmp_path.iterdir()) == []


def test_blocks_with_changing_width_are_refused(tmp_path) -> None:
    blocks = [(np.ones((3, 2)), np.zeros(3)), (np.ones((3, 3)), np.zeros(3))]
    with pytest.raises(InvalidDataError, match=r"X has 3 features in the block starting at row 3, expected 2"):
        ShardedDataset.from_blocks(tmp_path / "d", blocks, shard_rows=4)


def test_existing_path_needs_overwrite(tmp_path, Xy) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(DatasetExistsError, match=r"already exists; pass overwrite=True"):
        ShardedDataset.create(tmp_path / "d", *Xy, shard_rows=10)


def test_xarray_without_y_is_refused(tmp_path) -> None:
    source = xr.Dataset({"X": (("sample", "feature"), np.ones((3, 2)))})
    with pytest.raises(InvalidDataError, match=r"no data variable\(s\) \['y'\]"):
        ShardedDataset.create(tmp_path / "d", source, shard_rows=2)
    with pytest.raises(ConfigurationError, match=r"pass y=None"):
        ShardedDataset.create(tmp_path / "d", source, np.ones(3), shard_rows=2)


def test_open_errors(tmp_path, Xy) -> None:
    with pytest.raises(NotADatasetError, match=r"the path does not exist"):
        ShardedDataset.open(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotADatasetError, match=r"no dataset at '.*plain': it is a folder without a zarr.json; a "
                                               r"dataset is a Zarr \(format 3\) group of X and y arrays"):
        ShardedDataset.open(tmp_path / "plain")
    (tmp_path / "plain" / "notes.txt").write_text("not data")
    with pytest.raises(NotADatasetError, match=r"no dataset at '.*notes.txt': it is a file; a dataset is"):
        ShardedDataset.open(tmp_path / "plain" / "notes.txt")
    group = zarr.create_group(store=str(tmp_path / "noy"), zarr_format=3)
    group.create_array("X", shape=(3, 2), dtype="f8")
    with pytest.raises(NotADatasetError, match=r"has no 'y' array"):
        ShardedDataset.open(tmp_path / "noy")
    zarr.create_array(store=str(tmp_path / "arr"), shape=(3,), dtype="f8", zarr_format=3)
    with pytest.raises(NotADatasetError, match=r"is a Zarr array, not a dataset group"):
        ShardedDataset.open(tmp_path / "arr")


def test_row_range_errors(tmp_path, Xy) -> None:
    ds = ShardedDataset.create(tmp_path / "d", *Xy, shard_rows=50)
    with pytest.raises(ConfigurationError, match=r"row range \[100, 104\) is outside the dataset's 103 rows"):
        ds.load_rows(100, 104)
    with pytest.raises(ConfigurationError, match=r"shard index 3 out of range \[0, 3\)"):
        ds.load_shard(3)


def test_values_that_do_not_survive_the_stored_dtype_are_refused(tmp_path) -> None:
    X = np.ones((4, 2))
    X[3, 1] = 1e39
    with pytest.raises(InvalidDataError,
                       match=r"X value 1e\+39 in shard 1 at row 3, column 1 does not fit the stored dtype float32"):
        ShardedDataset.create(tmp_path / "a", X, np.zeros(4), shard_rows=2, dtype="float32")
    blocks = [(np.ones((2, 2)), np.array([0, 1])), (np.ones((2, 2)), np.array([0.5, 2.0]))]
    with pytest.raises(InvalidDataError, match=r"y value 0.5 in shard 1 at row 2 does not fit the stored dtype int64"):
        ShardedDataset.from_blocks(tmp_path / "b", blocks, shard_rows=2)
    blocks = [(np.ones((2, 2), dtype=np.float32), np.zeros(2)), (np.full((2, 2), 1e300), np.zeros(2))]
    with pytest.raises(InvalidDataError, match=r"X value 1e\+300 in shard 1 at row 2, column 0 does not fit"):
        ShardedDataset.from_blocks(tmp_path / "c", blocks, shard_rows=2)
    assert list(tmp_path.iterdir()) == []


def test_overwrite_never_deletes_what_is_not_a_store(tmp_path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    with pytest.raises(DatasetExistsError, match=r"refusing to overwrite .*notes.*not a Zarr store"):
        ShardedDataset.create(folder, np.ones((3, 2)), np.zeros(3), shard_rows=2, overwrite=True)
    assert (folder / "keep.txt").read_text() == "precious"


def test_scalar_y_and_transposed_xarray(tmp_path) -> None:
    with pytest.raises(InvalidDataError, match=r"y must be 1-D or 2-D, got a scalar"):
        ShardedDataset.create(tmp_path / "s", np.ones((3, 2)), 1.0, shard_rows=2)
    X = np.arange(6.0).reshape(3, 2)
    source = xr.Dataset({"X": (("feature", "sample"), X.T), "y": (("sample",), np.zeros(3))})
    ds = ShardedDataset.create(tmp_path / "t", source, shard_rows=2)
    np.testing.assert_array_equal(ds.load_rows(0, 3)[0], X)


def test_many_integer_labels_stay_integral(tmp_path) -> None:
    y = np.arange(1500) % 1200
    ds = ShardedDataset.create(tmp_path / "d", np.ones((1500, 2)), y, shard_rows=500)
    assert ds.label_counts is None and ds.schema["y_integral"] is True
    from dasklbfgs.models import Softmax

    Softmax(2, 1200).check_data(ds)


def _count_file_mappings(monkeypatch, refuse: bool = False) -> list[int]:
    """Wrap the loader's ``mmap.mmap``: the file descriptors it is asked to map (refused
    with the OSError of a file system that cannot map files when ``refuse``)."""
    import mmap

    from dasklbfgs.data import _chunks

    real, files = mmap.mmap, []

    def mapping(fileno, *args, **kwargs):
        if fileno != -1:
            files.append(fileno)
            if refuse:
                raise OSError(19, "No such device")
        return real(fileno, *args, **kwargs)

    monkeypatch.setattr(_chunks.mmap, "mmap", mapping)
    return files


def _mapped_paths() -> str:
    maps = Path("/proc/self/maps")
    return maps.read_text() if maps.exists() else ""


@pytest.mark.parametrize("codec", ["default", "none", "zstd"])
def test_compressed_shards_are_decoded_from_their_mapped_files(tmp_path, monkeypatch, Xy, codec) -> None:
    """A compressed chunk file is decoded from a read-only mapping of it (an uncompressed one
    is read straight into its rows): zarr's bits, an ordinary writeable array of the
    caller's own that pickles (Dask copies shards between workers), and no chunk file still
    mapped once it is read."""
    import mmap
    import pickle

    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25, compressor=CODECS[codec])
    mapped_files = _count_file_mappings(monkeypatch)
    Xs, ys = ds.load_shard(1)
    if hasattr(mmap, "MAP_SHARED"):  # (Windows reads the files)
        assert (len(mapped_files) > 0) == (codec != "none")
    np.testing.assert_array_equal(Xs, zarr.open_group(str(tmp_path / "d"), mode="r")["X"][25:50])
    np.testing.assert_array_equal(ys, y[25:50])
    assert Xs.flags.c_contiguous and Xs.flags.aligned and Xs.flags.writeable
    Xs[0, 0] = 7.0  # the caller's own memory: writing it changes nothing stored
    np.testing.assert_array_equal(ds.load_shard(1)[0][0, 0], X[25, 0])
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(Xs, protocol=5)), Xs)
    assert str(tmp_path / "d") not in _mapped_paths()


def test_a_chunk_file_that_cannot_be_mapped_is_read(tmp_path, monkeypatch, Xy) -> None:
    """A file system that refuses to map files (some FUSE and network mounts) costs a copy,
    not the shard: the chunk file is read instead, with the same bits."""
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25)
    refused = _count_file_mappings(monkeypatch, refuse=True)
    np.testing.assert_array_equal(ds.load_shard(1)[0], X[25:50])
    assert refused or not hasattr(__import__("mmap"), "MAP_SHARED")


@pytest.mark.parametrize("codec", ["default", "zstd"])
def test_a_chunk_that_fails_to_decode_leaves_no_file_mapped(tmp_path, Xy, codec) -> None:
    """The error of a damaged chunk (kept, with its traceback, as Dask keeps a failed task's)
    does not keep the chunk file mapped."""
    X, y = Xy
    ds = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=25, compressor=CODECS[codec])
    chunk = tmp_path / "d" / "X" / "c" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    if codec == "default":  # a Blosc header whose decompressed size is not the chunk's
        raw[4:8] = (len(raw) * 1000).to_bytes(4, "little")
    else:  # a truncated Zstd frame
        del raw[-9:]
    chunk.write_bytes(bytes(raw))
    with pytest.raises(CorruptDatasetError, match=r"cannot decode X .* in shard\(s\) \[1\]") as kept:
        ds.load_shard(1)
    assert kept.value.__cause__ is not None
    assert str(chunk) not in _mapped_paths()
