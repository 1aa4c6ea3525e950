"""Whether a Downpour run fits its workers' memory, checked before anything starts.

A model too big for one worker trains with ``model_partitions`` (docs/algorithms.md §4);
without it, a replica holds the whole parameter vector several times over and Dask's nanny
would kill its worker, restart it and kill it again. :func:`check_memory` adds up what each
worker will hold (the parameter shards placed on it, with the update rule's state, and the
replicas or partitions it runs) and refuses a run that does not fit, naming the worker, the
parts and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import dask
import numpy as np

from dasklbfgs.errors import InsufficientMemoryError

__all__ = ["PARTITION_VECTORS", "REPLICA_VECTORS", "TRANSFER_VECTORS", "Placement", "WorkerLoad", "check_memory",
           "plan_loads", "shard_vectors"]

#: Parameter-length float64 vectors a replica holds at its peak, measured (``python -m
#: benchmarks.partition_memory``: 4.9 for a 19M-parameter MLP): its parameters, the last
#: gradient (pushed, kept until the next replaces it) and the objective's arithmetic.
REPLICA_VECTORS = 6
#: The same for a partition of a replica, of its own slice (measured 4.1).
PARTITION_VECTORS = 5
#: Slice-length vectors a shard's worker holds besides while a push from another worker is
#: applied: the gradient received and the values sent back (measured 2.0).
TRANSFER_VECTORS = 2


def shard_vectors(rule_state: Mapping[str, np.ndarray], l1: bool, checkpoints: bool) -> int:
    """Slice-length float64 vectors a parameter shard holds: its values, the rule's state
    (``rule.init`` of one value), the model's l1 weights; twice over while a checkpoint
    copies its state."""
    kept = 1 + len(rule_state) + int(l1)
    return kept + (kept if checkpoints else 0)


@dataclass
class WorkerLoad:
    """What one worker will hold, in bytes, by part."""

    parts: dict[str, int] = field(default_factory=dict)

    def add(self, part: str, nbytes: int) -> None:
        self.parts[part] = self.parts.get(part, 0) + int(nbytes)

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass
class Placement:
    """Where a run's pieces start. ``shards``: per parameter shard, its worker, its length and
    the workers of the replicas (or partitions) that push to it; ``replicas``: per replica
    (or partition of one), its worker and its parameter count; ``partitioned``: whether the
    replicas are partitions."""

    shards: list[tuple[str | None, int, set[str | None]]]  # None: any worker (none had joined)
    replicas: list[tuple[str | None, int]]
    partitioned: bool = False


def plan_loads(placement: Placement, shard_vectors: int) -> dict[str | None, WorkerLoad]:
    """What each worker will hold at its peak, by part (float64 values)."""
    loads: dict[str | None, WorkerLoad] = {}
    pushed_from_elsewhere: dict[str | None, int] = {}  # per worker, its largest shard pushed to from another
    for home, size, users in placement.shards:
        loads.setdefault(home, WorkerLoad()).add("parameter shards", 8 * shard_vectors * size)
        if users - {home}:
            pushed_from_elsewhere[home] = max(pushed_from_elsewhere.get(home, 0), size)
    for home, size in pushed_from_elsewhere.items():
        loads[home].add("pushes from other workers", 8 * TRANSFER_VECTORS * size)
    part, vectors = ("partitions of replicas", PARTITION_VECTORS) if placement.partitioned else \
        ("replicas", REPLICA_VECTORS)
    for home, size in placement.replicas:
        loads.setdefault(home, WorkerLoad()).add(part, 8 * vectors * size)
    return loads


def usable_fraction() -> float:
    """The share of a worker's memory limit a run may plan to fill: up to where Dask pauses
    the worker (``distributed.worker.memory.pause``), or terminates it if pausing is off."""
    for key in ("distributed.worker.memory.pause", "distributed.worker.memory.terminate"):
        fraction = dask.config.get(key, default=False)
        if fraction:
            return float(fraction)
    return 1.0


def check_memory(loads: Mapping[str, WorkerLoad], workers: Mapping[str, dict], *, what: str,
                 remedies: Sequence[str]) -> None:
    """Raise :class:`InsufficientMemoryError` if a worker's planned ``loads`` plus the memory
    it uses now exceed the usable share of its limit (``workers``: the scheduler's worker
    info; workers without a limit are not checked)."""
    fraction = usable_fraction()
    for address, load in loads.items():
        info = workers.get(address, {})
        limit = info.get("memory_limit") or 0
        in_use = int(info.get("metrics", {}).get("memory", 0))
        if limit <= 0 or in_use + load.total <= fraction * limit:
            continue
        parts = ", ".join(f"{part} {_gib(nbytes)}" for part, nbytes in load.parts.items())
        raise InsufficientMemoryError(
            f"{what} needs about {_gib(load.total)} on worker {address} ({parts}) besides the {_gib(in_use)} it "
            f"uses now; Dask lets it use {_gib(fraction * limit)} ({fraction:.0%} of its {_gib(limit)} memory "
            f"limit) before pausing or restarting it: {'; or '.join(remedies)}")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"
