"""Partitioned replicas on a real cluster: the partitions exchange worker to worker and give
the unpartitioned model's sums; Sandblaster with model_partitions follows the K = 1 run."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dasklbfgs import ShardedDataset, connect
from dasklbfgs.errors import PartitionError, PartitionLostError
from dasklbfgs.models import MLP, LocalAutoencoder, Logistic
from dasklbfgs.parallel import Exchange, partition, run_in_process
from dasklbfgs.parallel.actor import RECENT_JOBS
from dasklbfgs.parallel.mlp import PartitionedMLP
from dasklbfgs.parallel.replica import PartitionedReplica, worker_groups
from dasklbfgs.sandblaster import sandblaster_lbfgs
from tests._kills import kill_at_iteration


def _rows(n_features: int, n_classes: int, rows: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, n_features)), rng.integers(0, n_classes, rows)


@pytest.mark.parametrize("name", ["mlp-sigmoid", "mlp-relu", "local-autoencoder"])
def test_a_replica_on_two_workers_gives_the_models_sums(client, name) -> None:
    model = {"mlp-sigmoid": MLP(12, (16, 9), 5), "mlp-relu": MLP(12, (16, 9), 5, activation="relu"),
             "local-autoencoder": LocalAutoencoder(8, window=4, stride=2, maps=3)}[name]
    X, y = _rows(model.n_features, 5)
    if name == "local-autoencoder":
        X = 0.1 + 0.8 / (1.0 + np.exp(-X))  # pixels in (0.1, 0.9)
    w = np.random.default_rng(1).uniform(0.5, 2.0, size=len(y))
    params = model.init_params(3)
    partitioned = partition(model, 2)
    with PartitionedReplica(client, partitioned) as replica:
        assert len(set(replica.workers)) == 2
        for weights in (None, w):
            loss, grad = replica.loss_grad_sum(params, X, y, weights)
            ref_loss, ref_grad = model.loss_grad_sum(params, X, y, weights)
            assert loss == pytest.approx(ref_loss, rel=1e-12)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12 * np.abs(ref_grad).max())
        for rows in (slice(None, 120), slice(120, None)):
            replica.loss_grad_sum(params, X[rows], y[rows])
        stats = replica.stats()
    # the same messages as the reference executor's: only the partitions' own blocks travel
    def sent(rows: slice) -> list[int]:
        run = run_in_process([partitioned.program(p, part, X[rows], y[rows]) for p, part in
                              enumerate(partitioned.split(params))])
        return [sum(by_key.values()) for by_key in run.bytes_sent]

    evaluations = [slice(None), slice(None), slice(None, 120), slice(120, None)]
    assert [s["bytes_sent"] for s in stats] == list(np.sum([sent(rows) for rows in evaluations], axis=0))
    assert all(s["evaluations"] == 4 for s in stats)


def test_a_partition_forgets_jobs_that_ended(client) -> None:
    """An abandon or a delivery arriving after its job ended on a partition (the caller gave
    up just as the partition finished) leaves nothing behind; never-started abandoned jobs are
    kept up to a bound."""
    model = MLP(6, (4,), 3)
    X, y = _rows(6, 3)
    partitioned = partition(model, 2)
    with PartitionedReplica(client, partitioned) as replica:
        parts = partitioned.split(model.init_params(0))
        for call in [a.evaluate("done", part, X, y) for a, part in zip(replica.actors, parts)]:
            call.result()
        for call in [a.abandon("done") for a in replica.actors]:
            call.result()
        replica.actors[0].deliver("done", "fwd/1", 1, np.ones(3)).result()  # a peer's late message
        assert [(s["abandoned_kept"], s["inboxes_open"]) for s in replica.stats()] == [(0, 0), (0, 0)]
        for call in [replica.actors[0].abandon(f"never-started-{i}") for i in range(RECENT_JOBS + 5)]:
            call.result()
        assert replica.stats()[0]["abandoned_kept"] == RECENT_JOBS


def test_more_partitions_than_workers_is_refused(client) -> None:
    with pytest.raises(PartitionError, match=r"model_partitions=3 needs 3 distinct workers, the cluster has 2"):
        worker_groups(client, 3)
    with pytest.raises(PartitionError, match=r"model_partitions=3 needs 3 distinct workers"):
        PartitionedReplica(client, partition(MLP(8, (5,), 3), 3))


@pytest.mark.parametrize("state", ["local", "sharded"])
def test_sandblaster_with_two_partitions_follows_one(client, datasets, state) -> None:
    data = datasets["multinomial"]
    model = MLP(8, (6, 4), 3, l2=1e-3)
    shards = {"n_param_shards": 2} if state == "sharded" else {}
    one = sandblaster_lbfgs(model, data, client=client, maxiter=12, state=state, **shards)
    two = sandblaster_lbfgs(model, data, client=client, maxiter=12, state=state, model_partitions=2, **shards)
    assert two.nit == one.nit and two.nfev == one.nfev and two.message == one.message
    np.testing.assert_allclose(two.x, one.x, rtol=1e-10, atol=1e-10)
    assert two.fun == pytest.approx(one.fun, rel=1e-10)
    [replica] = two.partitions["replicas"]  # two workers: one replica of two partitions
    assert [p["partition"] for p in replica] == [0, 1] and two.partitions["recoveries"] == []
    assert len({p["worker"] for p in replica}) == 2 and two.partitions["model_partitions"] == 2
    assert all(p["evaluations"] >= two.nfev for p in replica)  # every portion of every evaluation
    assert all(p["bytes_sent"] > 0 for p in replica)


def test_sandblaster_refuses_a_model_it_cannot_partition(client, datasets) -> None:
    with pytest.raises(PartitionError, match=r"Logistic cannot be partitioned .* the partitionable models are"):
        sandblaster_lbfgs(Logistic(8), datasets["logistic"], client=client, model_partitions=2)


class BuggyPartitions(PartitionedMLP):
    """Partition 1's program raises: a bug in the model, not a lost worker."""

    def program(self, p, params_p, X, y, w=None):
        if p == 1:
            raise ValueError("a bug in partition 1's program")
        return super().program(p, params_p, X, y, w)


