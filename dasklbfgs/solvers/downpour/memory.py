"""Where a Downpour run's pieces start (:class:`Homes`), and whether the run fits its
workers' memory, checked before anything starts (:func:`check_run_memory`).

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

__all__ = ["PARTITION_VECTORS", "REPLICA_VECTORS", "TRANSFER_VECTORS", "Homes", "Placement", "WorkerLoad",
           "check_memory", "check_run_memory", "plan_loads", "shard_vectors"]

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


@dataclass(frozen=True)
class Homes:
    """Where a run's parameter shards and replicas start, on the workers alive then
    (``workers``; ``[None]``: any worker, none had joined). Without model partitions, shards
    go round-robin over the workers and replicas after them. With them (``groups``: disjoint
    groups of K workers; ``owners``: each partition's shards), partition p of replica r starts
    on worker p of group r, and each shard on the worker of the partition owning it in the
    first group: that partition's fetches and pushes stay in its process, and a worker holds
    its partitions' shards only."""

    workers: list[str | None]
    n_shards: int
    groups: list[list[str]] | None = None
    owners: list[list[int]] | None = None

    def replica(self, r: int, p: int = 0) -> str | None:
        """Where replica r (its partition p) starts."""
        if self.groups is None:
            return self.workers[(self.n_shards + r) % len(self.workers)]
        return self.groups[r % len(self.groups)][p]

    def shard(self, i: int) -> str | None:
        """Where parameter shard i starts."""
        if self.groups is None:
            return self.workers[i % len(self.workers)]
        return self.replica(0, self.shard_partition(i))

    def shard_partition(self, i: int) -> int:
        """The partition whose parameters shard i holds (0 without partitions)."""
        return 0 if self.owners is None else next(p for p, owned in enumerate(self.owners) if i in owned)

    def placement(self, n_replicas: int, shard_sizes: Sequence[int], replica_sizes: Sequence[int]) -> Placement:
        """Every shard's and replica's (partition's) home and size; ``replica_sizes``: the
        parameters of a replica, or of each of its partitions."""
        shards = [(self.shard(i), size, {self.replica(r, self.shard_partition(i)) for r in range(n_replicas)})
                  for i, size in enumerate(shard_sizes)]
        replicas = [(self.replica(r, p), size) for r in range(n_replicas) for p, size in enumerate(replica_sizes)]
        return Placement(shards, replicas, partitioned=len(replica_sizes) > 1)


def check_run_memory(placement: Placement, vectors: int, workers: Mapping[str, dict], *, what: str,
                     remedies: Sequence[str]) -> dict[str, int]:
    """Refuse (:class:`InsufficientMemoryError`, :func:`check_memory`) a run whose
    ``placement`` would not fit a worker's memory (``vectors``: :func:`shard_vectors`); the
    bytes planned on each worker."""
    loads = {w: load for w, load in plan_loads(placement, vectors).items() if w is not None}
    check_memory(loads, workers, what=what, remedies=remedies)
    return {w: load.total for w, load in loads.items()}


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
