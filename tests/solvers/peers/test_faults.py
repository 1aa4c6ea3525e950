"""The peer methods keep training when a worker dies (SIGKILL): the replicas are restarted
from the survivors' states (EASGD's lost center shards from the replicas' average)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import cloudpickle
import numpy as np
import pytest

from dasklbfgs import connect, make_dataset
from dasklbfgs.downpour import easgd, gossip_sgd, neighbour_sgd, sync_sgd
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.solvers.peers.replica import REPLICAS
from tests._kills import nothing_left, workers_restored
from tests.solvers.downpour.test_faults import SlowSoftmax, held  # 2 ms per mini-batch; 50 ms held

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset("multinomial", tmp_path_factory.mktemp("peer-faults") / "mn", rows=6000, features=10,
                        n_classes=3, shard_rows=2000, seed=4)


@pytest.fixture(scope="module")
def cluster():
    """Three single-thread workers; a killed one is started again by its nanny (new address)."""
    with connect(n_workers=3, threads_per_worker=1, dashboard_address=None) as client:
        yield client


@pytest.fixture()
def three_workers(cluster):
    """The cluster once the nanny of the worker an earlier test killed has started it again."""
    return workers_restored(cluster, 3)


# -- the states a restart hands out (pure) ---------------------------------------------------

def _survivor(replica: int, params, steps: int, weight: float = 1.0) -> dict:
    return {"replica": replica, "params": np.array(params, dtype=float), "rule_state": {"v": np.ones(2) * replica},
            "steps": steps, "weight": weight, "loss_sum": 1.0}


LOST = {"replica": 1, "steps": 4, "loss_sum": 0.5, "recent_loss": 0.1}  # its counters last polled


def test_sync_restarts_every_replica_from_the_survivor_furthest_along() -> None:
    entries = [_survivor(0, [1, 1], 5), LOST, _survivor(2, [3, 3], 6)]
    resumed = REPLICAS["sync"].resumed(entries, None)
    assert [e["steps"] for e in resumed] == [6, 6, 6]
    assert all(np.array_equal(e["params"], [3, 3]) and np.array_equal(e["rule_state"]["v"], [2, 2]) for e in resumed)
    assert [e["loss_sum"] for e in resumed] == [1.0, 0.5, 1.0]  # each keeps its own counters


def test_a_lost_easgd_replica_restarts_at_the_center_the_others_from_their_own_state() -> None:
    resumed = REPLICAS["easgd"].resumed([_survivor(0, [1, 1], 5), LOST], np.array([7.0, 8.0]))
    assert np.array_equal(resumed[0]["params"], [1, 1]) and resumed[0]["steps"] == 5
    assert np.array_equal(resumed[1]["params"], [7, 8]) and resumed[1]["rule_state"] is None
    assert resumed[1]["steps"] == 4  # it re-walks its mini-batches from the step it reported


def test_gossip_restarts_a_lost_replica_at_the_average_and_resets_push_sum_weights() -> None:
    # push-sum: numerators over weights are the estimates (2, 2) and (4, 4)
    entries = [_survivor(0, [1, 1], 5, weight=0.5), LOST, _survivor(2, [6, 6], 6, weight=1.5)]
    resumed = REPLICAS["gossip"].resumed(entries, None)
    assert [list(e["params"]) for e in resumed] == [[2, 2], [3, 3], [4, 4]]
    assert sum(e["weight"] for e in resumed) == 3  # the weights sum to the replicas again
    assert np.array_equal(REPLICAS["neighbours"].resumed([_survivor(0, [1, 1], 5), LOST], None)[1]["params"], [1, 1])


def test_with_no_survivor_there_is_nothing_to_restart_from() -> None:
    with pytest.raises(WorkerLostError, match="every replica was lost with its worker"):
        REPLICAS["gossip"].resumed([LOST], None)


# -- real clusters -----------------------------------------------------------------------------

def kill_at(client, step: int, victim: str, killed: dict):
    def callback(entry):
        if "at" not in killed and entry.step >= step:
            killed["at"], killed["time"] = entry.step, time.perf_counter()
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    return callback


# 3 replicas of 2000 rows x 3 epochs at 50 rows a batch: 40 steps each per epoch, 360 in all
KW = dict(n_replicas=3, batch_size=50, learning_rate=0.2, epochs=3, eval_every=10_000)
METHODS = [(sync_sgd, {}), (easgd, {"tau": 2}), (gossip_sgd, {"push_sum": True}), (neighbour_sgd, {})]


@pytest.mark.parametrize("method, extra", METHODS, ids=[m.__name__ for m, _ in METHODS])
def test_a_killed_worker_s_replicas_are_restarted_and_the_run_finishes(three_workers, data, method, extra) -> None:
    client, model = three_workers, SlowSoftmax(10, 3, l2=1e-4)
    undisturbed = method(model, data["train"], client=client, eval_data=data["test"], **KW, **extra)
    # worker 0 holds replica 0's mailbox (sync: the root of the tree) and EASGD's center
    victim, killed = sorted(client.scheduler_info()["workers"])[0], {}
    result = method(model, data["train"], client=client, eval_data=data["test"],
                    callback=kill_at(client, 60, victim, killed), **KW, **extra)
    assert killed["at"] >= 60 and result.success, result.message
    [restart] = result.stats["replica_restarts"]
    # replica 0 is lost with its mailbox; on a loaded machine the scheduler may have run
    # another replica's task on the victim too, and that one restarts as well
    assert 0 in restart["replicas"] and restart["seconds"] < 10
    assert restart["center_shards"] == ([0] if method is easgd else [])
    assert killed["at"] - 3 * 10 <= restart["step"] <= 360  # the steps polled before the kill are kept
    # the run still takes each replica's planned steps (a lost replica re-walks those since the last poll)
    assert result.stats["steps_per_replica"] == [120, 120, 120]
    # A restart loses no step of the survivors and puts the lost replica where its method
    # would draw it (the center, the peers' average): the accuracy stays within 0.03 of the
    # undisturbed run's (about 0.75 here; a replica training alone on its third reaches ~0.73).
    assert result.history[-1]["eval_accuracy"] >= undisturbed.history[-1]["eval_accuracy"] - 0.03
    if method is sync_sgd:
        # every replica resumed from the same state at the same step, with the same batches:
        # the run is the undisturbed one, and the replicas stay identical
        xs = [r["x"] for r in result.replicas]
        assert all(np.array_equal(x, xs[0]) for x in xs)
        np.testing.assert_allclose(result.x, undisturbed.x, rtol=0, atol=1e-10)
    assert nothing_left(client)


def test_with_max_restarts_0_a_lost_worker_stops_the_run(three_workers, data) -> None:
    """The old behaviour on request: the run ends within seconds of the loss (replicas
    waiting for the lost peer are woken), and nothing of it is left on the cluster."""
    client = three_workers
    victim, killed = sorted(client.scheduler_info()["workers"])[2], {}
    with pytest.raises(WorkerLostError, match=r"gossip: the mailboxes of replica\(s\) \[2\] were lost with their "
                                              r"worker after 0 restart\(s\) of the replicas, and max_restarts is 0"):
        gossip_sgd(SlowSoftmax(10, 3), data["train"], client=client, callback=kill_at(client, 30, victim, killed),
                   max_restarts=0, **{**KW, "eval_every": None})
    assert time.perf_counter() - killed["time"] < 10
    assert nothing_left(client)


def test_a_refused_retirement_moves_the_replicas_off_so_that_the_next_attempt_succeeds(data, tmp_path) -> None:
    """Dask refuses to retire a worker holding actors; the coordinator sees the refusal and
    restarts the replicas (no state lost: every replica is a survivor) on the other workers."""
    with connect(n_workers=3, threads_per_worker=1, dashboard_address=None) as client:  # it loses a worker
        client.wait_for_workers(3)
        _retire_during_a_run(client, data, tmp_path / "hold")


def _retire_during_a_run(client, data, hold) -> None:
    leaving, attempts = sorted(client.scheduler_info()["workers"])[1], []
    model = held(SlowSoftmax(10, 3, l2=1e-4), hold)  # slow until the retirement is seen through

    def retire_until_gone(started_run: threading.Event) -> None:
        started_run.wait()
        deadline = time.monotonic() + 30
        while leaving in client.scheduler_info()["workers"] and time.monotonic() < deadline:
            attempts.append(client.retire_workers([leaving]))
            time.sleep(0.5)
        os.remove(hold)

    started_run = threading.Event()
    retirer = threading.Thread(target=retire_until_gone, args=(started_run,))
    retirer.start()

    def callback(entry):
        if entry.step >= 30:
            started_run.set()

    try:
        result = easgd(model, data["train"], client=client, eval_data=data["test"],
                       callback=callback, **{**KW, "epochs": 8})
    finally:
        started_run.set()
        retirer.join()
    assert result.success, result.message
    [move] = result.stats["replica_restarts"]
    assert move["moved_off"] == [leaving] and move["replicas"] == [] and move["center_shards"] == []
    assert attempts[0] == {} and leaving in attempts[-1]  # refused at first, then retired
    assert result.stats["steps_per_replica"] == [320, 320, 320]
    assert result.history[-1]["eval_accuracy"] > 0.7
    assert nothing_left(client)
