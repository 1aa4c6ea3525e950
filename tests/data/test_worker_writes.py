"""Datasets written by the workers from dask arrays: the bytes a single writer stores, no row
through the client, and a bad row anywhere failing the whole write with nothing left."""

from __future__ import annotations

import filecmp
import sys
import threading
import time
import uuid
from pathlib import Path

import cloudpickle
import dask
import dask.array as da
import numpy as np
import psutil
import pytest
import scipy.sparse as sp
import zarr

from dasklbfgs import ShardedDataset
from dasklbfgs.data.location import Location
from dasklbfgs.data.worker_writes import results_once_all_ended, shard_pieces
from dasklbfgs.errors import InvalidDataError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the slow write task below, on the workers


def _same_bytes(a: Path, b: Path) -> None:
    """Every file of two dataset folders is equal but the root's zarr.json (its write id)."""
    def walk(cmp: filecmp.dircmp, where: str) -> list[str]:
        return [f"{where}{f}" for f in cmp.diff_files + cmp.left_only + cmp.right_only] + [
            name for sub, c in cmp.subdirs.items() for name in walk(c, f"{where}{sub}/")]

    assert walk(filecmp.dircmp(a, b), "") == ["zarr.json"]


def _schema(data: ShardedDataset) -> dict:
    schema = data.schema
    schema.pop("write_id")
    return schema


def test_shards_are_cut_from_pieces_of_any_length() -> None:
    assert shard_pieces([3, 0, 4, 10], 5) == [[(0, 0, 3), (2, 0, 2)], [(2, 2, 4), (3, 0, 3)], [(3, 3, 8)],
                                              [(3, 8, 10)]]
    assert shard_pieces([10], 10) == [[(0, 0, 10)]]


def test_dask_arrays_are_written_by_the_workers_as_the_single_writer_writes_them(client, tmp_path) -> None:
    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(1003, 7)), (rng.random(1003) < 0.3).astype(np.int64), rng.uniform(0, 2, 1003)
    serial = ShardedDataset.create(tmp_path / "serial", X, y, sample_weight=w, shard_rows=100,
                                   feature_names=list("abcdefg"), attrs={"task": "binary"})
    chunked = ShardedDataset.from_dask(tmp_path / "workers", da.from_array(X, chunks=(137, 3)),
                                       da.from_array(y, chunks=51), w, shard_rows=100, client=client,
                                       feature_names=list("abcdefg"), attrs={"task": "binary"})
    _same_bytes(serial.path, chunked.path)
    assert _schema(chunked) == _schema(serial) and chunked.attrs["task"] == "binary"
    assert chunked.label_weights == pytest.approx({0: w[y == 0].sum(), 1: w[y == 1].sum()}, rel=1e-12)

    S = sp.random(1003, 50, density=0.1, format="csr", random_state=0)
    Y = rng.normal(size=(1003, 2))
    sparse_serial = ShardedDataset.create(tmp_path / "sparse-serial", S, Y, shard_rows=128)
    sparse = ShardedDataset.from_dask(tmp_path / "sparse", da.from_array(S, chunks=(300, 20), asarray=False), Y,
                                      shard_rows=128, client=client)
    _same_bytes(sparse_serial.path, sparse.path)
    assert sparse.is_sparse and _schema(sparse) == _schema(sparse_serial)


def test_create_sends_dask_input_to_the_workers_and_the_client_holds_no_rows(client, tmp_path) -> None:
    """256 MB of rows made on the workers, in 64 MB shards: the client process's memory does
    not grow by a shard (the serial writer, receiving every row, grows by more than one)."""
    rows, width = 2**17, 256
    X = da.random.default_rng(1).standard_normal((rows, width), chunks=(2**15, width))
    y = (X[:, 0] > 0).astype(np.float64)
    me = psutil.Process()
    start, peak, done = me.memory_info().rss, [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], me.memory_info().rss)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with dask.config.set(scheduler=client):
            data = ShardedDataset.create(tmp_path / "big", X, y, shard_rows=2**15)
    finally:
        done.set()
        watcher.join()
    assert data.n_samples == rows and data.n_shards == 4 and data.label_counts is not None
    assert (peak[0] - start) < 32 * 2**20, f"the client grew by {(peak[0] - start) / 2**20:.0f} MiB"
    np.testing.assert_array_equal(data.load_rows(2**15, 2**15 + 3)[0], X[2**15:2**15 + 3].compute())


def test_a_bad_row_anywhere_fails_the_write_naming_it_and_leaves_nothing(client, tmp_path, s3) -> None:
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(900, 4)), rng.normal(size=900)
    X[555, 3] = np.nan
    with pytest.raises(InvalidDataError, match=r"non-finite value \(nan\) in shard 5 at row 555, column 3"):
        ShardedDataset.from_dask(tmp_path / "bad", da.from_array(X, chunks=200), y, shard_rows=100, client=client)
    assert list(tmp_path.iterdir()) == []
    w = np.ones(900)
    w[801] = -1.0
    url = f"{s3[0]}/bad-{uuid.uuid4().hex[:6]}.zarr"
    with pytest.raises(InvalidDataError, match="negative weight .* in shard 8 at row 801"):
        ShardedDataset.from_dask(url, da.from_array(np.nan_to_num(X), chunks=300), y, w, shard_rows=100,
                                 client=client, storage_options=s3[1])
    assert not Location.of(url, s3[1]).exists()
    # replacing a dataset: a failed write keeps the old one; a good one is copied over it in the bucket
    old = ShardedDataset.create(url, np.ones((30, 4)), np.zeros(30), shard_rows=10, storage_options=s3[1])
    with pytest.raises(InvalidDataError, match="negative weight .* in shard 8 at row 801"):
        ShardedDataset.from_dask(url, da.from_array(np.nan_to_num(X), chunks=300), y, w, shard_rows=100,
                                 client=client, storage_options=s3[1], overwrite=True)
    assert ShardedDataset.open(url, storage_options=s3[1]).load_rows(0, 30)[0].sum() == 120
    new = ShardedDataset.from_dask(url, da.from_array(np.nan_to_num(X), chunks=300), y, shard_rows=100,
                                   client=client, storage_options=s3[1], overwrite=True)
    np.testing.assert_array_equal(ShardedDataset.open(url, storage_options=s3[1]).load_rows(0, 900)[0],
                                  np.nan_to_num(X))
    assert new.n_samples == 900 and old.location.parent.children().count(url.rsplit("/", 1)[1]) == 1
    assert not any(name.startswith(f".{url.rsplit('/', 1)[1]}") for name in old.location.parent.children())


