"""Downpour keeps training when workers die (SIGKILL): replicas restart, shards are restored."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import cloudpickle
import pytest

from dasklbfgs import connect, make_dataset
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.models import Softmax
from dasklbfgs.scoring import evaluate

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SlowSoftmax(Softmax):
    """2 ms per mini-batch, so that a run lasts long enough to kill a worker in the middle;
    50 ms while the file ``hold`` exists, so that a test can keep a run going until what it
    does in the middle (a retirement) is seen through, however loaded the machine."""

    hold: str | None = None

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.05 if self.hold is not None and os.path.exists(self.hold) else 0.002)
        return super().loss_grad_sum(params, X, y)


def held(model: SlowSoftmax, path) -> SlowSoftmax:
    """``model``, slowed down until ``path`` (created here) is removed."""
    open(path, "w").close()
    model.hold = str(path)
    return model


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset("multinomial", tmp_path_factory.mktemp("faults") / "mn", rows=8000, features=10,
                        n_classes=3, shard_rows=2000, seed=4)


@pytest.fixture()
def cluster():
    """Three single-thread workers: shards on the first two, replicas on the third and first.
    A cluster of its own per test: a frozen, removed or retired worker leaves its nanny in
    states that a shared cluster would carry into the next test."""
    with connect(n_workers=3, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(3)
        yield client


def kill_at(client, step: int, victim_index: int, killed: dict):
    victim = sorted(client.scheduler_info()["workers"])[victim_index]

    def callback(entry):
        if "at" not in killed and entry.step >= step:
            killed["at"], killed["time"], killed["worker"] = entry.step, time.perf_counter(), victim
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    return callback


def undisturbed_accuracy(client, data) -> float:
    model = Softmax(10, 3, l2=1e-4)
    x = downpour_sgd(model, data["train"], client=client, **{**KW, "eval_every": None}).x
    return evaluate(model, x, data["test"])["accuracy"]


KW = dict(n_replicas=2, n_param_shards=2, batch_size=50, learning_rate=0.2, epochs=3, eval_every=10_000)


def test_a_killed_replica_is_restarted_and_resumes(cluster, data) -> None:
    model = SlowSoftmax(10, 3, l2=1e-4)
    killed: dict = {}
    result = downpour_sgd(model, data["train"], client=cluster, eval_data=data["test"],
                          callback=kill_at(cluster, 150, 2, killed), **KW)  # worker 2 runs replica 0 only
    assert killed["at"] >= 150 and result.success, result.message
    assert result.stats["shard_recoveries"] == []
    first, second = result.stats["replica_first_steps"]
    assert first > 0 and second == 0  # replica 0 resumed at the steps its applied pushes covered
    planned = 2 * 3 * 80  # 2 replicas x 3 epochs x 4000 / 50 batches
    assert planned - 2 * 50 <= result.nit <= planned  # at most the steps in flight at the kill are lost
    assert result.history[-1]["eval_accuracy"] >= undisturbed_accuracy(cluster, data) - 0.03


def test_a_killed_shard_is_restored_from_the_latest_checkpoint(cluster, data, tmp_path) -> None:
    model = SlowSoftmax(10, 3, l2=1e-4)
    killed: dict = {}
    result = downpour_sgd(model, data["train"], client=cluster, eval_data=data["test"],
                          checkpoint_path=tmp_path / "ckpt", checkpoint_every=40,
                          callback=kill_at(cluster, 200, 1, killed), **KW)  # worker 1 holds shard 1 only
    assert result.success, result.message
    [recovery] = result.stats["shard_recoveries"]
    assert recovery["shards"] == [1]
    assert killed["at"] - 40 - 2 * 50 <= recovery["restored_step"] <= killed["at"]  # <= checkpoint_every lost
    assert recovery["seconds"] < 10
    assert sum(result.stats["replica_reconnects"]) >= 1
    assert result.stats["replica_first_steps"] == [0, 0]  # the replicas themselves survived
    assert result.history[-1]["eval_accuracy"] >= undisturbed_accuracy(cluster, data) - 0.03


def test_without_a_checkpoint_a_lost_shard_is_a_clear_error(cluster, data) -> None:
    killed: dict = {}
    with pytest.raises(WorkerLostError, match=r"parameter shard\(s\) \[1\] were lost with their worker and cannot "
                                              r"be restored without a checkpoint; pass checkpoint_path"):
        downpour_sgd(SlowSoftmax(10, 3), data["train"], client=cluster, callback=kill_at(cluster, 50, 1, killed),
                     **{**KW, "eval_every": None})


def test_a_replica_waiting_for_a_shard_that_never_comes_gets_a_clear_error(client) -> None:
    from dasklbfgs.solvers._replicas.directory import ShardDirectory

    directory = ShardDirectory("downpour-test-directory", 1, client)
    future = client.submit(lambda: 1, pure=False)
    directory.publish([future], 0)
    try:
        with pytest.raises(WorkerLostError, match=r"parameter shards of 'downpour-test-directory' were lost "
                                                  r"and not re-created within 0 s"):
            directory.current(newer_than=0, timeout=0.3)
    finally:
        directory.delete()


class PausingSoftmax(Softmax):
    """0.3 s per mini-batch: a shard's worker killed now is known lost before the next call."""

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.3)
        return super().loss_grad_sum(params, X, y)


