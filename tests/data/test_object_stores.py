"""Datasets at fsspec URLs: an S3-compatible server on loopback (moto, reached through s3fs
over HTTP by this process and the workers) and fsspec's memory filesystem. The same rows and
the same training bits as a local copy; atomic commits without a rename; clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs import ShardedDataset
from dasklbfgs.data.location import WRITING_MARKER, Location
from dasklbfgs.data.recipes import make_dataset
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.errors import (
    ConfigurationError,
    CorruptDatasetError,
    DatasetError,
    DatasetExistsError,
    InvalidDataError,
    NotADatasetError,
    StoreError,
)
from dasklbfgs.models import Logistic
from dasklbfgs.sandblaster import sandblaster_lbfgs


def _rows(n: int = 600, d: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, (X @ rng.normal(size=d) > 0).astype(np.float64), rng.uniform(0.5, 2.0, n)


def _url(s3, name: str) -> str:
    return f"{s3[0]}/{name}-{uuid.uuid4().hex[:6]}.zarr"


def test_a_dataset_on_s3_reads_as_written_dense_weighted_and_sparse(s3) -> None:
    bucket, options = s3
    X, y, w = _rows()
    data = ShardedDataset.create(_url(s3, "dense"), X, y, sample_weight=w, shard_rows=250, storage_options=options)
    again = ShardedDataset.open(data.url, storage_options=options)
    assert again.url.startswith(bucket) and again.n_shards == 3 and again.is_weighted
    rows, labels = again.load_rows(0, 600)
    np.testing.assert_array_equal(rows, X)
    np.testing.assert_array_equal(labels, y)
    np.testing.assert_array_equal(again.load_weights(100, 300), w[100:300])
    assert again.describe()["path"] == data.url and again.nbytes_stored() > 0
    S = sp.random(300, 40, density=0.1, format="csr", random_state=1)
    sparse = ShardedDataset.create(_url(s3, "sparse"), S, np.arange(300) % 2, shard_rows=128,
                                   storage_options=options)
    assert (sparse.load_rows(0, 300)[0] != S).nnz == 0 and sparse.nnz == S.nnz


def test_xarray_opens_a_dataset_on_s3_and_its_write_warns_nothing(s3) -> None:
    """Its metadata consolidated with the commit, past the marker of the write under way (which
    zarr, listing the store to consolidate it, would otherwise warn is no Zarr node)."""
    import warnings

    import xarray as xr
    from zarr.errors import ZarrUserWarning

    _, options = s3
    X, y, w = _rows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = ShardedDataset.create(_url(s3, "xarray"), X, y, sample_weight=w, shard_rows=250,
                                     storage_options=options)
    assert not [str(found.message) for found in caught if issubclass(found.category, ZarrUserWarning)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opened = xr.open_zarr(data.location.zarr_store(read_only=True))
    np.testing.assert_array_equal(opened["X"].values, X)
    np.testing.assert_array_equal(ShardedDataset.open(data.url, storage_options=options).load_rows(0, 600)[1], y)


def test_sandblaster_and_downpour_on_s3_give_the_bits_of_a_local_copy(client, s3, tmp_path) -> None:
    X, y, w = _rows(1200)
    local = ShardedDataset.create(tmp_path / "local", X, y, sample_weight=w, shard_rows=300)
    remote = ShardedDataset.create(_url(s3, "train"), X, y, sample_weight=w, shard_rows=300, storage_options=s3[1])
    model = Logistic(5, l2=1e-3)
    runs = [sandblaster_lbfgs(model, data, client=client, maxiter=15) for data in (local, remote)]
    np.testing.assert_array_equal(runs[0].x, runs[1].x)
    assert runs[0].nit == runs[1].nit
    kw = {"client": client, "n_replicas": 1, "batch_size": 100, "epochs": 1, "seed": 3, "eval_every": None}
    steps = [downpour_sgd(model, data, **kw) for data in (local, remote)]
    np.testing.assert_array_equal(steps[0].x, steps[1].x)


def test_a_writer_killed_mid_way_leaves_nothing_an_open_takes_for_data(s3) -> None:
    """Object stores have no rename: the dataset counts once its schema is written, last."""
    url = _url(s3, "killed")
    script = textwrap.dedent(f"""
        import os, numpy as np
        from dasklbfgs import ShardedDataset
        def blocks():
            for i in range(4):
                if i == 2:
                    os._exit(3)  # killed mid-write: two shards written, no schema
                yield np.full((50, 3), float(i)), np.zeros(50)
        ShardedDataset.from_blocks({url!r}, blocks(), shard_rows=50, storage_options={s3[1]!r}, overwrite=True)
    """)

    def killed_writer() -> None:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert done.returncode == 3, done.stderr

    # killed while replacing a dataset: the old one is untouched (the new one was being written beside it)
    ShardedDataset.create(url, np.full((20, 3), 7.0), np.zeros(20), shard_rows=5, storage_options=s3[1])
    killed_writer()
    assert ShardedDataset.open(url, storage_options=s3[1]).load_rows(0, 20)[0].sum() == 7 * 60
    Location.of(url, s3[1]).remove()
    killed_writer()
    left = Location.of(url, s3[1])
    assert left.exists("X/c/0/0") and left.exists(WRITING_MARKER)  # the shards written before the kill
    with pytest.raises(NotADatasetError, match=r"holds no finished dataset: its group has no dasklbfgs schema"):
        ShardedDataset.open(url, storage_options=s3[1])
    with pytest.raises(DatasetExistsError, match=r"already exists; pass overwrite=True"):
        ShardedDataset.create(url, np.ones((10, 3)), np.zeros(10), shard_rows=5, storage_options=s3[1])
    data = ShardedDataset.create(url, np.ones((10, 3)), np.zeros(10), shard_rows=5, storage_options=s3[1],
                                 overwrite=True)
    assert data.n_samples == 10 and not left.exists("X/c/2/0")  # nothing of the killed write
    assert not left.exists(WRITING_MARKER)  # committed


def test_an_overwrite_replaces_the_old_dataset_only_once_complete_and_a_failed_one_keeps_it() -> None:
    url = f"memory://stores-{uuid.uuid4().hex[:6]}/ds.zarr"
    old = ShardedDataset.create(url, np.ones((40, 2)), np.zeros(40), shard_rows=10)
    with pytest.raises(ConfigurationError, match=r"dtype must be a floating or integer dtype, got <U3"):
        ShardedDataset.create(url, np.ones((40, 2)), np.zeros(40), shard_rows=10, overwrite=True, dtype="U3")
    with pytest.raises(InvalidDataError, match=r"the dataset is empty"):
        ShardedDataset.from_blocks(url, iter(()), shard_rows=10, overwrite=True)
    # an error found once writing began (a NaN in a later shard, a source that breaks): the old one stays
    X = np.full((40, 2), 3.0)
    X[25, 1] = np.nan
    with pytest.raises(InvalidDataError, match=r"X holds a non-finite value \(nan\) in shard 2 at row 25"):
        ShardedDataset.create(url, X, np.zeros(40), shard_rows=10, overwrite=True)

    def failing():
        yield np.ones((10, 2)), np.zeros(10)
        raise ValueError("the source failed")

    with pytest.raises(ValueError, match="the source failed"):
        ShardedDataset.from_blocks(url, failing(), shard_rows=10, overwrite=True)
    assert ShardedDataset.open(url).load_rows(0, 40)[0].sum() == 80 and old.load_rows(0, 40)[0].sum() == 80
    assert Location.of(url).parent.children() == ["ds.zarr"]  # nothing left beside it
    # a handle opened before a later write refuses to read the new write's chunks as its own
    ShardedDataset.create(url, np.full((40, 2), 2.0), np.zeros(40), shard_rows=10, overwrite=True)
    with pytest.raises(NotADatasetError, match=r"'memory://.*/ds.zarr' was written again since it was opened"):
        old.load_rows(0, 10)
    assert ShardedDataset.open(url).load_rows(0, 40)[0].sum() == 160
    assert Location.of(url).parent.children() == ["ds.zarr"] and not Location.of(url).exists(WRITING_MARKER)
    # the copy over the old one failing (the old one already gone): the new one is kept beside, and named
    import fsspec

    fs = fsspec.filesystem("memory")
    copy = fs.copy
    fs.copy = lambda *a, **k: (_ for _ in ()).throw(OSError("the store went away"))
    try:
        with pytest.raises(StoreError, match=r"replacing 'memory://.*/ds.zarr' failed while copying .* the complete "
                                             r"new dataset is kept at 'memory://.*/.ds.zarr.writing-"):
            ShardedDataset.create(url, np.full((40, 2), 5.0), np.zeros(40), shard_rows=10, overwrite=True)
    finally:
        fs.copy = copy
    kept = [n for n in Location.of(url).parent.children() if n.startswith(".ds.zarr.writing-")]
    assert ShardedDataset.open(Location.of(url).parent / kept[0]).load_rows(0, 40)[0].sum() == 400
    # a new dataset that fails leaves nothing
    fresh = f"memory://stores-{uuid.uuid4().hex[:6]}/new.zarr"
    with pytest.raises(ValueError, match="the source failed"):
        ShardedDataset.from_blocks(fresh, failing(), shard_rows=10)
    assert not Location.of(fresh).exists()
    with pytest.raises(NotADatasetError, match=r"no dataset at 'memory://.*/new.zarr': the path does not exist"):
        ShardedDataset.open(fresh)
    data = ShardedDataset.create(fresh, np.ones((40, 2)), np.zeros(40), shard_rows=10)
    Location.of(fresh).remove("X/c/1/0")
    with pytest.raises(CorruptDatasetError, match=r"'memory://.*' is missing the chunk file X/c/1/0 \(shard 1"):
        data.load_rows(0, 40)


def test_a_folder_of_splits_at_a_url_is_named_as_such_and_overwrite_spares_other_files() -> None:
    root = f"memory://stores-{uuid.uuid4().hex[:6]}/splits"
    ShardedDataset.create(f"{root}/train", np.ones((10, 2)), np.zeros(10), shard_rows=5)
    with pytest.raises(NotADatasetError, match=r"holds the datasets \['train'\], not one dataset; .*splits/train"):
        ShardedDataset.open(root)
    Location.of(root).put("notes.txt", b"not a dataset")
    with pytest.raises(DatasetExistsError, match=r"refusing to overwrite 'memory://.*/splits': it is not a Zarr "
                                                 r"store or a folder of them"):
        ShardedDataset.create(root, np.ones((4, 2)), np.zeros(4), shard_rows=2, overwrite=True)
    assert Location.of(root).exists("notes.txt") and Location.of(root).exists("train/zarr.json")


@pytest.mark.parametrize("where, options, error, match", [
    ("foo://bucket/x.zarr", None, StoreError, r"unknown URL scheme 'foo' in 'foo://bucket/x.zarr'"),
    ("data/x.zarr", {"anon": True}, ConfigurationError, r"storage_options apply to URLs .* 'data/x.zarr' is a "
                                                          r"local path"),
    (42, None, ConfigurationError, r"a location is a path, a URL or a Location, got int"),
    ("simplecache::s3://bucket/x.zarr", None, StoreError, r"chained URLs such as 'simplecache::s3://bucket/x.zarr' "
                                                            r"\(a cache in front of a store\) are not supported"),
    ("memory://", None, StoreError, r"'memory://' names no location in the 'memory' store"),
])
def test_bad_locations_are_refused_naming_them(where, options, error, match) -> None:
    with pytest.raises(error, match=match):
        ShardedDataset.create(where, np.ones((4, 2)), np.zeros(4), shard_rows=2, storage_options=options)


def test_a_url_is_never_a_local_folder_and_file_urls_are(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"unknown URL scheme 'nosuch'"):
        ShardedDataset.create("nosuch://bucket/train.zarr", np.ones((4, 2)), np.zeros(4), shard_rows=2)
    assert list(tmp_path.iterdir()) == []  # no ./nosuch:/bucket folder
    data = ShardedDataset.create(f"file://{tmp_path}/local.zarr", np.ones((4, 2)), np.zeros(4), shard_rows=2)
    assert data.url == str(tmp_path / "local.zarr") and data.path.is_dir()


def test_a_missing_filesystem_package_names_the_extra(monkeypatch) -> None:
    import fsspec

    def not_installed(scheme):
        raise ImportError(f"Install gcsfs to access Google Storage ({scheme})")

    monkeypatch.setattr(fsspec, "get_filesystem_class", not_installed)
    with pytest.raises(StoreError, match=r"'gs://bucket/x.zarr' needs a package that is not installed: pip install "
                                         r"'dasklbfgs\[gcs\]' \(it installs gcsfs\)"):
        ShardedDataset.open("gs://bucket/x.zarr")


def test_a_store_that_does_not_answer_is_a_store_error_naming_the_url(s3) -> None:
    options = {**s3[1], "client_kwargs": {**s3[1]["client_kwargs"], "endpoint_url": "http://127.0.0.1:9"},
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1}}
    with pytest.raises(StoreError, match=r"'s3://dasklbfgs-tests/nowhere.zarr' did not answer as a store should "
                                         r"\(EndpointConnectionError"):
        ShardedDataset.open(f"{s3[0]}/nowhere.zarr", storage_options=options)


def test_a_url_dataset_has_no_local_path() -> None:
    data = ShardedDataset.create(f"memory://stores-{uuid.uuid4().hex[:6]}/d.zarr", np.ones((4, 2)), np.zeros(4),
                                 shard_rows=2)
    with pytest.raises(ConfigurationError, match=r"'memory://.*/d.zarr' is not a local path \(a URL: use .url\)"):
        _ = data.path
    assert "secret" not in repr(Location.of("memory://x/y", {"secret": "hunter2"}))


def test_data_make_writes_a_recipe_to_a_url_as_to_a_local_folder(s3, tmp_path, capsys) -> None:
    from dasklbfgs.cli.main import main

    bucket, options = s3
    url = _url(s3, "recipe")
    flags = [f"--storage-option={key}={value}" for key, value in (
        ("key", "k"), ("secret", "s"), ("client_kwargs.endpoint_url", options["client_kwargs"]["endpoint_url"]))]
    assert main(["data", "make", "logistic", url, "--rows", "500", "--features", "4", "--shard-rows", "128",
                 "--quiet", *flags]) == 0
    local = make_dataset("logistic", tmp_path / "local", rows=500, features=4, shard_rows=128)
    for split in ("train", "test"):
        remote = ShardedDataset.open(f"{url}/{split}", storage_options=options)
        assert remote.attrs["recipe"] == local[split].attrs["recipe"]
        for rows, expected in zip(remote.load_rows(0, remote.n_samples), local[split].load_rows(0, remote.n_samples)):
            np.testing.assert_array_equal(rows, expected)
    with pytest.raises(DatasetExistsError, match="already exists; pass overwrite=True"):
        make_dataset("logistic", url, rows=500, features=4, storage_options=options)
    again = make_dataset("logistic", url, rows=300, features=4, test_fraction=0.0, overwrite=True,
                         storage_options=options)
    assert set(again) == {"train"} and Location.of(url, options).groups_below() == ["train"]


def test_workers_that_cannot_reach_the_store_are_named(client, s3) -> None:
    data = ShardedDataset.create(_url(s3, "creds"), np.ones((20, 2)), np.zeros(20), shard_rows=10,
                                 storage_options=s3[1])
    unreachable = ShardedDataset.__new__(ShardedDataset)
    unreachable.__dict__.update(data.__dict__)
    options = {**s3[1], "client_kwargs": {**s3[1]["client_kwargs"], "endpoint_url": "http://127.0.0.1:9"},
               "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1}}
    unreachable.location = Location(data.url, options)
    with pytest.raises(DatasetError, match=r"worker tcp://127\.0\.0\.1:\d+ cannot read the dataset at 's3://.*' "
                                           r"\(.*did not answer as a store should.*\); every worker needs it "
                                           r"reachable"):
        unreachable.check_workers_can_read(client)


def test_the_command_line_describes_a_dataset_at_a_url_with_storage_options(s3) -> None:
    import json

    bucket, options = s3
    root = _url(s3, "splits")
    for split, rows in (("train", 30), ("test", 10)):
        ShardedDataset.create(f"{root}/{split}", np.ones((rows, 2)), np.zeros(rows), shard_rows=10,
                              storage_options=options)
    flags = [f"--storage-option={key}={value}" for key, value in (
        ("key", "k"), ("secret", "s"), ("client_kwargs.endpoint_url", options["client_kwargs"]["endpoint_url"]),
        ("client_kwargs.region_name", "us-east-1"))]
    done = subprocess.run([sys.executable, "-m", "dasklbfgs.cli", "info", root, "--json", *flags],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert [(d["path"], d["n_samples"]) for d in described] == [(f"{root}/test", 10), (f"{root}/train", 30)]


def test_storage_option_flags_nest_and_parse_json_values() -> None:
    import argparse

    from dasklbfgs.cli.storage_args import storage_options_from_args

    def parsed(*items):
        return storage_options_from_args(argparse.Namespace(storage_option=list(items)))

    assert parsed() is None
    flags = argparse.Namespace(storage_option=["anon=true"])
    assert storage_options_from_args(flags, "data/train") is None  # for the URLs among the datasets only
    assert storage_options_from_args(flags, "s3://b/train") == {"anon": True}
    assert parsed("anon=true", "client_kwargs.endpoint_url=http://h:1", "client_kwargs.verify=false",
                  "profile=ml", "default_block_size=1048576") == {
        "anon": True, "client_kwargs": {"endpoint_url": "http://h:1", "verify": False}, "profile": "ml",
        "default_block_size": 1048576}
    with pytest.raises(ConfigurationError, match=r"--storage-option takes KEY=VALUE, got 'anon'"):
        parsed("anon")
    with pytest.raises(ConfigurationError, match=r"--storage-option 'anon.x=1': 'anon' was given a value already"):
        parsed("anon=true", "anon.x=1")


def test_storage_option_flags_lay_over_a_configs_storage_options() -> None:
    from dasklbfgs.cli.storage_args import merged_storage_options

    config = {"key": "k", "client_kwargs": {"endpoint_url": "http://a:1", "region_name": "eu"}}
    assert merged_storage_options(config, None) is config
    assert merged_storage_options(None, {"anon": True}) == {"anon": True}
    assert merged_storage_options(config, {"client_kwargs": {"endpoint_url": "http://b:2"}, "key": "k2"}) == {
        "key": "k2", "client_kwargs": {"endpoint_url": "http://b:2", "region_name": "eu"}}
    assert config["client_kwargs"]["endpoint_url"] == "http://a:1"  # the config's own dict untouched
