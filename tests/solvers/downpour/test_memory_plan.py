"""Downpour's memory plan: what each worker will hold, and the refusal (pure, no cluster)."""

from __future__ import annotations

import pytest

from dasklbfgs.errors import InsufficientMemoryError
from dasklbfgs.solvers.downpour.memory import (
    PARTITION_VECTORS,
    REPLICA_VECTORS,
    TRANSFER_VECTORS,
    Homes,
    Placement,
    check_memory,
    plan_loads,
    shard_vectors,
)

MIB = 2**20


def test_homes_spread_shards_then_replicas_and_keep_a_partitions_shards_on_its_worker() -> None:
    homes = Homes(["a", "b", "c"], n_shards=2)
    assert [homes.shard(i) for i in range(2)] == ["a", "b"]
    assert [homes.replica(r) for r in range(4)] == ["c", "a", "b", "c"]  # after the shards' workers
    placement = homes.placement(2, [10, 30], [40])
    assert placement.shards == [("a", 10, {"c", "a"}), ("b", 30, {"c", "a"})]
    assert placement.replicas == [("c", 40), ("a", 40)] and not placement.partitioned
    # two partitions, two groups; shards 0 and 1 hold partition 1's parameters, shard 2 partition 0's
    parted = Homes(["a", "b", "c", "d"], n_shards=3, groups=[["a", "b"], ["c", "d"]], owners=[[2], [0, 1]])
    assert [parted.shard(i) for i in range(3)] == ["b", "b", "a"]
    assert [(parted.replica(r, 0), parted.replica(r, 1)) for r in range(3)] == [("a", "b"), ("c", "d"), ("a", "b")]
    placement = parted.placement(2, [5, 5, 8], [8, 10])
    assert placement.shards[2] == ("a", 8, {"a", "c"}) and placement.shards[0] == ("b", 5, {"b", "d"})
    assert placement.replicas == [("a", 8), ("b", 10), ("c", 8), ("d", 10)] and placement.partitioned


def test_a_worker_holds_its_shards_its_replicas_and_pushes_from_elsewhere() -> None:
    # shard 0 on a, pushed to by the replica on a; shard 1 on b, pushed to from a
    placement = Placement([("a", 100, {"a"}), ("b", 300, {"a"})], [("a", 400)])
    loads = plan_loads(placement, shard_vectors({"accumulator": None}, l1=False, checkpoints=False))
    assert loads["a"].parts == {"parameter shards": 8 * 2 * 100, "replicas": 8 * REPLICA_VECTORS * 400}
    assert loads["b"].parts == {"parameter shards": 8 * 2 * 300,
                                "pushes from other workers": 8 * TRANSFER_VECTORS * 300}
    partitioned = plan_loads(Placement([("a", 200, {"a"})], [("a", 200), ("b", 200)], partitioned=True), 1)
    assert partitioned["b"].parts == {"partitions of replicas": 8 * PARTITION_VECTORS * 200}


def test_a_checkpoint_doubles_a_shards_state_while_it_is_copied() -> None:
    assert shard_vectors({"z": None, "n": None}, l1=True, checkpoints=True) == 2 * (1 + 2 + 1)


def test_only_workers_past_their_usable_memory_are_refused() -> None:
    loads = plan_loads(Placement([("a", MIB, {"a"})], [("a", 10 * MIB)]), 1)  # 8 + 480 MiB
    workers = {"a": {"memory_limit": 1024 * MIB, "metrics": {"memory": 100 * MIB}}}
    check_memory(loads, workers, what="run", remedies=["more memory"])  # 588 MiB of 819 usable
    workers["a"]["metrics"]["memory"] = 400 * MIB
    with pytest.raises(InsufficientMemoryError,
                       match=r"run needs about 488 MiB on worker a \(parameter shards 8 MiB, "
                             r"replicas 480 MiB\) besides the 400 MiB it uses now; Dask lets it "
                             r"use 819 MiB \(80% of its 1.00 GiB memory limit\).*: more memory"):
        check_memory(loads, workers, what="run", remedies=["more memory"])
    check_memory(loads, {"a": {"memory_limit": 0}}, what="run", remedies=[])  # no limit: not checked