def test_a_shard_lost_between_calls_is_restored(cluster, data, tmp_path) -> None:
    """The replicas see the loss when they next touch the shard's handle (Dask already knows
    the actor is gone and refuses the call at once), not with a call in flight."""
    killed: dict = {}
    result = downpour_sgd(PausingSoftmax(10, 3, l2=1e-4), data["train"], client=cluster,
                          checkpoint_path=tmp_path / "ckpt", checkpoint_every=1,
                          callback=kill_at(cluster, 3, 1, killed),
                          **{**KW, "batch_size": 400, "epochs": 1, "eval_every": None})
    assert killed and result.success, result.message
    [recovery] = result.stats["shard_recoveries"]
    assert recovery["shards"] == [1]
    assert result.stats["replica_first_steps"] == [0, 0]  # the replicas themselves survived
    assert sum(result.stats["replica_reconnects"]) >= 1


class _Counter:
    def value(self) -> int:
        return 1


def _lookup_finds_the_replacement(client, directory, replacement_worker=None) -> None:
    """A lookup of the directory, whose generation 0 holds a gone actor, waits (does not
    crash or hang) and returns generation 1 once it is published."""
    import threading

    found: dict = {}
    replacement = None
    lookup = threading.Thread(target=lambda: found.update(zip(("generation", "shards"), directory.current())))
    try:
        lookup.start()
        time.sleep(0.5)
        assert lookup.is_alive() and not found  # still waiting: generation 0 is gone
        workers = None if replacement_worker is None else [replacement_worker]
        replacement = client.submit(_Counter, actor=True, workers=workers, pure=False)
        replacement.result()
        directory.publish([replacement], 1)
        lookup.join(15)
        assert found["generation"] == 1 and found["shards"][0].value().result() == 1
    finally:
        directory.delete()
        if replacement is not None:
            client.cancel([replacement], force=True)


