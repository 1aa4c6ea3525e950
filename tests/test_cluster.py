"""connect(): embedded clusters, existing schedulers by address, file or environment."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dasklbfgs import Logistic, ShardedDataset, connect, sandblaster_lbfgs
from dasklbfgs.cluster import SCHEDULER_ENV
from dasklbfgs.errors import ConfigurationError


def test_embedded_cluster_is_closed_with_the_client() -> None:
    client = connect(n_workers=1, dashboard_address=None)
    try:
        assert len(client.scheduler_info()["workers"]) == 1
        assert client.direct_to_workers is True
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        cluster = client.cluster
        assert client.submit(sum, [1, 2]).result() == 3
    finally:
        client.close()
    assert cluster.status.name == "closed"


def test_address_scheduler_file_and_environment(tmp_path, monkeypatch) -> None:
    with LocalCluster(n_workers=1, processes=False, protocol="tcp", dashboard_address=None,
                      host="127.0.0.1") as cluster:
        with connect(cluster.scheduler_address) as c:
            assert c.scheduler.address == cluster.scheduler_address
            assert c.direct_to_workers is True
        scheduler_file = tmp_path / "scheduler.json"
        with Client(cluster) as admin:
            admin.write_scheduler_file(str(scheduler_file))
        with connect(scheduler_file=scheduler_file) as c:
            assert c.scheduler.address == cluster.scheduler_address
        monkeypatch.setenv(SCHEDULER_ENV, cluster.scheduler_address)
        with connect() as c:
            assert c.scheduler.address == cluster.scheduler_address
        monkeypatch.setenv(SCHEDULER_ENV, str(scheduler_file))
        with connect() as c:
            assert c.scheduler.address == cluster.scheduler_address


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"address": "tcp://a:1", "scheduler_file": "f"}, r"either address or scheduler_file, not both"),
        ({"scheduler_file": "/nonexistent/s.json"}, r"scheduler file '/nonexistent/s.json' does not exist"),
        ({"threads_per_worker": 0}, r"threads_per_worker must be >= 1, got 0"),
        ({"n_workers": 0}, r"n_workers must be >= 1, got 0"),
        ({"dashboard_address": "localhost"}, r"dashboard_address 'localhost' is not HOST:PORT or :PORT \(such as "),
    ],
)
def test_connect_errors(kwargs, match, monkeypatch) -> None:
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    with pytest.raises(ConfigurationError, match=match):
        connect(**kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_workers": 0}, r"n_workers must be >= 1, got 0"),
    ({"dashboard_address": "127.0.0.1:80:80"}, r"dashboard_address '127.0.0.1:80:80' is not HOST:PORT"),
])
def test_local_cluster_errors(kwargs, match) -> None:
    from dasklbfgs.cluster import local_cluster

    with pytest.raises(ConfigurationError, match=match):
        local_cluster(**kwargs)


def test_mutual_tls_cluster_refuses_clients_without_credentials(tmp_path) -> None:
    pytest.importorskip("cryptography")
    from distributed.security import Security

    from dasklbfgs.errors import ClusterConnectionError

    security = Security.temporary()
    client = connect(n_workers=1, security=security, dashboard_address=None)
    try:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result() == 3
        with pytest.raises(ClusterConnectionError, match=r"speaks TLS: pass security="):
            connect(address, timeout=3)
        with pytest.raises(ClusterConnectionError, match=r"could not reach the Dask scheduler at 'tls://"):
            connect(address, timeout=3, security=Security.temporary())  # credentials of another CA
        with connect(address, security=security) as trusted:
            assert trusted.submit(sum, [3, 4]).result() == 7
            # Sandblaster's direct calls to the workers go over the same TLS connections
            rng = np.random.default_rng(0)
            X = rng.normal(size=(400, 3))
            data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=100)
            result = sandblaster_lbfgs(Logistic(3, l2=1e-2), data, client=trusted, maxiter=5)
            assert result.stats["evaluations_direct"] == result.stats["evaluations"] > 0
        cluster = client.cluster
    finally:
        client.close()
    assert cluster.status.name == "closed"


def _allocator_state(dask_worker):
    return getattr(dask_worker, "dasklbfgs_allocator_tuned", None)


def _arenas() -> int:
    """How many arenas glibc's allocator has in this process (malloc_info's heaps)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.open_memstream.restype = ctypes.c_void_p
    buffer, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    return ctypes.string_at(buffer, size.value).decode().count("<heap nr=")


def _arenas_added_by_threads(dask_worker=None, threads: int = 8) -> int:
    """Arenas glibc adds while ``threads`` new threads each allocate small blocks."""
    import threading

    together = threading.Barrier(threads)

    def allocate() -> None:
        blocks = [bytearray(4096) for _ in range(64)]  # small blocks: from the thread's arena
        together.wait()  # all alive at once: none can take over an arena another has left
        del blocks

    before = _arenas()
    workers = [threading.Thread(target=allocate) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return _arenas() - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_workers_get_the_allocator_tuning_unless_asked_not_to() -> None:
    with connect(n_workers=1, dashboard_address=None) as client:
        assert list(client.run(_allocator_state).values()) == [True]
        # new threads share the arenas there are instead of taking one each (up to 8 per core)
        assert list(client.run(_arenas_added_by_threads).values()) == [0]
        client.restart()  # a restarted worker is tuned again
        assert list(client.run(_allocator_state).values()) == [True]
    with connect(n_workers=1, dashboard_address=None, tune_allocator=False) as client:
        assert list(client.run(_allocator_state).values()) == [None]
        assert list(client.run(_arenas_added_by_threads).values())[0] > 0


def _portion_service_state(dask_worker) -> tuple[bool, bool]:
    from dasklbfgs.solvers.sandblaster.portion_service import HANDLER, PortionService

    return PortionService.name in dask_worker.plugins, HANDLER in dask_worker.handlers


def test_an_embedded_clusters_workers_start_with_the_portion_service() -> None:
    """Ready for a first run: the service is there before any run registers it, also on a
    worker the cluster adds later (and a run registering it again changes nothing)."""
    with connect(n_workers=1, dashboard_address=None) as client:
        assert list(client.run(_portion_service_state).values()) == [(True, True)]
        client.cluster.scale(2)
        client.wait_for_workers(2)
        assert list(client.run(_portion_service_state).values()) == [(True, True)] * 2
