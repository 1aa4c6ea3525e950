"""Partitioned replicas on a real cluster: the partitions exchange worker to worker and give
the unpartitioned model's sums; Sandblaster with model_partitions follows the K = 1 run."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.errors import PartitionError
from dasklbfgs.models import MLP, Logistic
from dasklbfgs.parallel import partition, run_in_process
from dasklbfgs.parallel.replica import PartitionedReplica, worker_groups
from dasklbfgs.sandblaster import sandblaster_lbfgs


def _rows(n_features: int, n_classes: int, rows: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, n_features)), rng.integers(0, n_classes, rows)


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_a_replica_on_two_workers_gives_the_models_sums(client, activation) -> None:
    model = MLP(12, (16, 9), 5, activation=activation)
    X, y = _rows(12, 5)
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
        stats = replica.stats()
    # the same messages as the reference executor's: only the partitions' own blocks travel
    in_process = run_in_process([partitioned.program(p, part, X, y) for p, part in
                                 enumerate(partitioned.split(params))])
    assert [s["bytes_sent"] for s in stats] == [2 * sum(sent.values()) for sent in in_process.bytes_sent]
    assert all(s["evaluations"] == 2 for s in stats)


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
    assert len(two.partitions) == 1 and [p["partition"] for p in two.partitions[0]] == [0, 1]
    assert all(p["evaluations"] >= two.nfev for p in two.partitions[0])  # every portion of every evaluation


def test_sandblaster_refuses_a_model_it_cannot_partition(client, datasets) -> None:
    with pytest.raises(PartitionError, match=r"Logistic cannot be partitioned .* the partitionable models are"):
        sandblaster_lbfgs(Logistic(8), datasets["logistic"], client=client, model_partitions=2)
