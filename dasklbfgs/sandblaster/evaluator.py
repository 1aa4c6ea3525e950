"""The mega-batch evaluation: Dask futures over cached data shards, backups, fixed-order sums.

Per evaluation the parameters are scattered once, one ``sandblaster-gradient`` task is
submitted per portion, and the partial ``(loss, gradient)`` sums are added in portion
order, so the result does not depend on which worker computed what (DESIGN.md,
"Determinism"). Shards are loaded from Zarr once and stay in worker memory as Dask data;
Dask runs a portion where its shard lives (data affinity) and reloads a shard from Zarr
if the worker holding it is lost.

Backup tasks (ALGORITHMS.md §1, after MapReduce): when an evaluation runs past
``backup_slack`` times the usual duration, every portion still outstanding is copied to a
worker that does not hold its shard, reading its rows straight from Zarr; whichever copy
finishes first is used and the other is cancelled. Both copies compute the same numbers.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import Client, Future, wait

from dasklbfgs.sandblaster.portions import Portion, default_portion_rows, plan_portions
from dasklbfgs.sandblaster.tasks import (
    column_moments,
    load_shard,
    portion_loss_grad,
    portion_loss_grad_from_store,
)

BACKUP_FLOOR_SECONDS = 0.02
RESCUE_CHECK_SECONDS = 1.0  # without backup tasks: how often to look for lost workers


@dataclass
class EvaluatorStats:
    """Counters a run reports: evaluations, their wall times, backup tasks launched and won."""

    load_seconds: float = 0.0
    evaluations: int = 0
    eval_seconds: list[float] = field(default_factory=list)
    backups_launched: int = 0
    backups_won: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_seconds": self.load_seconds,
            "evaluations": self.evaluations,
            "eval_seconds_median": statistics.median(self.eval_seconds) if self.eval_seconds else None,
            "eval_seconds_total": sum(self.eval_seconds),
            "backups_launched": self.backups_launched,
            "backups_won": self.backups_won,
        }


class MegaBatchEvaluator:
    """Evaluate a model's loss and gradient *sums* over a whole sharded dataset on Dask."""

    def __init__(
        self,
        client: Client,
        model: Any,
        data: Any,
        *,
        portion_rows: int | None = None,
        backup_tasks: bool = True,
        backup_slack: float = 1.5,
    ) -> None:
        self.client = client
        self.model = model
        self.data = data
        self.backup_tasks = backup_tasks
        self.backup_slack = backup_slack
        self.token = uuid.uuid4().hex[:8]
        self.stats = EvaluatorStats()
        self._recent: deque[float] = deque(maxlen=5)
        self._next_key = 0

        workers = self._workers()
        n_threads = sum(w["nthreads"] for w in workers.values())
        if portion_rows is None:
            portion_rows = default_portion_rows(data.n_samples, data.shard_rows, n_threads)
        self.portions: list[Portion] = plan_portions(data.shard_bounds, portion_rows)

        started = time.perf_counter()
        addresses = sorted(workers)
        n = data.n_shards
        # Sequential shards go to the same worker (data affinity, ALGORITHMS.md §1).
        self.shards: list[Future] = [
            client.submit(
                load_shard, data, i,
                key=f"sandblaster-shard-{self.token}-{i}",
                workers=[addresses[i * len(addresses) // n]],
                allow_other_workers=True,
                pure=False,
            )
            for i in range(n)
        ]
        wait(self.shards)
        for f in self.shards:
            if f.status == "error":
                f.result()  # re-raise the worker's exception here
        self.stats.load_seconds = time.perf_counter() - started

    def _workers(self) -> dict[str, Any]:
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        if not workers:
            self.client.wait_for_workers(1)
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return workers

    # -- evaluation ----------------------------------------------------------------------

    def evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient sums over all rows at parameters ``x``."""
        client, e = self.client, self._next_key
        self._next_key += 1  # fresh task keys even if this evaluation fails and is retried
        started = time.perf_counter()
        [x_future] = client.scatter([x], hash=False)
        primaries, pinned = self._submit_primaries(x_future, e)
        with client.as_current():  # distributed.wait resolves the current client
            winners, launched = self._collect(primaries, pinned, x_future, e, started)
            results = client.gather(winners)
        duration = time.perf_counter() - started
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(duration)
        if not launched:
            self._recent.append(duration)

        loss = 0.0
        sums = np.zeros(self.model.n_sums)
        for part_loss, part_sums in results:  # fixed portion order: deterministic sums
            loss += part_loss
            sums += part_sums
        return loss, sums

    def _submit_primaries(self, x_future: Future, e: int) -> tuple[list[Future], list[str | None]]:
        """One task per portion, pinned to the worker holding its shard (data affinity).

        Pinning also keeps Dask's work stealing from copying shards between workers;
        balancing across workers is the backup tasks' job, as in the paper. A shard lost
        with its worker is reloaded from Zarr by Dask and the next evaluation follows it;
        portions pinned to a worker that dies mid-evaluation are rescued by
        :meth:`_collect`. Returns the futures and the worker each is pinned to.
        """
        holders = self.client.who_has(self.shards)
        groups: dict[str | None, list[Portion]] = {}
        for p in self.portions:
            where = holders.get(self.shards[p.shard].key) or (None,)
            groups.setdefault(sorted(where)[0], []).append(p)
        futures: dict[int, Future] = {}
        pinned: dict[int, str | None] = {}
        for worker, portions in groups.items():
            # One client.map per worker is one message to the scheduler.
            mapped = self.client.map(
                portion_loss_grad,
                [self.shards[p.shard] for p in portions],
                [p.local for p in portions],
                model=self.model,
                x=x_future,
                key=[f"sandblaster-gradient-{self.token}-{e}-{p.index}" for p in portions],
                workers=None if worker is None else [worker],
                allow_other_workers=worker is None,
                pure=False,
            )
            futures.update(zip((p.index for p in portions), mapped))
            pinned.update((p.index, worker) for p in portions)
        return [futures[p.index] for p in self.portions], [pinned[p.index] for p in self.portions]

    def _collect(self, primaries: list[Future], pinned: list[str | None], x_future: Future, e: int,
                 started: float) -> tuple[list[Future], bool]:
        """Wait for one finished copy of every portion; returns them and whether backups ran.

        Until the next deadline a single ``wait`` covers everything (no per-task overhead
        in the common case). At each deadline:

        * with backup tasks, portions still outstanding get one backup each on a worker
          that is not busy with outstanding work, and the deadline moves on by one period,
          so portions that fall behind later are backed up too;
        * portions pinned to a worker that has left the cluster (or whose copies were all
          lost) are rescued: re-run from Zarr wherever Dask likes, backups on or off.
        """
        n = len(primaries)
        winners: list[Future | None] = [None] * n
        copies = [1] * n          # copies of each portion still pending
        backed_up: set[int] = set()
        rescued: set[int] = set()
        pending = set(primaries)
        typical = statistics.median(self._recent) if self._recent else None
        if self.backup_tasks:
            period = None if typical is None else max(BACKUP_FLOOR_SECONDS, self.backup_slack * typical)
        else:
            period = RESCUE_CHECK_SECONDS
        deadline = None if period is None else started + period
        launched = False
        n_done = 0
        while n_done < n:
            now = time.perf_counter()
            timeout = None if deadline is None else max(0.0, deadline - now)
            mode = "FIRST_COMPLETED" if (launched or (self.backup_tasks and period is None)) else "ALL_COMPLETED"
            try:
                done, pending = wait(pending, timeout=timeout, return_when=mode)
            except TimeoutError:
                done = {f for f in pending if f.done()}
                pending -= done
            for f in done:
                i = portion_index(f.key)
                copies[i] -= 1
                if winners[i] is not None:
                    continue
                if f.status == "error":
                    f.result()  # re-raise the task's exception
                if f.status != "finished":  # lost with its worker, or cancelled
                    continue
                winners[i] = f
                n_done += 1
                if f.key.startswith("sandblaster-backup"):
                    self.stats.backups_won += 1
                losers = [g for g in pending if portion_index(g.key) == i]
                if losers:
                    self.client.cancel(losers)
                    pending.difference_update(losers)
            if n_done == n:
                break
            now = time.perf_counter()
            if period is None and 2 * n_done >= n:
                # First evaluation, no history: expect about twice the time to half done.
                period = max(BACKUP_FLOOR_SECONDS, self.backup_slack * 2 * (now - started))
                deadline = started + period
            orphans = [i for i in range(n) if winners[i] is None and copies[i] == 0]
            if (deadline is not None and now >= deadline) or orphans:
                alive = set(self._workers())
                stranded = [p for p in self.portions
                            if winners[p.index] is None and p.index not in rescued
                            and (copies[p.index] == 0 or (pinned[p.index] is not None and pinned[p.index] not in alive))]
                for p, future in zip(stranded, self._rescue(stranded, x_future, e)):
                    rescued.add(p.index)
                    copies[p.index] += 1
                    pending.add(future)
                if self.backup_tasks and deadline is not None and now >= deadline:
                    late = [p for p in self.portions
                            if winners[p.index] is None and p.index not in backed_up | rescued]
                    backups = self._launch_backups(late, pending, x_future, e)
                    for b in backups:
                        backed_up.add(portion_index(b.key))
                        copies[portion_index(b.key)] += 1
                    pending.update(backups)
                    launched = launched or bool(backups)
                if deadline is not None and now >= deadline:
                    deadline = now + period
        return winners, launched

    def _from_store(self, kind: str, p: Portion, x_future: Future, e: int, worker: str | None = None) -> Future:
        """A copy of portion ``p`` that reads its rows from Zarr (a backup or a rescue),
        on ``worker`` only, or anywhere when None."""
        return self.client.submit(
            portion_loss_grad_from_store, self.model, self.data, x_future, p.start, p.stop,
            key=f"sandblaster-{kind}-{self.token}-{e}-{p.index}",
            workers=None if worker is None else [worker],
            allow_other_workers=False,
            pure=False,
        )

    def _rescue(self, portions: list[Portion], x_future: Future, e: int) -> list[Future]:
        """Re-run portions whose worker is gone, from Zarr, on any worker."""
        return [self._from_store("rescue", p, x_future, e) for p in portions]

    def _launch_backups(self, late: list[Portion], pending: set[Future], x_future: Future, e: int) -> list[Future]:
        """Copy ``late`` portions to workers not busy with this evaluation's outstanding tasks."""
        if not late:
            return []
        processing = self.client.processing()
        outstanding = {f.key for f in pending}
        busy = {w for w, keys in processing.items() if outstanding.intersection(keys)}
        idle = sorted((w for w in processing if w not in busy), key=lambda w: len(processing[w]))
        if not idle:
            return []
        backups = [self._from_store("backup", p, x_future, e, idle[j % len(idle)]) for j, p in enumerate(late)]
        self.stats.backups_launched += len(backups)
        return backups

    # -- other passes over the shards ---------------------------------------------------------

    def column_moments(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Per-shard ``(n, mean, M2)`` of the columns of X, in shard order."""
        futures = [
            self.client.submit(column_moments, s, key=f"sandblaster-moments-{self.token}-{i}", pure=False)
            for i, s in enumerate(self.shards)
        ]
        return self.client.gather(futures)

    def close(self) -> None:
        """Release the cached shards from worker memory."""
        if self.shards:
            self.client.cancel(self.shards)
            self.shards = []


def portion_index(key: str) -> int:
    """Portion index from a task key ``sandblaster-<kind>-<token>-<eval>-<index>``."""
    return int(key.rsplit("-", 1)[1])