def test_a_partitions_own_error_reaches_the_caller_as_itself(client) -> None:
    """Not a PartitionLostError (which Sandblaster answers by re-creating the replica and
    trying again): the same bug would come back on every replica."""
    model = MLP(6, (4,), 3)
    X, y = _rows(6, 3)
    with PartitionedReplica(client, BuggyPartitions(model, 2)) as replica:
        with pytest.raises(ValueError, match="a bug in partition 1's program"):
            replica.loss_grad_sum(model.init_params(0), X, y)


def test_sandblaster_re_creates_a_replica_whose_partition_was_killed(tmp_path) -> None:
    """SIGKILL on a partition's worker mid-run: the evaluation starts over on a re-created
    replica (the nanny restarts the worker) and the run ends where an undisturbed one does."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1200, 6))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > X[:, 1]).astype(np.int64) + (X[:, 2] > 1),
                                 shard_rows=300)
    model = MLP(6, (5,), 3, l2=1e-3)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        undisturbed = sandblaster_lbfgs(model, data, client=client, maxiter=8, model_partitions=2)
        kill, killed = kill_at_iteration(client, 3, victim=1)
        disturbed = sandblaster_lbfgs(model, data, client=client, maxiter=8, model_partitions=2, callback=kill)
    assert killed and disturbed.partitions["recoveries"]
    lost = [(x["partition"], x["worker"]) for r in disturbed.partitions["recoveries"] for x in r["lost"]]
    assert lost and all(x == (1, killed["worker"]) for x in lost)  # the victim's partition, on the worker killed
    assert disturbed.nit == undisturbed.nit
    np.testing.assert_allclose(disturbed.x, undisturbed.x, rtol=1e-12, atol=1e-14)


def test_a_partition_waiting_for_a_silent_peer_gives_up_naming_it_and_an_abort_ends_the_wait(client) -> None:
    """The one transport's waits (Sandblaster's evaluations and Downpour's partition tasks
    both exchange through PartitionActor.exchange) end with PartitionLostError naming the
    partition, its replica, the message and the silent peer; an abort ends a wait at once."""
    partitioned = partition(MLP(6, (4,), 3), 2)
    with PartitionedReplica(client, partitioned, timeout=0.5, replica=3) as replica:
        waiting = replica.actors[0].exchange("step 7", Exchange("softmax", {}, (1,)))
        with pytest.raises(PartitionLostError, match=r"partition 0 of replica 3 waited 0 s for 'softmax' of step 7 "
                                                     r"from partition 1; its worker is probably gone"):
            waiting.result()
    with PartitionedReplica(client, partitioned, timeout=60.0) as replica:
        waiting = replica.actors[1].exchange("step 8", Exchange("softmax", {}, (0,)))
        started = time.monotonic()
        replica.actors[1].abort().result()
        with pytest.raises(PartitionLostError, match=r"partition 1 of replica 0 stopped waiting for 'softmax' of "
                                                     r"step 8: the replica was torn down"):
            waiting.result()
        assert time.monotonic() - started < 10