def test_a_replica_looking_up_a_lost_shard_waits_for_its_replacement(cluster) -> None:
    """A replica (re)starting after a shard's worker died, before the coordinator re-created
    it, finds a lost actor in the directory: it waits for the next generation, not crash."""
    from dasklbfgs.solvers._replicas.directory import ShardDirectory

    first, second = sorted(cluster.scheduler_info()["workers"])[:2]
    directory = ShardDirectory("downpour-test-lookup", 1, cluster)
    lost = cluster.submit(_Counter, actor=True, workers=[first], pure=False)
    lost.result()
    directory.publish([lost], 0)
    os.kill(cluster.run(os.getpid, workers=[first])[first], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while lost.status != "error" and time.monotonic() < deadline:
        time.sleep(0.05)
    _lookup_finds_the_replacement(cluster, directory, second)
    cluster.cancel([lost], force=True)


def kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the cluster may have closed first
        os.kill(pid, signal.SIGKILL)


def test_a_shard_lost_while_the_coordinator_waits_on_it_is_restored_within_seconds(cluster, data, tmp_path) -> None:
    """A call to a shard whose worker hangs never returns, and one to a worker that just died
    can wait for Dask's 30 s connect timeout. While a reply is late, the coordinator asks
    whether the scheduler has declared the shard lost, and restores it. Here the worker holding
    shard 1 is frozen (SIGSTOP) and the scheduler removes it, as it does with a worker that
    stopped answering; the frozen process is SIGKILLed only 6 s later, so that the replicas'
    own calls to it fail and they reconnect."""
    victim = sorted(cluster.scheduler_info()["workers"])[1]  # holds shard 1 only
    pid = cluster.run(os.getpid, workers=[victim])[victim]
    frozen: dict = {}

    async def remove(address, dask_scheduler=None):
        await dask_scheduler.remove_worker(address, stimulus_id="test-frozen-worker", close=False)

    def freeze_then_remove():
        os.kill(pid, signal.SIGSTOP)
        time.sleep(1.0)  # the coordinator's next call to shard 1 is waiting by now
        cluster.run_on_scheduler(remove, victim)
        frozen["removed"] = time.perf_counter() - frozen["started"]
        threading.Timer(6.0, kill_if_alive, (pid,)).start()

    def callback(entry):
        if "started" not in frozen and entry.step >= 100:
            frozen["started"] = time.perf_counter() - entry.time  # the run's clock
            threading.Thread(target=freeze_then_remove, daemon=True).start()

    result = downpour_sgd(SlowSoftmax(10, 3, l2=1e-4), data["train"], client=cluster,
                          checkpoint_path=tmp_path / "ckpt", checkpoint_every=40, callback=callback,
                          **{**KW, "eval_every": None})
    assert result.success, result.message
    [recovery] = result.stats["shard_recoveries"]
    assert recovery["shards"] == [1]
    assert recovery["time"] - frozen["removed"] < 4  # restored while the frozen worker still held the call


def test_a_retiring_workers_shard_is_handed_over_and_the_retirement_then_succeeds(cluster, data, tmp_path) -> None:
    """Dask refuses to retire a worker holding an actor; the run hears of it and moves the
    worker's shard, as it is, to another worker: no step lost, no checkpoint needed, and
    retiring the worker again succeeds while the run goes on."""
    victim = sorted(cluster.scheduler_info()["workers"])[1]  # holds shard 1 only
    retired: dict = {}

    def retire_twice():
        retired["first"] = cluster.retire_workers([victim])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cluster.run(
                lambda dask_worker: len(dask_worker.state.actors), workers=[victim])[victim]:
            time.sleep(0.1)
        retired["second"] = cluster.retire_workers([victim])
        retired["second_at"] = time.perf_counter()
        os.remove(hold)  # seen through: the run may end

    def callback(entry):
        if "thread" not in retired and entry.step >= 60:
            retired["thread"] = threading.Thread(target=retire_twice, daemon=True)
            retired["thread"].start()

    hold = tmp_path / "hold"  # the run is slow until the retirement is seen through
    result = downpour_sgd(held(SlowSoftmax(10, 3, l2=1e-4), hold), data["train"], client=cluster,
                          eval_data=data["test"], callback=callback, **{**KW, "epochs": 8})
    ended = time.perf_counter()
    retired["thread"].join(30)
    assert result.success, result.message
    assert retired["first"] == {}  # refused: the worker held shard 1's actor
    assert victim in retired["second"] and retired["second_at"] < ended  # retired during the run
    assert victim not in cluster.scheduler_info()["workers"]
    [handover] = result.stats["shard_handovers"]
    assert handover["shards"] == [1] and handover["to"] != [victim]
    assert result.stats["shard_recoveries"] == [] and sum(result.stats["replica_reconnects"]) == 0
    assert result.nit == 2 * 8 * 80  # every step counted: pushes refused by the old shard went to the new one
    assert len(set(result.stats["pushes_per_shard"])) == 1
    assert result.history[-1]["eval_accuracy"] >= undisturbed_accuracy(cluster, data) - 0.03


def test_a_replica_looking_up_a_released_shard_waits_for_its_replacement(client) -> None:
    """The coordinator may release a replaced shard's key while a replica still reads the old
    generation from the directory: the lookup must not wait forever on the forgotten key."""
    from dasklbfgs.solvers._replicas.directory import ShardDirectory

    directory = ShardDirectory("downpour-test-released", 1, client)
    released = client.submit(_Counter, actor=True, pure=False)
    released.result()
    directory.publish([released], 0)
    client.cancel([released], force=True)  # forgotten on the scheduler; the directory still names it
    _wait_until_forgotten(client, released.key)  # (cancel returns before the scheduler has done it)
    _lookup_finds_the_replacement(client, directory)


def _wait_until_forgotten(client, key, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while client.run_on_scheduler(lambda dask_scheduler: key in dask_scheduler.tasks):
        assert time.monotonic() < deadline, f"{key} is still on the scheduler after {timeout:.0f} s"
        time.sleep(0.02)



def _partitioned_run(cluster, data, tmp_path, killed):
    """One replica of MLP partitions on sorted workers 0 and 1; worker 1 (partition 1, and
    some shards, restored from the checkpoint) is SIGKILLed at global step 60."""
    from dasklbfgs.models import MLP

    return downpour_sgd(MLP(10, (6,), 3), data["train"], client=cluster, model_partitions=2,
                        checkpoint_path=tmp_path / "ckpt", checkpoint_every=20,
                        callback=kill_at(cluster, 60, 1, killed),
                        **{**KW, "n_replicas": 1, "epochs": 2, "eval_every": None})


def test_a_replica_that_lost_a_partition_is_re_created_and_resumes(cluster, data, tmp_path) -> None:
    killed: dict = {}
    result = _partitioned_run(cluster, data, tmp_path, killed)
    assert killed["at"] >= 60 and result.success, result.message
    [restart] = result.partitions["recoveries"]
    assert [(lost["replica"], lost["partition"]) for lost in restart["lost"]] == [(0, 1)] and restart["seconds"] < 30
    assert restart["lost"][0]["worker"] == killed["worker"] and 0 < restart["time"] < result.stats["wall_seconds"]
    assert result.stats["shard_recoveries"] and result.stats["replica_first_steps"][0] > 0  # resumed, not restarted
    planned = 2 * 8000 // 50  # 1 replica x 2 epochs over its rows
    # both partitions resume at the smaller count of their shards (partition 1's, from the
    # checkpoint): partition 0's shards count the steps between twice
    assert planned <= result.nit <= planned + 20 + 10


def test_a_partition_lost_past_the_restarts_ends_the_run_naming_it(cluster, data, tmp_path, monkeypatch) -> None:
    """No restart left: the run ends with WorkerLostError naming the partition, never hangs
    (a partition waiting for a lost peer's message gives up after the exchange timeout)."""
    from dasklbfgs.solvers.downpour import partition_tasks

    monkeypatch.setattr(partition_tasks, "EXCHANGE_TIMEOUT_SECONDS", 3.0)
    monkeypatch.setattr(partition_tasks, "MAX_PARTITION_RESTARTS", 0)
    killed: dict = {}
    with pytest.raises(WorkerLostError, match=r"partition\(s\) \[1\] of replica 0 were lost with their worker|"
                                              r"partition 0 of replica 0 .*(step \d+ from|to) partition 1"):
        _partitioned_run(cluster, data, tmp_path, killed)
    assert killed["at"] >= 60 and time.perf_counter() - killed["time"] < 30
