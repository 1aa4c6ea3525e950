"""Reading shards at a URL: every object of a read fetched at once and decoded by the local
fast path's decoders (the bits of a local read), transient store failures retried within the
retry budget (a server stopped mid-run, 503 answers, a worker killed while it loads), and a
store that stays away a StoreError naming the URL, never a hang."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs import ShardedDataset
from dasklbfgs.data._fetch import RETRY_BUDGET_KEY, is_transient
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, CorruptDatasetError, StoreError
from dasklbfgs.models import Logistic
from dasklbfgs.sandblaster import sandblaster_lbfgs
from tests.data.test_sharded import CODECS


def _rows(n: int = 700, d: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, (X @ rng.normal(size=d) > 0).astype(np.float64), rng.uniform(0.5, 2.0, n)


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:6]}.zarr"


def _same_shards(got, expected) -> None:
    """Shards (X, y, w[, offset]) equal bit for bit, with their dtypes; sparse X as the same CSR arrays."""
    assert len(got) == len(expected)
    for (X, y, w, *offset), (Xe, ye, we, *offset_expected) in zip(got, expected, strict=True):
        if sp.issparse(Xe):
            assert sp.issparse(X) and X.shape == Xe.shape
            for part in ("data", "indices", "indptr"):
                np.testing.assert_array_equal(getattr(X, part), getattr(Xe, part), strict=True)
        else:
            np.testing.assert_array_equal(X, Xe, strict=True)
        np.testing.assert_array_equal(y, ye, strict=True)
        assert (w is None) == (we is None)
        if we is not None:
            np.testing.assert_array_equal(w, we, strict=True)
        for given, wanted in zip(offset, offset_expected, strict=True):
            assert (given is None) == (wanted is None)
            if wanted is not None:
                np.testing.assert_array_equal(given, wanted, strict=True)


@pytest.mark.parametrize("kind", ["dense", "weighted float32 offsets", "sparse", "sparse weighted"] +
                         [f"codec {name}" for name in CODECS])
def test_a_remote_read_gives_the_bits_of_the_local_read(s3, tmp_path, kind) -> None:
    X, y, w = _rows()
    Y = np.stack([y, -y], axis=1)
    kw: dict = {"shard_rows": 128}
    if "weighted" in kind:
        kw["sample_weight"] = w
    if "offsets" in kind:
        kw["offset"] = np.log(w)
    if "float32" in kind:
        kw["dtype"] = np.float32
    if kind.startswith("codec"):
        kw["compressor"], y = CODECS[kind.split(" ", 1)[1]], Y  # 2-D y too
    if kind.startswith("sparse"):
        kept = np.ones(700)
        kept[5] = kept[512:640] = 0  # an empty row, and shard 4 (read alone below) with no values at all
        X = sp.csr_array(sp.diags(kept) @ sp.random(700, 40, density=0.1, format="csr", random_state=3))
        X.eliminate_zeros()
    local = ShardedDataset.create(tmp_path / "local", X, y, **kw)
    remote = ShardedDataset.create(f"{s3[0]}/{_name('bits')}", X, y, storage_options=s3[1], **kw)
    shards = range(local.n_shards)
    _same_shards(remote.load_shards(list(shards)), local.load_shards(list(shards)))
    _same_shards([remote.load_shards([i])[0] for i in (4, 0)], [local.load_shards([i])[0] for i in (4, 0)])
    for start, stop in [(0, 700), (128, 384), (100, 130), (650, 700), (3, 4)]:
        got, expected = remote.load_rows(start, stop), local.load_rows(start, stop)
        _same_shards([(*got, remote.load_weights(start, stop), remote.load_offsets(start, stop))],
                     [(*expected, local.load_weights(start, stop), local.load_offsets(start, stop))])


def test_a_read_fetches_its_objects_at_once(s3_server) -> None:
    """Held 0.3 s each by the server, the nine chunk objects of three weighted shards are all
    in flight together (a read key by key would have one), each asked for once."""
    X, y, w = _rows(384)
    data = ShardedDataset.create(f"{s3_server.url}/{_name('at-once')}", X, y, sample_weight=w, shard_rows=128,
                                 storage_options=s3_server.options)
    s3_server.reset_counts()
    s3_server.delay = 0.3
    try:
        shards = data.load_shards([0, 1, 2])
    finally:
        s3_server.delay = 0.0
    np.testing.assert_array_equal(np.concatenate([s[0] for s in shards]), X)
    assert s3_server.most_in_flight >= 9
    chunks = [path for method, path in s3_server.requests if method == "GET" and "/c/" in path]
    assert len(chunks) == len(set(chunks)) == 9
    assert not [path for method, path in s3_server.requests if method == "HEAD"]  # no object checked key by key


def test_503_answers_are_retried_and_missing_objects_are_not(s3_server) -> None:
    X, y, _ = _rows(300)
    url = f"{s3_server.url}/{_name('503')}"
    data = ShardedDataset.create(url, X, y, shard_rows=100, storage_options=s3_server.options)
    s3_server.fail_next = 6
    np.testing.assert_array_equal(data.load_rows(0, 300)[0], X)
    assert s3_server.fail_next == 0  # every 503 was answered, and the read went on
    Location.of(url, s3_server.options).remove("X/c/1/0")
    s3_server.reset_counts()
    started = time.monotonic()
    with pytest.raises(CorruptDatasetError, match=r"'s3://dasklbfgs-outages/503-.*' is missing the chunk file "
                                                  r"X/c/1/0 \(shard 1, rows 100-200\); rewrite the dataset"):
        data.load_shards([0, 1])
    assert time.monotonic() - started < 5  # not retried until the budget runs out
    assert sum(path.endswith("/X/c/1/0") for _, path in s3_server.requests) == 1


@pytest.mark.parametrize("sparse", [False, True])
def test_a_damaged_object_is_a_corrupt_dataset_error_naming_its_shard(s3_server, sparse) -> None:
    X, y, _ = _rows(300)
    url = f"{s3_server.url}/{_name('damaged')}"
    rows = sp.csr_array(X) if sparse else X
    data = ShardedDataset.create(url, rows, y, shard_rows=100, storage_options=s3_server.options)
    key = "X/1/data/c/0" if sparse else "X/c/1/0"
    Location.of(url, s3_server.options).put(key, b"\x02\x01not a Blosc chunk at all")
    match = (r"cannot read sparse shard 1 of X of the dataset at 's3://.*' \(rows 100-200\): the chunk file holds "
             r"\d+ bytes but its Blosc header says \d+; rewrite the dataset" if sparse else
             r"cannot decode X of the dataset at 's3://.*' in shard\(s\) \[1\] \(rows \[100, 200\)\): the chunk file "
             r"holds \d+ bytes but its Blosc header says \d+; a chunk file is damaged")
    with pytest.raises(CorruptDatasetError, match=match):
        data.load_shards([0, 1, 2])
    np.testing.assert_array_equal(data.load_shards([2])[0][1], y[200:])  # the other shards read on


def test_a_store_away_past_the_budget_is_a_store_error_naming_the_url_and_the_object(s3_server) -> None:
    X, y, _ = _rows(200)
    url = f"{s3_server.url}/{_name('away')}"
    data = ShardedDataset.create(url, X, y, shard_rows=100, storage_options=s3_server.options)
    s3_server.stop()
    try:
        started = time.monotonic()
        with dask.config.set({RETRY_BUDGET_KEY: "2s"}), \
                pytest.raises(StoreError, match=rf"'{url}' did not answer for 2 s \(the retry budget, dask config "
                                                r"'dasklbfgs.store.retry-budget'\): the object 'zarr.json' and 2 more "
                                                r"could not be read \(last error EndpointConnectionError"):
            data.load_shards([1])
        assert time.monotonic() - started < 15  # the budget and one backoff, never a hang
    finally:
        s3_server.start()
    np.testing.assert_array_equal(data.load_shards([1])[0][0], X[100:])  # back once the store is


@pytest.mark.parametrize("value", ["soon", 0, -3])
def test_a_bad_retry_budget_is_refused_naming_it(s3_server, value) -> None:
    data = ShardedDataset.create(f"{s3_server.url}/{_name('budget')}", np.ones((4, 2)), np.zeros(4), shard_rows=2,
                                 storage_options=s3_server.options)
    with dask.config.set({RETRY_BUDGET_KEY: value}), \
            pytest.raises(ConfigurationError, match=rf"dask config 'dasklbfgs.store.retry-budget' must be a "
                                                    rf"(positive )?duration.*got {value!r}"):
        data.load_rows(0, 4)


def test_errors_that_another_try_may_mend_are_told_apart() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    def answered(status: int) -> ClientError:
        return ClientError({"Error": {"Code": "X", "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                           "GetObject")

    wrapped = OSError(5, "wrapped by s3fs")
    wrapped.__cause__ = answered(503)
    assert all(map(is_transient, [EndpointConnectionError(endpoint_url="http://h"), ConnectionResetError(),
                                  TimeoutError(), answered(500), answered(429), wrapped]))
    assert not any(map(is_transient, [answered(403), answered(400), PermissionError("denied"), ValueError("bad")]))


# -- runs on the cluster -----------------------------------------------------------------


def _run(client, data, **kw):
    return sandblaster_lbfgs(Logistic(6, l2=1e-3), data, client=client, maxiter=12, **kw)


def test_a_sandblaster_run_survives_the_store_stopped_mid_run(client, s3_server) -> None:
    """Streaming its shards from the store (cache=False), the run finds the server stopped for
    three seconds after its second iteration, and ends with the bits of an undisturbed run."""
    X, y, w = _rows(1200)
    data = ShardedDataset.create(f"{s3_server.url}/{_name('outage')}", X, y, sample_weight=w, shard_rows=300,
                                 storage_options=s3_server.options)
    undisturbed = _run(client, data, cache=False)
    outage: dict = {}

    def stop_the_store(intermediate) -> None:
        if intermediate.step == 2 and not outage:
            outage["thread"] = s3_server.outage(3.0)
            outage["back"] = time.monotonic() + 3.0
            s3_server.reset_counts()

    disturbed = _run(client, data, cache=False, callback=stop_the_store)
    outage["thread"].join()
    np.testing.assert_array_equal(disturbed.x, undisturbed.x)
    assert disturbed.nit == undisturbed.nit and disturbed.fun == undisturbed.fun
    assert disturbed.nit > 3  # evaluations after the outage read from the restarted server
    assert any(path.endswith("/X/c/0/0") for _, path in s3_server.requests)


def _set_budget(value: str | None) -> None:
    """Set (or, given None, remove) the retry budget in this process's dask config."""
    if value is None:
        dask.config.config.get("dasklbfgs", {}).get("store", {}).pop("retry-budget", None)
    else:
        dask.config.set({RETRY_BUDGET_KEY: value})


