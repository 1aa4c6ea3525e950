"""Downpour's memory plan: what each worker will hold, and the refusal (pure, no cluster)."""

from __future__ import annotations

import pytest

from dasklbfgs.errors import InsufficientMemoryError
from dasklbfgs.solvers.downpour.memory import (
    PARTITION_VECTORS,
    REPLICA_VECTORS,
    TRANSFER_VECTORS,
    Placement,
    check_memory,
    plan_loads,
    shard_vectors,
)

MIB = 2**20


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
