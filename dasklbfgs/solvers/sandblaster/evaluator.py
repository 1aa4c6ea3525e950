"""The mega-batch evaluation: Dask futures over cached data shards, backups, fixed-order sums.

Per evaluation the parameters are scattered once, one ``sandblaster-gradient`` task is
submitted per portion, and the partial ``(loss, gradient)`` sums are added in portion
order, so the result does not depend on which worker computed what (docs/algorithms.md
§1). Shards are loaded from Zarr once and stay in worker memory as Dask data;
Dask runs a portion where its shard lives (data affinity) and reloads a shard from Zarr
if the worker holding it is lost.

Backup tasks (docs/algorithms.md §1, after MapReduce): once a worker has finished its
portions, the outstanding portions of any worker progressing ``backup_slack`` times slower
are copied to the idle workers, which fetch the shard from its holder; whichever copy
finishes first is used and the other is cancelled. Both copies compute the same numbers.
A helper keeps the shard it fetched, and the next evaluations split that shard's portions
between the two holders, so work drifts away from a persistent straggler (dynamic load
balancing). Portions whose worker died are rescued by reading their rows from Zarr.

Out of core (``cache=False``, chosen by ``sandblaster_lbfgs(cache="auto")`` when the data
do not fit the workers' memory limits), nothing is cached: every evaluation has one task
per shard that reads and decodes its rows from Zarr, unpinned, so Dask hands the next
shard to whichever worker is free (dynamic load balancing by the scheduler itself). Only
the last portions in flight can then straggle: once a worker sits idle and they have been
out ``backup_slack`` times longer than a portion takes, backups read them again on the
idle workers.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import Client, Future, wait

from dasklbfgs.models.base import Model
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.solvers.sandblaster.options import SandblasterOptions
from dasklbfgs.solvers.sandblaster.portions import Portion, default_portion_rows, plan_portions
from dasklbfgs.solvers.sandblaster.tasks import (
    add_sums,
    aligned_shard,
    column_moments,
    load_shard,
    portion_loss_grad,
    portion_loss_grad_from_store,
    reduce_in_groups,
    shard_column_moments,
)

MAX_ATTEMPTS = 3
GATHER_TIMEOUT_SECONDS = 5.0
POLL_SECONDS = 0.01  # with backup tasks: how often to compare the workers' progress
RESCUE_CHECK_SECONDS = 1.0  # how often to look for lost workers


class _EvaluationLost(Exception):
    """A worker died with data this evaluation still needed: start it over."""


@dataclass
class EvaluatorStats:
    """Counters a run reports: evaluations, their wall times, backup tasks launched and won."""

    load_seconds: float = 0.0
    evaluations: int = 0
    eval_seconds: list[float] = field(default_factory=list)
    backups_launched: int = 0
    backups_won: int = 0
    restarts: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_seconds": self.load_seconds,
            "evaluations": self.evaluations,
            "eval_seconds_median": statistics.median(self.eval_seconds) if self.eval_seconds else None,
            "eval_seconds_total": sum(self.eval_seconds),
            "backups_launched": self.backups_launched,
            "backups_won": self.backups_won,
            "evaluation_restarts": self.restarts,
        }


class MegaBatchEvaluator:
    """Evaluate a model's loss and gradient *sums* over a whole sharded dataset on Dask."""

    def __init__(
        self,
        client: Client,
        model: Model,
        data: Any,
        *,
        portion_rows: int | None = None,
        backup_tasks: bool = True,
        backup_slack: float = SandblasterOptions.default("backup_slack"),
        cache: bool = True,
    ) -> None:
        self.client = client
        self.model = model
        self.data = data
        self.backup_tasks = backup_tasks
        self.backup_slack = backup_slack
        self.token = uuid.uuid4().hex[:8]
        self.stats = EvaluatorStats()
        self._next_key = 0
        self._speed: dict[str, float] = {}  # rows/s per worker in the last evaluation
        self.copies: dict[int, dict[str, Future]] = {}  # shard -> helper -> its copy there

        self.cache = cache
        workers = self._workers()
        n_threads = sum(w["nthreads"] for w in workers.values())
        if portion_rows is None:
            # Streaming, a portion decodes the whole Zarr chunk it reads from: one per shard.
            portion_rows = (default_portion_rows(data.n_samples, data.shard_rows, n_threads) if cache
                            else data.shard_rows)
        self.portions: list[Portion] = plan_portions(data.shard_bounds, portion_rows)
        self.shards: list[Future] = []
        if not cache:  # out of core: every evaluation streams the rows from Zarr
            return

        started = time.perf_counter()
        addresses = sorted(workers)
        n = data.n_shards
        # Sequential shards go to the same worker (data affinity, docs/algorithms.md §1).
        self.shards = [
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
        """Loss and gradient sums over all rows at parameters ``x``.

        If a worker dies with results this evaluation still needed (a finished portion's
        sums, or the scattered parameters), the evaluation starts over with fresh tasks;
        the sums are the same, since they are added in portion order whoever computes them.
        """
        started = time.perf_counter()
        for _attempt in range(MAX_ATTEMPTS):
            try:
                results = self._evaluate_once(x)
                break
            except _EvaluationLost:
                self.stats.restarts += 1
        else:
            raise WorkerLostError(f"an evaluation lost workers {MAX_ATTEMPTS} times in a row; giving up")
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(time.perf_counter() - started)

        # Fixed portion order and grouping: the same sums whoever computed which portion.
        return reduce_in_groups(list(results), add_sums)

    def _evaluate_once(self, x: np.ndarray) -> list[tuple[float, np.ndarray]]:
        client, e = self.client, self._next_key
        self._next_key += 1  # fresh task keys for every attempt
        started = time.perf_counter()
        try:
            [x_future] = client.scatter([x], hash=False)
        except OSError as exc:  # CommClosedError: sent to a worker that just died, not yet known dead
            time.sleep(0.2)
            raise _EvaluationLost() from exc
        primaries, pinned = self._submit_primaries(x_future, e)
        try:
            with client.as_current():  # distributed.wait resolves the current client
                winners, _ = self._collect(primaries, pinned, x_future, e, started)
                if any(f.status != "finished" for f in winners):
                    raise _EvaluationLost()
                timeout = max(GATHER_TIMEOUT_SECONDS, 3 * (time.perf_counter() - started))
                try:
                    # A winner lost with its worker after it finished would make a plain
                    # gather wait forever (its task is pinned to the dead worker).
                    return client.sync(client._gather, winners, callback_timeout=timeout)
                except (TimeoutError, CancelledError) as exc:
                    if all(f.status == "finished" for f in winners):
                        raise
                    raise _EvaluationLost() from exc
        finally:
            client.cancel([*primaries, x_future])

    def portion_sums(self, x_future: Future) -> list[Future]:
        """Futures of every portion's ``(loss, sums)`` at the parameters held by
        ``x_future`` (already on the cluster), in portion order, left on the workers for a
        reduction that never passes through this process. Backups and rescues as in
        :meth:`evaluate`; a lost ``x_future`` raises :class:`WorkerLostError`."""
        e = self._next_key
        self._next_key += 1
        started = time.perf_counter()
        primaries, pinned = self._submit_primaries(x_future, e)
        try:
            with self.client.as_current():
                winners, _ = self._collect(primaries, pinned, x_future, e, started)
        except _EvaluationLost:
            self.client.cancel(primaries)
            raise WorkerLostError("the parameters of an evaluation were lost with their worker") from None
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(time.perf_counter() - started)
        return winners

    def _submit_primaries(self, x_future: Future, e: int) -> tuple[list[Future], list[str | None]]:
        """One task per portion, pinned to the worker holding its shard (data affinity).

        Pinning also keeps Dask's work stealing from copying shards between workers;
        balancing across workers is the backup tasks' job, as in the paper. A shard lost
        with its worker is reloaded from Zarr by Dask and the next evaluation follows it;
        portions pinned to a worker that dies mid-evaluation are rescued by
        :meth:`_collect`. Returns the futures and the worker each is pinned to.
        """
        if not self.cache:  # streaming: any worker reads any portion; Dask balances them
            streamed = self.client.map(
                portion_loss_grad_from_store, [p.start for p in self.portions], [p.stop for p in self.portions],
                model=self.model, data=self.data, x=x_future,
                key=[f"sandblaster-gradient-{self.token}-{e}-{p.index}" for p in self.portions], pure=False,
            )
            return streamed, [None] * len(self.portions)
        holders = self._holders()
        groups: dict[str | None, list[Portion]] = {}
        load: Counter[str | None] = Counter()
        fastest = max(self._speed.values(), default=1.0)
        for p in self.portions:
            where = holders[p.shard]
            # A shard copied to a second worker by a backup task: run each portion on the
            # holder that would finish it first at the speeds measured last time, so a
            # straggler's work drifts to its helpers.
            rows = p.stop - p.start
            worker = min(sorted(where, key=str), key=lambda w: (load[w] + rows) / self._speed.get(w, fastest))
            load[worker] += rows
            groups.setdefault(worker, []).append(p)
        futures: dict[int, Future] = {}
        pinned: dict[int, str | None] = {}
        for worker, portions in groups.items():
            # One client.map per worker is one message to the scheduler.
            mapped = self.client.map(
                portion_loss_grad,
                [holders[p.shard][worker] for p in portions],
                [p.local for p in portions],
                model=self.model,
                x=x_future,
                key=[f"sandblaster-gradient-{self.token}-{e}-{p.index}" for p in portions],
                workers=None if worker is None else [worker],  # None: the shard is being reloaded
                allow_other_workers=False,
                pure=False,
            )
            futures.update(zip((p.index for p in portions), mapped))
            pinned.update((p.index, worker) for p in portions)
        return [futures[p.index] for p in self.portions], [pinned[p.index] for p in self.portions]

    def _holders(self) -> list[dict[str | None, Future]]:
        """Per shard: worker -> the future holding that shard there (the original, and the
        copies backup tasks left on helpers). Copies on workers that left are dropped."""
        keys = [self.shards[i] for i in range(len(self.shards))] + [f for c in self.copies.values() for f in c.values()]
        where = self.client.who_has(keys)
        out: list[dict[str | None, Future]] = []
        for i, shard in enumerate(self.shards):
            holders: dict[str | None, Future] = {w: shard for w in where.get(shard.key, ())}
            for w, copy in list(self.copies.get(i, {}).items()):
                if w in where.get(copy.key, ()):
                    holders.setdefault(w, copy)
                else:
                    self.client.cancel([copy])
                    del self.copies[i][w]
            out.append(holders or {None: shard})
        return out

    def _keep_copy(self, shard: int, worker: str) -> None:
        """Keep the shard a backup fetched on ``worker`` as a key of its own, aligned (a plain
        replica would be dropped by Dask's memory manager)."""
        if not self.cache or worker in self.copies.setdefault(shard, {}):
            return
        self.copies[shard][worker] = self.client.submit(
            aligned_shard, self.shards[shard], key=f"sandblaster-shard-{self.token}-{shard}-on-{len(self.copies[shard])}",
            workers=[worker], allow_other_workers=False, pure=False,
        )

    def _collect(self, primaries: list[Future], pinned: list[str | None], x_future: Future, e: int,
                 started: float) -> tuple[list[Future], bool]:
        """Wait for one finished copy of every portion; returns them and whether backups ran.

        Every ``POLL_SECONDS`` (one ``wait`` per poll, no per-task overhead):

        * with backup tasks, once some worker has finished all its portions, any worker
          progressing ``backup_slack`` times slower than the fastest finished one (portions
          per second) is a straggler: its outstanding portions are copied to the idle
          workers, last-queued first, each fetching the shard from the straggler's memory when
          shards are cached, or reading its rows from Zarr when streaming (MapReduce's backup
          tasks, docs/algorithms.md §1). A worker that stops progressing slows down by this
          measure too, so a hung portion is backed up as well;
        * portions pinned to a worker that has left the cluster (or whose copies were all
          lost) are rescued: re-run from Zarr wherever Dask likes, backups on or off.
        """
        collection = _Collection(self, primaries, pinned, x_future, e, started)
        poll = POLL_SECONDS if self.backup_tasks else RESCUE_CHECK_SECONDS
        while collection.n_done < len(primaries):
            try:
                done, collection.pending = wait(collection.pending, timeout=poll,
                                                return_when="FIRST_COMPLETED" if collection.launched else "ALL_COMPLETED")
            except TimeoutError:
                done = {f for f in collection.pending if f.done()}
                collection.pending -= done
            now = time.perf_counter()
            collection.check_parameters()
            collection.take(done, now)
            if collection.n_done == len(primaries):
                break
            collection.rescue_stranded(now)
            collection.back_up_stragglers(now)
        self._measure_speeds(started, time.perf_counter(), pinned, collection.winner_ran_on, collection.finished_at)
        return collection.winners, collection.launched

    def _measure_speeds(self, started, ended, pinned, winner_ran_on, finished_at) -> None:
        """Rows per second each worker delivered in this evaluation (placement uses them)."""
        rows: Counter[str] = Counter({w: 0 for w in pinned if w is not None})  # every worker given work
        for p in self.portions:
            worker = winner_ran_on.get(p.index, pinned[p.index])
            if worker is not None:
                rows[worker] += p.stop - p.start
        for worker, n_rows in rows.items():
            busy = (finished_at[worker] if worker in finished_at and worker not in winner_ran_on.values()
                    else ended) - started
            self._speed[worker] = max(n_rows, 1) / max(busy, 1e-9)

    def _stragglers(self, elapsed, owned, done_by, finished_at, started, winners, pinned, skip
                    ) -> tuple[list[Portion], list[str]]:
        """Outstanding portions of workers much slower than the fastest idle one, and the idle workers."""
        rates = {w: owned[w] / max(finished_at[w] - started, 1e-9) if w in finished_at else done_by[w] / elapsed
                 for w in owned}
        reference = max(rates[w] for w in finished_at)
        slow = {w for w in owned if w not in finished_at and rates[w] * self.backup_slack < reference}
        if not slow:
            return [], []
        idle = sorted(finished_at, key=lambda w: -rates[w])
        late = [p for p in reversed(self.portions)  # last queued first: they would finish last
                if winners[p.index] is None and pinned[p.index] in slow and p.index not in skip]
        return late, idle

    def _streaming_stragglers(self, now: float, started: float, e: int, winners: list[Future | None],
                              skip: set[int], tail: dict[str, float]) -> tuple[list[Portion], list[str]]:
        """Streaming: Dask hands the next portion to whichever worker is free, so only the
        last portions in flight can straggle. Once a worker sits idle while portions remain
        and they have been out ``backup_slack`` times longer than a portion takes (worker-
        seconds per finished portion when the queue drained), they are copied to the idle
        workers, last first. Returns the portions and the idle workers."""
        n_done = sum(w is not None for w in winners)
        outstanding = [p for p in reversed(self.portions) if winners[p.index] is None and p.index not in skip]
        if not outstanding or n_done == 0:
            return [], []
        if "since" in tail and now - tail["since"] < self.backup_slack * tail["portion_seconds"]:
            return [], []
        workers = list(self._workers())
        if len(outstanding) >= len(workers):  # portions are still queued: no worker is idle
            return [], []
        mine = f"-{self.token}-{e}-"
        busy = {w for w, keys in self.client.processing().items() if any(mine in str(k) for k in keys)}
        idle = sorted(w for w in workers if w not in busy)
        if not idle:
            return [], []
        if "since" not in tail:
            tail.update(since=now, portion_seconds=(now - started) * len(workers) / n_done)
            return [], []
        return outstanding, idle

    def _from_store(self, kind: str, p: Portion, x_future: Future, e: int, worker: str | None = None) -> Future:
        """A copy of portion ``p`` that reads its rows from Zarr (a backup or a rescue),
        on ``worker`` only, or anywhere when None."""
        return self.client.submit(
            portion_loss_grad_from_store, p.start, p.stop, model=self.model, data=self.data, x=x_future,
            key=f"sandblaster-{kind}-{self.token}-{e}-{p.index}",
            workers=None if worker is None else [worker],
            allow_other_workers=False,
            pure=False,
        )

    def _backup(self, p: Portion, x_future: Future, e: int, worker: str) -> Future:
        """A copy of portion ``p`` on ``worker``, reading its shard from the worker that holds
        it (one transfer per shard and helper, cheaper than decoding the shard's Zarr chunk
        again); the helper keeps the copy, and later evaluations share that shard's portions
        between the two (see :meth:`_submit_primaries`). Streaming: a second read from Zarr."""
        if not self.cache:
            return self._from_store("backup", p, x_future, e, worker)
        return self.client.submit(
            portion_loss_grad, self.shards[p.shard], p.local, model=self.model, x=x_future,
            key=f"sandblaster-backup-{self.token}-{e}-{p.index}", workers=[worker],
            allow_other_workers=False, pure=False,
        )

    def _rescue(self, portions: list[Portion], x_future: Future, e: int) -> list[Future]:
        """Re-run portions whose worker is gone, from Zarr, on any worker."""
        return [self._from_store("rescue", p, x_future, e) for p in portions]

    # -- other passes over the shards ---------------------------------------------------------

    def column_moments(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Per-shard ``(n, mean, M2)`` of the columns of X, in shard order."""
        if self.cache:
            futures = [
                self.client.submit(column_moments, s, key=f"sandblaster-moments-{self.token}-{i}", pure=False)
                for i, s in enumerate(self.shards)
            ]
        else:
            futures = [
                self.client.submit(shard_column_moments, self.data, i, key=f"sandblaster-moments-{self.token}-{i}",
                                   pure=False)
                for i in range(self.data.n_shards)
            ]
        return self.client.gather(futures)

    def close(self) -> None:
        """Release the cached shards from worker memory."""
        if self.shards:
            self.client.cancel(self.shards + [f for c in self.copies.values() for f in c.values()])
            self.shards = []
            self.copies = {}


def portion_index(key: str) -> int:
    """Portion index from a task key ``sandblaster-<kind>-<token>-<eval>-<index>``."""
    return int(key.rsplit("-", 1)[1])


class _Collection:
    """The bookkeeping of one evaluation's wait for its portions (see
    :meth:`MegaBatchEvaluator._collect`): winners, pending copies, rescues and backups."""

    def __init__(self, evaluator: MegaBatchEvaluator, primaries: list[Future], pinned: list[str | None],
                 x_future: Future, e: int, started: float) -> None:
        self.evaluator, self.pinned, self.x_future, self.e, self.started = evaluator, pinned, x_future, e, started
        n = len(primaries)
        self.winners: list[Future | None] = [None] * n
        self.copies = [1] * n          # copies of each portion still pending
        self.backed_up: set[int] = set()
        self.rescued: set[int] = set()
        self.pending = set(primaries)
        self.owned = Counter(w for w in pinned if w is not None)  # primaries per worker
        self.done_by: Counter[str | None] = Counter()
        self.finished_at: dict[str, float] = {}
        self.next_rescue_check = started + RESCUE_CHECK_SECONDS
        self.launched = False
        self.ran_on: dict[int, str] = {}          # where each backup copy runs
        self.tail: dict[str, float] = {}          # streaming: when the queue drained, seconds per portion
        self.winner_ran_on: dict[int, str] = {}   # portions a backup won: its worker
        self.n_done = 0

    def check_parameters(self) -> None:
        """Raise when the task producing the parameters failed or they were lost."""
        if self.x_future.status == "error":
            self.x_future.result()  # the task producing the parameters failed: its exception
        if self.x_future.status in ("lost", "cancelled"):  # the parameters were lost with their worker
            raise _EvaluationLost()

    def take(self, done: set[Future], now: float) -> None:
        """Record the first finished copy of each portion; cancel the other copies."""
        evaluator = self.evaluator
        for f in done:
            i = portion_index(f.key)
            self.copies[i] -= 1
            if self.winners[i] is not None:
                continue
            if f.status == "error":
                f.result()  # re-raise the task's exception
            if f.status != "finished":  # lost with its worker, or cancelled
                continue
            self.winners[i] = f
            self.n_done += 1
            w = self.pinned[i]
            self.done_by[w] += 1
            if w is not None and self.done_by[w] == self.owned[w]:
                self.finished_at[w] = now
            if f.key.startswith("sandblaster-backup"):
                evaluator.stats.backups_won += 1
                self.winner_ran_on[i] = self.ran_on[i]
                evaluator._keep_copy(evaluator.portions[i].shard, self.ran_on[i])
            losers = [g for g in self.pending if portion_index(g.key) == i]
            if losers:
                evaluator.client.cancel(losers)
                self.pending.difference_update(losers)
        for i, f in enumerate(self.winners):  # a finished copy lost with its worker: not a winner after all
            if f is not None and f.status != "finished":
                self.winners[i] = None
                self.n_done -= 1
                self.done_by[self.pinned[i]] -= 1
                self.finished_at.pop(self.pinned[i], None)  # type: ignore[arg-type]

    def rescue_stranded(self, now: float) -> None:
        """Re-run from Zarr the portions whose worker left or whose copies were all lost."""
        n = len(self.winners)
        orphans = [i for i in range(n) if self.winners[i] is None and self.copies[i] == 0]
        if now < self.next_rescue_check and not orphans:
            return
        self.next_rescue_check = now + RESCUE_CHECK_SECONDS
        alive = set(self.evaluator._workers())
        stranded = [p for p in self.evaluator.portions
                    if self.winners[p.index] is None and p.index not in self.rescued
                    and (self.copies[p.index] == 0
                         or (self.pinned[p.index] is not None and self.pinned[p.index] not in alive))]
        for p, future in zip(stranded, self.evaluator._rescue(stranded, self.x_future, self.e)):
            self.rescued.add(p.index)
            self.copies[p.index] += 1
            self.pending.add(future)

    def back_up_stragglers(self, now: float) -> None:
        """Copy the outstanding portions of straggling workers to idle ones."""
        evaluator = self.evaluator
        late: list[Portion] = []
        if evaluator.backup_tasks and not evaluator.cache:
            late, idle = evaluator._streaming_stragglers(now, self.started, self.e, self.winners,
                                                         self.backed_up | self.rescued, self.tail)
        elif evaluator.backup_tasks and self.finished_at:
            late, idle = evaluator._stragglers(now - self.started, self.owned, self.done_by, self.finished_at,
                                               self.started, self.winners, self.pinned, self.backed_up | self.rescued)
        if not late:
            return
        backups = [evaluator._backup(p, self.x_future, self.e, idle[j % len(idle)]) for j, p in enumerate(late)]
        self.ran_on.update((p.index, idle[j % len(idle)]) for j, p in enumerate(late))
        evaluator.stats.backups_launched += len(backups)
        for b in backups:
            self.backed_up.add(portion_index(b.key))
            self.copies[portion_index(b.key)] += 1
        self.pending.update(backups)
        self.launched = self.launched or bool(backups)
