"""Nothing of a run is left on the cluster after any solver returns or fails: no actors on
the workers, no keys on the scheduler, with no garbage collection asked for."""

from __future__ import annotations

import sys
import time

import cloudpickle
import numpy as np
import pytest

from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.models import Logistic
from dasklbfgs.solvers.registry import solver_names

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SHORT = {"sandblaster": {"maxiter": 3}}  # the replica methods: one epoch
# Every solver, plus Sandblaster with its L-BFGS vectors on parameter-shard actors.
CASES = [(name, SHORT.get(name, {"epochs": 1, "batch_size": 64})) for name in solver_names()] + [
    ("sandblaster", {"maxiter": 3, "state": "sharded"})]
CASE_IDS = [name + ("-sharded" if options.get("state") else "") for name, options in CASES]
FAILING_AT_STEP = 3


class FailsOnWorkers(Logistic):
    """A Logistic model whose gradient raises on the workers after a few calls."""

    calls = 0

    def loss_grad_sum(self, params, X, y):
        FailsOnWorkers.calls += 1
        if FailsOnWorkers.calls > FAILING_AT_STEP:
            raise RuntimeError("a model bug on a worker")
        return super().loss_grad_sum(params, X, y)


def _actors(dask_worker) -> list[str]:
    return sorted(map(str, dask_worker.state.actors))


def _keys(dask_scheduler) -> list[str]:
    return sorted(map(str, dask_scheduler.tasks))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 3))
    return ShardedDataset.create(tmp_path_factory.mktemp("leftovers") / "d", X, (X[:, 0] > 0).astype(np.int64),
                                 shard_rows=300)


def _settled(client, keys_before, actors_before, seconds: float = 10.0) -> tuple[list[str], dict]:
    """The scheduler's keys and the workers' actors once Dask has finished releasing them
    (releases are asynchronous: under load they take a moment)."""
    deadline = time.monotonic() + seconds
    while True:
        keys, actors = client.run_on_scheduler(_keys), client.run(_actors)
        if (keys, actors) == (keys_before, actors_before) or time.monotonic() > deadline:
            return keys, actors
        time.sleep(0.1)


def _run(solver, options, model, data, client):
    return minimize(model, data, solver, client=client, **options)


@pytest.mark.parametrize("solver, options", CASES, ids=CASE_IDS)
def test_runs_leave_nothing_on_the_cluster(client, data, solver, options) -> None:
    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    for _ in range(3):
        result = _run(solver, options, Logistic(3), data, client)
        assert np.all(np.isfinite(result.x))
    assert _settled(client, keys_before, actors_before) == (keys_before, actors_before)


def test_partitioned_downpour_leaves_nothing_on_the_cluster(client, data) -> None:
    """model_partitions=2: the partitions' mailboxes and tasks go with the run too."""
    from dasklbfgs.models import MLP

    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    options = {"epochs": 1, "batch_size": 64, "n_replicas": 1, "model_partitions": 2}
    result = _run("downpour", options, MLP(3, (4,), 2, l2=1e-3), data, client)
    assert np.all(np.isfinite(result.x)) and result.partitions["model_partitions"] == 2
    assert _settled(client, keys_before, actors_before) == (keys_before, actors_before)


@pytest.mark.parametrize("solver, options", CASES, ids=CASE_IDS)
def test_failed_runs_leave_nothing_on_the_cluster(client, data, solver, options) -> None:
    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    with pytest.raises(RuntimeError, match="a model bug on a worker"):
        _run(solver, options, FailsOnWorkers(3), data, client)
    assert _settled(client, keys_before, actors_before) == (keys_before, actors_before)


def _rss(dask_worker=None) -> int:
    import psutil

    return psutil.Process().memory_info().rss


BIG = 1_000_000  # parameters: a leaked run's state is tens of MB per worker, far above the noise


@pytest.fixture(scope="module")
def fresh_client():
    """Workers of their own: on the suite's long-lived workers, after the rest of the suite,
    Downpour runs grew one worker's memory by ~20 MB a run (not yet explained; alone, or after
    this file's or the Downpour tests, they do not)."""
    from dasklbfgs import connect

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None, memory_limit="2GiB") as c:
        c.wait_for_workers(2)
        yield c


@pytest.mark.parametrize("solver", ["downpour", "sandblaster"])
def test_worker_memory_returns_to_its_level_after_runs(fresh_client, data, solver) -> None:
    """A model of about a million parameters: repeated runs must not pile up worker memory
    (a kept parameter shard is 8 MB of values plus 8 MB of Adagrad state per run). A leak grows
    with every run; the allocator's arenas grow for the first runs and then stay (measured:
    ~23 MiB over runs 3-6, ~4 MiB over runs 7-10): so the runs measured come after six."""
    client = fresh_client
    from dasklbfgs.models import MLP

    model = MLP(3, hidden=(1000, 997), n_classes=2)
    assert model.n_params > BIG
    options = {"maxiter": 2} if solver == "sandblaster" else {"epochs": 1, "batch_size": 300}
    for _ in range(6):  # warm up: imports, the allocator's arenas
        _run(solver, options, model, data, client)
    _settled(client, client.run_on_scheduler(_keys), client.run(_actors))
    before = client.run(_rss)
    for _ in range(4):
        _run(solver, options, model, data, client)
    _settled(client, [], {w: [] for w in before})
    grown = {w: (rss - before[w]) / 2**20 for w, rss in client.run(_rss).items()}
    assert max(grown.values()) < 24, f"worker memory grew by {grown} MiB over 4 runs"