def test_a_run_on_a_store_that_stays_away_fails_with_the_store_error(client, s3_server) -> None:
    X, y, _ = _rows(400)
    url = f"{s3_server.url}/{_name('run-away')}"
    data = ShardedDataset.create(url, X, y, shard_rows=200, storage_options=s3_server.options)
    client.run(_set_budget, "2s")
    s3_server.stop()
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match=rf"'{url}' did not answer for 2 s \(the retry budget") as failed:
            _run(client, data)
        assert time.monotonic() - started < 30  # one failed load, not endless task retries
        # the failed load released its shards, though the error (and its traceback) is kept
        assert failed.value is not None and client.run_on_scheduler(
            lambda dask_scheduler: [k for k in dask_scheduler.tasks if "sandblaster-" in str(k)]) == []
    finally:
        s3_server.start()
        client.run(_set_budget, None)


def test_a_worker_killed_while_it_loads_a_remote_shard(client, s3_server) -> None:
    """The server holds each object 1 s; the worker loading the first shard is killed while its
    request is held. Dask loads the shard again elsewhere: the bits of an undisturbed run."""
    X, y, w = _rows(1200)
    data = ShardedDataset.create(f"{s3_server.url}/{_name('killed')}", X, y, sample_weight=w, shard_rows=300,
                                 storage_options=s3_server.options)
    undisturbed = _run(client, data)
    killed: dict = {}

    def kill_a_loading_worker() -> None:
        s3_server.got_a_get.wait(60)
        deadline = time.monotonic() + 30
        while not killed and time.monotonic() < deadline:
            for address, keys in client.processing().items():
                if any(str(key).startswith("sandblaster-load-") for key in keys):  # a batch of shards
                    killed["worker"], killed["pid"] = address, client.run(os.getpid, workers=[address])[address]
                    os.kill(killed["pid"], signal.SIGKILL)
                    break
            time.sleep(0.05)
        s3_server.delay = 0.0

    s3_server.reset_counts()
    s3_server.delay = 1.0
    killer = threading.Thread(target=kill_a_loading_worker, daemon=True)
    killer.start()
    try:
        disturbed = _run(client, data)
    finally:
        killer.join()
        s3_server.delay = 0.0
        client.wait_for_workers(2, timeout=60)
    assert killed, "no worker was loading a shard when the server held its request"
    np.testing.assert_array_equal(disturbed.x, undisturbed.x)
    assert disturbed.nit == undisturbed.nit


def test_a_run_scores_its_training_data_on_the_shards_it_cached(client, s3_server) -> None:
    """``score=True``: the training set's metrics come from the shards Sandblaster holds (each
    chunk object fetched once, by the fit's load), equal to a later evaluation from the store."""
    from dasklbfgs import evaluate

    X, y, w = _rows(900)
    data = ShardedDataset.create(f"{s3_server.url}/{_name('scored')}", X, y.astype(np.int64), sample_weight=w,
                                 shard_rows=300, storage_options=s3_server.options)
    s3_server.reset_counts()
    result = _run(client, data, score=True)
    chunks = [path for method, path in s3_server.requests if method == "GET" and "/c/" in path]
    assert len(chunks) == len(set(chunks)) == 9  # X, y and w of three shards, once
    assert result.scores["train"] == evaluate(Logistic(6, l2=1e-3), result.x, data, client=client)
    assert result.scores["train"]["n_samples"] == 900 and result.stats["score_seconds"] > 0
