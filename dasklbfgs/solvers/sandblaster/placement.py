"""Which holder of a shard computes each of its portions: dynamic load balancing.

A backup leaves a copy of the straggler's shard on its helper (:mod:`.shard_cache`), so
some shards have several holders. Each portion of such a shard goes to the holder that
would finish it first at the speeds the workers delivered in the last evaluation, so work
drifts away from a persistent straggler. Placement never touches the sums: they are added
in portion order (docs/algorithms.md §1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dasklbfgs.solvers.sandblaster.portions import Portion

__all__ = ["Speeds"]


class Speeds:
    """The rows per second each worker delivered when last measured."""

    def __init__(self) -> None:
        self.rows_per_second: dict[str, float] = {}

    def measured(self, worker: str, rows: int, seconds: float) -> None:
        """``worker`` computed ``rows`` in ``seconds`` (at least one row counts: a worker
        given work that computed none is slow, not unknown)."""
        self.rows_per_second[worker] = max(rows, 1) / max(seconds, 1e-9)

    def pin(self, holders: Sequence[Mapping[str | None, Any]], portions: Sequence[Portion]) -> list[str | None]:
        """The worker each of ``portions`` runs on: a holder of its shard (``holders``: per
        shard, worker -> its copy; None while the shard is being reloaded), the one that
        would finish it first given the rows already placed on each (a worker never
        measured counts as fast as the fastest)."""
        load: Counter[str | None] = Counter()
        fastest = max(self.rows_per_second.values(), default=1.0)
        pinned: list[str | None] = []
        for p in portions:
            rows = p.stop - p.start
            worker = min(sorted(holders[p.shard], key=str),
                         key=lambda w: (load[w] + rows) / self._speed(w, fastest))
            load[worker] += rows
            pinned.append(worker)
        return pinned

    def _speed(self, worker: str | None, fastest: float) -> float:
        return fastest if worker is None else self.rows_per_second.get(worker, fastest)
