"""Downpour on partitioned replicas (model_partitions=K): each partition fetches and pushes only
its own parameter shards, in lockstep with its peers, and trains what the unpartitioned
replica trains."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.cli.report import train_report
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.errors import ConfigurationError, InsufficientMemoryError, PartitionError
from dasklbfgs.models import MLP, Logistic
from dasklbfgs.optim.updates import sgd
from dasklbfgs.parallel import partition
from dasklbfgs.solvers._replicas.batches import epoch_order
from dasklbfgs.solvers.downpour.partitions import partition_bounds
from tests._datasets import load_all

MODEL = MLP(8, (6, 4), 3, l2=1e-3)


def test_one_replica_of_two_partitions_is_sequential_sgd(client, datasets) -> None:
    data = datasets["multinomial"]
    x0 = MODEL.init_params(5)  # a warm start, in the model's layout
    result = downpour_sgd(MODEL, data, client=client, x0=x0, n_replicas=1, n_param_shards=3, batch_size=200,
                          optimizer="sgd", learning_rate=0.2, epochs=1, seed=7, model_partitions=2)
    # the same loop on the unpartitioned model in this process
    X, y = load_all(data)
    rule, w = sgd(0.2), x0.copy()
    state = rule.init(w)
    order = epoch_order(data.n_samples, 7, 0, 0)
    for start in range(0, data.n_samples, 200):
        index = np.sort(order[start:start + 200])
        _, g = MODEL.objective(w, X[index], y[index])
        delta, state = rule.update(g, state)
        w = w + delta
    assert result.nit == 30 and result.success
    np.testing.assert_allclose(result.x, w, rtol=1e-10, atol=1e-12)
    # each shard lies in one partition and took one push per step: from that partition only
    bounds, owners = partition_bounds(partition(MODEL, 2), 3)
    stats, partitions = result.stats, result.partitions
    assert partitions["model_partitions"] == 2 and partitions["shards_of_partition"] == owners
    assert partitions["recoveries"] == [] and "model_partitions" not in stats
    assert sorted(i for own in owners for i in own) == list(range(len(bounds))) and len(bounds) > 3
    assert stats["pushes_per_shard"] == [30] * len(bounds)
    assert stats["bytes_in_per_shard"] == [30 * 8 * (b - a) for a, b in bounds]
    assert stats["bytes_out_per_shard"] == [30 * 8 * (b - a) for a, b in bounds]  # a fetch riding on each push
    [replica] = partitions["replicas"]
    assert [p["partition"] for p in replica] == [0, 1] and len({p["worker"] for p in replica}) == 2
    assert all(p["pushes"] == 30 and p["bytes_sent"] > 0 and p["messages_sent"] > 0 for p in replica)
    # `dasklbfgs train` reads the same shape as Sandblaster's
    assert train_report(MODEL, result, data, None, client)["partitions"] == {
        "per_replica": 2, "replicas": 1, "bytes_sent": sum(p["bytes_sent"] for p in replica), "recoveries": 0}
    # each partition's shards live on its worker (its fetches and pushes stay in its process)
    assert stats["shard_workers"] == [replica[p]["worker"] for i in range(len(bounds))
                                      for p, own in enumerate(owners) if i in own]


def test_two_partitions_follow_one_with_adagrad_and_resume(client, datasets, tmp_path) -> None:
    data = datasets["multinomial"]
    common = dict(client=client, n_replicas=1, n_param_shards=2, batch_size=100, learning_rate=0.1, seed=3)
    one = downpour_sgd(MODEL, data, max_steps=20, **common)
    path = tmp_path / "dp.zarr"
    first = downpour_sgd(MODEL, data, max_steps=12, model_partitions=2, checkpoint_path=path, **common)
    assert first.nit == 12 and first.message.startswith("max_steps (12) reached; the mini-batch loss (first push, "
                                                        "last poll) fell from ")  # the partitions stopped together
    with pytest.raises(ConfigurationError, match=r"model_partitions=2 .* resume with model_partitions=2, not 1"):
        downpour_sgd(MODEL, data, max_steps=20, checkpoint_path=path, resume=True, **common)
    two = downpour_sgd(MODEL, data, max_steps=20, model_partitions=2, checkpoint_path=path, resume=True, **common)
    assert two.nit == one.nit == 20
    np.testing.assert_allclose(two.x, one.x, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "model, kwargs, error, match",
    [
        (MODEL, {"model_partitions": 3}, PartitionError,
         r"model_partitions=3 needs 3 distinct workers, the cluster has 2"),
        (Logistic(8), {"model_partitions": 2}, PartitionError, r"Logistic cannot be partitioned"),
        (MODEL, {"model_partitions": 2, "overlap": True}, ConfigurationError,
         r"model_partitions=2 runs each partition's pushes in lockstep .* pass overlap=False"),
        (MODEL, {"model_partitions": 2, "sparse": True}, ConfigurationError, r"pass sparse=False"),
        (MODEL, {"model_partitions": 0}, ConfigurationError, r"model_partitions must be an integer >= 1, got 0"),
        # 49M parameters: a replica's vectors alone are ~2.2 GiB, on workers of 2 GiB (checked before any start)
        (MLP(8, (7000, 7000), 3), {}, InsufficientMemoryError,
         r"MLP.* \(49\d{6} parameters, model_partitions=1\) needs about \d\.\d\d GiB on worker tcp://127\.0\.0\.1:\d+ "
         r"\(parameter shards \d+ MiB, pushes from other workers \d+ MiB, replicas 2\.\d\d GiB\)"
         r".*80% of its 2\.00 GiB memory limit.*: "
         r"model_partitions=2 or more \(MLP can be partitioned"),
    ],
    ids=["workers", "model", "overlap", "sparse", "zero", "memory"],
)
def test_refused(client, datasets, model, kwargs, error, match) -> None:
    data = datasets["logistic" if isinstance(model, Logistic) else "multinomial"]
    with pytest.raises(error, match=match):
        downpour_sgd(model, data, client=client, **kwargs)