def test_from_dask_on_s3_equals_the_local_dataset(client, tmp_path, s3) -> None:
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(500, 6)).astype(np.float32), rng.integers(0, 3, 500)
    local = ShardedDataset.create(tmp_path / "local", X, y, shard_rows=64)
    remote = ShardedDataset.from_dask(f"{s3[0]}/dask-{uuid.uuid4().hex[:6]}.zarr", da.from_array(X, chunks=77), y,
                                      shard_rows=64, client=client, storage_options=s3[1])
    assert _schema(remote) == _schema(local) and remote.dtype == np.float32
    for name in ("X", "y"):
        np.testing.assert_array_equal(zarr.open_group(remote.location.zarr_store(read_only=True), mode="r")[name][:],
                                      zarr.open_group(str(local.path))[name][:])


def test_inputs_that_do_not_fit_together_are_refused(client, tmp_path) -> None:
    X = da.ones((100, 3), chunks=50)
    with pytest.raises(InvalidDataError, match=r"y has shape \(99,\); expected 100 rows"):
        ShardedDataset.from_dask(tmp_path / "a", X, da.ones(99, chunks=50), shard_rows=10, client=client)
    with pytest.raises(InvalidDataError, match="sample_weight has shape"):
        ShardedDataset.from_dask(tmp_path / "a", X, np.ones(100), np.ones(7), shard_rows=10, client=client)
    with pytest.raises(InvalidDataError, match="X must be 2-D"):
        ShardedDataset.from_dask(tmp_path / "a", da.ones(100, chunks=50), np.ones(100), shard_rows=10, client=client)
    with pytest.raises(InvalidDataError, match="y must hold real numbers"):
        ShardedDataset.from_dask(tmp_path / "a", X, np.array(["a"] * 100), shard_rows=10, client=client)
    lying = da.from_delayed(dask.delayed(np.ones)((5, 3)), shape=(6, 3), dtype=float)
    with pytest.raises(InvalidDataError, match="starting at row 0 has 5 rows, but 6 were counted"):
        ShardedDataset.from_dask(tmp_path / "a", lying, np.ones(6), shard_rows=10, client=client)
    assert list(tmp_path.iterdir()) == []


def test_a_write_by_the_workers_without_a_client_says_how_to_get_one(tmp_path) -> None:
    import subprocess
    import sys

    code = ("import dask.array as da\nfrom dasklbfgs import ShardedDataset\n"
            f"ShardedDataset.from_dask({str(tmp_path / 'x')!r}, da.ones((4, 2)), da.ones(4), shard_rows=2)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "ConfigurationError: from_dask is done by the workers of a Dask cluster, and " \
        "there is no Dask client: pass client=" in done.stderr
    assert list(tmp_path.iterdir()) == []


def _slow_write(folder: str, index: int, seconds: float) -> int:
    """Task: mark its start in ``folder``, then after ``seconds`` mark its end (the folder
    made if missing, as a write into a removed store would make it again)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{index}.started").touch()
    time.sleep(seconds)
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{index}.written").touch()
    return index


def _marked(folder: Path, mark: str) -> set[str]:
    """The tasks that have marked ``mark`` in ``folder``."""
    return {p.name.split(".")[0] for p in folder.glob(f"*.{mark}")} if folder.exists() else set()


def test_an_interrupted_write_ends_once_its_running_tasks_have_ended(client, tmp_path) -> None:
    """Ctrl-C (here ``on_ended`` raising as the first task ends, once another is running)
    cancels the tasks and is raised only once those already running have written: nothing
    is written after, where the caller's clean-up has removed the store."""
    folder = tmp_path / "store"
    tasks = [dask.delayed(_slow_write, pure=False)(str(folder), index, 0.2 if index == 0 else 2.0)
             for index in range(5)]
    futures = [client.compute(tasks[0], priority=1), *client.compute(tasks[1:])]

    def interrupt(index: int) -> None:
        deadline = time.monotonic() + 30
        while not _marked(folder, "started") - _marked(folder, "written"):  # until a task is running
            assert time.monotonic() < deadline, "no task ran to be interrupted"
            time.sleep(0.01)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        results_once_all_ended(client, futures, interrupt)
    started, written = _marked(folder, "started"), _marked(folder, "written")
    assert len(started) >= 2 and written == started  # the tasks running at the cancel were waited for
    assert len(started) < 5  # the others never ran
    time.sleep(2.5)
    assert (_marked(folder, "started"), _marked(folder, "written")) == (started, written)  # nothing ran after
    assert all(future.status == "cancelled" for future in futures)
