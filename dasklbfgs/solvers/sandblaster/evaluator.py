"""The mega-batch evaluation: Dask futures over cached data shards, backups, fixed-order sums.

Shards are loaded from Zarr once and stay in worker memory as Dask data; a portion is
computed where its shard lives (data affinity), Dask reloads a shard from Zarr if the
worker holding it is lost, and the partial ``(loss, gradient)`` sums are added in portion
order, so the result does not depend on which worker computed what (docs/algorithms.md
§1). Each evaluation goes one of two ways, with the same bits:

- **Direct calls** (the default on cached shards; :mod:`.portion_service`): after asking
  the scheduler where the shards are, the client sends the parameters to each worker
  holding shards and asks it, in one message, for the sums of its portions; a round trip
  of about a millisecond instead of a task's trip through the scheduler. Used when the
  client talks to the workers directly (``direct_to_workers``, as :func:`dasklbfgs.connect`
  sets), the model is whole (partitioned replicas call their partitions from tasks) and
  the copies of the parameters sent fit ``DIRECT_UPLOAD_BYTES``.
- **Tasks**: the parameters ride inside the tasks (or are scattered once, when large) and
  one ``sandblaster-gradient`` task is submitted per portion, pinned to its shard. This is
  also how an evaluation finishes what its direct calls did not bring back: portions of a
  worker that left, of a shard not (or no longer) where it was, and of a late worker.

Backup tasks (docs/algorithms.md §1, after MapReduce): once a worker has finished its
portions, the outstanding portions of any worker progressing ``backup_slack`` times slower
(by direct calls: a worker that has not answered ``backup_slack`` times later than its rows
would take at the fastest answer's rate, and is told to stop) are copied to the idle
workers, which fetch the shard from its holder; whichever copy
finishes first is used and the other is cancelled. Both copies compute the same numbers.
A helper keeps the shard it fetched, and the next evaluations split that shard's portions
between the two holders, so work drifts away from a persistent straggler (dynamic load
balancing). Portions whose worker died are rescued by reading their rows from Zarr.
Where the shards live, and how they move to workers that join: :mod:`.shard_cache`.

Out of core (``cache=False``, chosen by ``sandblaster_lbfgs(cache="auto")`` when the data
do not fit the workers' memory limits), nothing is cached: every evaluation has one task
per shard that reads and decodes its rows from Zarr, unpinned, so Dask hands the next
shard to whichever worker is free (dynamic load balancing by the scheduler itself). Only
the last portions in flight can then straggle: once a worker sits idle with none left in
the scheduler's queue, and ``backup_slack`` times as long as a portion takes has passed since,
backups read them again on the idle workers.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import Client, Future, wait

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import PartitionLostError, WorkerLostError
from dasklbfgs.models.base import Model
from dasklbfgs.models.sums import add_sums_dense, as_dense, reduce_in_groups
from dasklbfgs.solvers.sandblaster.options import SandblasterOptions
from dasklbfgs.solvers.sandblaster.portion_service import DirectCalls, call_workers, start_service
from dasklbfgs.solvers.sandblaster.portions import Portion, default_portion_rows, plan_portions, warn_if_many
from dasklbfgs.solvers.sandblaster.shard_cache import MAX_ATTEMPTS, ShardCache
from dasklbfgs.solvers.sandblaster.tasks import (
    column_moments,
    portion_loss_grad,
    portion_loss_grad_from_store,
    shard_column_moments,
)

GATHER_TIMEOUT_SECONDS = 5.0
#: Parameters up to this size travel inside each portion task instead of being scattered
#: first (a round trip saved; 8 portions of a 64 KiB vector are 0.5 MiB through the scheduler).
INLINE_PARAMS_BYTES = 64 * 1024
POLL_SECONDS = 0.01  # with backup tasks: how often to compare the workers' progress
RESCUE_CHECK_SECONDS = 1.0  # how often to look for lost workers
#: Streaming: with more portions outstanding than this many per thread, some still wait in the
#: scheduler's queue (Dask sends a worker at most ceil(worker-saturation x threads) queued tasks,
#: 1.1 by default), so no worker can be idle for long; below it, the scheduler is asked. A
#: straggler may hold two portions (one running, one sent) while another worker sits idle.
TASKS_SENT_PER_THREAD = 2
STREAMING_CHECK_SECONDS = 0.03  # streaming: how often to look for an idle worker when no portion finished
#: The parameters a client sends per evaluation by direct calls (one copy per worker asked):
#: past this (a wide model on many workers) the evaluation goes by tasks, which scatter the
#: parameters once and let the workers copy them from each other, off the client's link.
DIRECT_UPLOAD_BYTES = 64 * 2**20
_DIRECT = "direct"  # in a collection's winners: a portion already answered by a direct call


def wait_polling(futures: set[Future], timeout: float, return_when: str) -> tuple[set[Future], set[Future]]:
    """``distributed.wait`` that returns ``(done, pending)`` at the timeout instead of raising.

    The ``TimeoutError`` it raises sits in a reference cycle inside Dask's ``sync`` (a frame
    holding the error it re-raises), and its traceback holds every frame up to the caller,
    with their arrays (trial points, gradients, the portions' sums): left to the cyclic
    garbage collector, a polling evaluation kept ~170 MB an iteration alive at 2^22
    parameters. Dropping the traceback leaves the cycle nothing of ours.
    """
    try:
        done, pending = wait(futures, timeout=timeout, return_when=return_when)
        return set(done), set(pending)
    except TimeoutError as timed_out:
        timed_out.__traceback__ = None
    done = {f for f in futures if f.done()}
    return done, set(futures) - done


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
    shards_moved: int = 0
    direct_evaluations: int = 0  # evaluations answered by direct calls alone, no task
    direct_compute_seconds: dict[str, float] = field(default_factory=dict)  # per worker, summed

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_seconds": self.load_seconds,
            "evaluations": self.evaluations,
            "eval_seconds_median": statistics.median(self.eval_seconds) if self.eval_seconds else None,
            "eval_seconds_total": sum(self.eval_seconds),
            "backups_launched": self.backups_launched,
            "backups_won": self.backups_won,
            "evaluation_restarts": self.restarts,
            "shards_moved": self.shards_moved,
            "evaluations_direct": self.direct_evaluations,
        }


class MegaBatchEvaluator:
    """Evaluate a model's loss and gradient *sums* over a whole sharded dataset on Dask.

    ``portion_model`` (default: ``model``) is what the portion tasks call
    ``portion_loss_grad_sum`` on: with partitioned replicas, the
    :class:`~dasklbfgs.parallel.replica.OnPartitions` that hands each portion to the
    partitions of a replica.
    """

    def __init__(
        self,
        client: Client,
        model: Model,
        data: Dataset,
        *,
        portion_rows: int | None = None,
        backup_tasks: bool = True,
        backup_slack: float = SandblasterOptions.default("backup_slack"),
        cache: bool = True,
        portion_model: Any = None,
        direct: bool = True,
    ) -> None:
        self.client = client
        self.model = model
        # what the portion tasks compute with: the model, or its partitioned replicas
        # (dasklbfgs.parallel.replica.OnPartitions), whose portion sums are the model's
        self.portion_model = model if portion_model is None else portion_model
        self.on_restart: Callable[[], Any] | None = None  # called before an evaluation starts over
        self.data = data
        self.backup_tasks = backup_tasks
        self.backup_slack = backup_slack
        self.token = uuid.uuid4().hex[:8]
        self.stats = EvaluatorStats()
        self._next_key = 0
        self._speed: dict[str, float] = {}  # rows/s per worker in the last evaluation
        self._done_with: list[Any] = []  # the last evaluation's futures, kept until the next submits
        #: Where each portion of the last evaluation was computed (None: read from Zarr by a
        #: task wherever Dask ran it: streamed, or rescued from a lost worker).
        self.placement: list[str | None] = []

        self.cache = cache
        workers = self._workers()
        given = portion_rows is not None
        if portion_rows is None:
            # Streaming, a portion decodes the whole Zarr chunk it reads from: one per shard.
            portion_rows = default_portion_rows(data.n_samples, data.shard_rows) if cache else data.shard_rows
        self.portions: list[Portion] = plan_portions(data.shard_bounds, portion_rows)
        if given:  # the default plan never has more portions than shards: nothing to blame on it
            warn_if_many(self.portions, portion_rows)
        self.cached: ShardCache | None = None
        # The fast path (module docstring): cached shards of a whole model, and a client that
        # may reach the workers (it says so with direct_to_workers).
        self.direct = bool(direct and cache and portion_model is None and client.direct_to_workers)
        if self.direct:
            start_service(client)
        if cache:
            started = time.perf_counter()
            self.cached = ShardCache(client, data, self.token, sorted(workers))
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
                if self.on_restart is not None:
                    self.on_restart()
        else:
            raise WorkerLostError(f"an evaluation lost workers {MAX_ATTEMPTS} times in a row; giving up")
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(time.perf_counter() - started)

        # Fixed portion order and grouping: the same sums whoever computed which portion.
        loss, sums = reduce_in_groups(list(results), add_sums_dense)
        return loss, as_dense(sums)  # (one portion is not added)

    def _evaluate_once(self, x: np.ndarray) -> list[tuple[float, np.ndarray]]:
        client = self.client
        started = time.perf_counter()
        direct = self._call_direct(x, started) if self.direct else DirectCalls()
        if len(direct.sums) == len(self.portions):
            self._done_with = []  # a previous evaluation's tasks: nothing is submitted after them
            self.stats.direct_evaluations += 1
            self.placement = [direct.computed_on[i] for i in range(len(self.portions))]
            return [direct.sums[i] for i in range(len(self.portions))]
        params: Future | np.ndarray = x
        if x.nbytes > INLINE_PARAMS_BYTES:  # scattered once, not carried by every portion task
            try:
                [params] = client.scatter([x], hash=False)
            except OSError as exc:  # CommClosedError: sent to a worker that just died, not yet known dead
                time.sleep(0.2)
                raise _EvaluationLost() from exc
        winners: list[Future] = []
        try:
            winners = [f for f in self._run_portions(params, started, direct) if isinstance(f, Future)]
            if any(f.status != "finished" for f in winners):
                raise _EvaluationLost()
            timeout = max(GATHER_TIMEOUT_SECONDS, 3 * (time.perf_counter() - started))
            try:
                # A winner lost with its worker after it finished would make a plain
                # gather wait forever (its task is pinned to the dead worker).
                gathered = iter(client.sync(client._gather, winners, callback_timeout=timeout))
            except (TimeoutError, CancelledError) as exc:
                if all(f.status == "finished" for f in winners):
                    raise
                raise _EvaluationLost() from exc
            return [direct.sums[i] if i in direct.sums else next(gathered) for i in range(len(self.portions))]
        finally:
            # Released with the next evaluation's submission, not now: the client batches its
            # messages to the scheduler 10 ms apart, and a release sent now would hold the
            # next evaluation's tasks back until then (a cancel would wait for a reply).
            self._done_with = [*winners, params] if isinstance(params, Future) else winners

    def _call_direct(self, x: np.ndarray, started: float) -> DirectCalls:
        """Each worker's portions in one direct call (:mod:`.portion_service`), pinned as the
        tasks would be; portions of shards being reloaded are left to tasks, and everything
        when the copies of ``x`` to send would exceed ``DIRECT_UPLOAD_BYTES``."""
        holders = self.cached.holders()
        self.stats.shards_moved = self.cached.moves
        pinned = self._pin(holders, self.portions)
        plan: dict[str, list[tuple[int, str, int, int]]] = {}
        for p in self.portions:
            worker = pinned[p.index]
            if worker is not None:
                local = p.local
                plan.setdefault(worker, []).append((p.index, holders[p.shard][worker].key, local.start, local.stop))
        if x.nbytes * len(plan) > DIRECT_UPLOAD_BYTES:
            return DirectCalls()
        self._next_key += 1
        calls = call_workers(self.client, f"{self.token}-{self._next_key}", self.model, x, plan, started,
                             self.backup_slack if self.backup_tasks else None)
        for worker, at in calls.finished.items():
            self._speed[worker] = calls.rows[worker] / max(at - started, 1e-9)
        spent = self.stats.direct_compute_seconds
        for worker, seconds in calls.compute_seconds.items():
            spent[worker] = spent.get(worker, 0.0) + seconds
        return calls

    def portion_sums(self, x_future: Future) -> list[Future]:
        """Futures of every portion's ``(loss, sums)`` at the parameters held by
        ``x_future`` (already on the cluster), in portion order, left on the workers for a
        reduction that never passes through this process. Backups and rescues as in
        :meth:`evaluate`; a lost ``x_future`` raises :class:`WorkerLostError`."""
        started = time.perf_counter()
        try:
            winners = self._run_portions(x_future, started)
        except _EvaluationLost:
            raise WorkerLostError("the parameters of an evaluation were lost with their worker") from None
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(time.perf_counter() - started)
        return winners

    def _run_portions(self, x_future: Future, started: float, direct: DirectCalls | None = None) -> list[Any]:
        """Submit every portion not answered by ``direct`` calls at the parameters
        ``x_future`` under fresh task keys and return one finished copy of each
        (:meth:`_collect`; ``_DIRECT`` for the answered ones); on failure the tasks are
        cancelled."""
        e = self._next_key
        self._next_key += 1
        direct = direct or DirectCalls()
        primaries, pinned = self._submit_primaries(x_future, e, direct)
        self._done_with = []  # the last evaluation's futures: released after this submission
        try:
            with self.client.as_current():  # distributed.wait resolves the current client
                return self._collect(primaries, pinned, x_future, e, started, direct)
        except BaseException:
            self.client.cancel([f for f in primaries if f is not None])
            raise

    def _submit_primaries(self, x_future: Future, e: int,
                          direct: DirectCalls) -> tuple[list[Future | None], list[str | None]]:
        """One task per portion not answered by a direct call (None for those), pinned to the
        worker holding its shard (data affinity).

        Pinning also keeps Dask's work stealing from copying shards between workers;
        balancing across workers is the backup tasks' job, as in the paper. A shard lost
        with its worker is reloaded from Zarr by Dask and the next evaluation follows it;
        portions pinned to a worker that dies mid-evaluation are rescued by
        :meth:`_collect`. Returns the futures and the worker each is pinned to (for the
        answered portions: the worker that answered).
        """
        if not self.cache:  # streaming: any worker reads any portion; Dask balances them
            return self._from_store("gradient", self.portions, x_future, e), [None] * len(self.portions)
        holders = self.cached.holders()
        self.stats.shards_moved = self.cached.moves
        left = [p for p in self.portions if p.index not in direct.sums]
        pinned: list[str | None] = [direct.computed_on.get(p.index) for p in self.portions]
        # Not back to a worker the direct calls could not reach or gave up on while its shard
        # has another holder (a late one is backed up at once, below, when it is the only one).
        shunned = direct.lost | direct.late
        holders = [{w: f for w, f in where.items() if w not in shunned} or where for where in holders]
        for p, worker in zip(left, self._pin(holders, left)):
            pinned[p.index] = worker
        futures: list[Future | None] = [None] * len(self.portions)
        for worker in dict.fromkeys(pinned[p.index] for p in left):
            # One client.map per worker is one message to the scheduler.
            portions = [p for p in left if pinned[p.index] == worker]
            mapped = self.client.map(
                portion_loss_grad,
                [holders[p.shard][worker] for p in portions],
                [p.local for p in portions],
                model=self.portion_model,
                x=x_future,
                key=[f"sandblaster-gradient-{self.token}-{e}-{p.index}" for p in portions],
                workers=None if worker is None else [worker],  # None: the shard is being reloaded
                allow_other_workers=False,
                pure=False,
            )
            for p, future in zip(portions, mapped):
                futures[p.index] = future
        return futures, pinned

    def _pin(self, holders: list[dict[str | None, Future]], portions: list[Portion]) -> list[str | None]:
        """The worker each of ``portions`` runs on: a holder of its shard (None while the shard
        is being reloaded). A shard copied to a second worker by a backup task: each portion
        goes to the holder that would finish it first at the speeds measured last time, so a
        straggler's work drifts to its helpers."""
        load: Counter[str | None] = Counter()
        fastest = max(self._speed.values(), default=1.0)
        pinned: list[str | None] = []
        for p in portions:
            rows = p.stop - p.start
            worker = min(sorted(holders[p.shard], key=str),
                         key=lambda w: (load[w] + rows) / self._speed.get(w, fastest))
            load[worker] += rows
            pinned.append(worker)
        return pinned

    def _collect(self, primaries: list[Future | None], pinned: list[str | None], x_future: Future, e: int,
                 started: float, direct: DirectCalls) -> list[Any]:
        """Wait for one finished copy of every portion; returns them in portion order.

        Every ``POLL_SECONDS`` (one ``wait`` per poll, no per-task overhead), the outstanding
        portions of stragglers are backed up as the module docstring says (a worker that stops
        progressing slows down by that measure too, so a hung portion is backed up as well),
        and portions pinned to a worker that has left the cluster (or whose copies were all
        lost) are rescued: re-run from Zarr wherever Dask likes, backups on or off.
        """
        collection = _Collection(self, primaries, pinned, x_future, e, started, direct)
        poll = POLL_SECONDS if self.backup_tasks else RESCUE_CHECK_SECONDS
        while collection.n_done() < len(primaries):
            done, collection.pending = wait_polling(collection.pending, poll,
                                                    "FIRST_COMPLETED" if collection.backed_up else "ALL_COMPLETED")
            now = time.perf_counter()
            collection.check_parameters()
            collection.take(done, now)
            if collection.n_done() == len(primaries):
                break
            collection.rescue_stranded(now)
            collection.back_up_stragglers(now)
        collection._measure_speeds(time.perf_counter())
        return collection.winners

    def _from_store(self, kind: str, portions: list[Portion], x_future: Future, e: int,
                    worker: str | None = None) -> list[Future]:
        """Tasks computing ``portions`` from rows read from Zarr (streamed primaries, backups
        and rescues), on ``worker`` only, or anywhere when None."""
        return self.client.map(
            portion_loss_grad_from_store, [p.start for p in portions], [p.stop for p in portions],
            model=self.portion_model, data=self.data, x=x_future,
            key=[f"sandblaster-{kind}-{self.token}-{e}-{p.index}" for p in portions],
            workers=None if worker is None else [worker],
            allow_other_workers=False,
            pure=False,
        )

    def _backup(self, p: Portion, x_future: Future, e: int, worker: str) -> Future:
        """A copy of portion ``p`` on ``worker``, reading its shard from the worker that holds
        it (cheaper than decoding the shard's Zarr chunk again; the helper keeps it, see
        :meth:`ShardCache.keep_copy`). Streaming: a second read from Zarr."""
        if not self.cache:
            return self._from_store("backup", [p], x_future, e, worker)[0]
        return self.client.submit(
            portion_loss_grad, self.cached.shards[p.shard], p.local,
            model=self.portion_model, x=x_future,
            key=f"sandblaster-backup-{self.token}-{e}-{p.index}", workers=[worker],
            allow_other_workers=False, pure=False,
        )

    def rows_per_worker(self) -> dict[str, int]:
        """Rows each worker computed in the last evaluation (from :attr:`placement`; rows read
        from Zarr by tasks wherever Dask ran them are not counted)."""
        rows: Counter[str] = Counter()
        for p, worker in zip(self.portions, self.placement):
            if worker is not None:
                rows[worker] += p.stop - p.start
        return dict(rows)

    # -- other passes over the shards ---------------------------------------------------------

    def column_moments(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Per-shard ``(n, mean, M2)`` of the columns of X, in shard order."""
        calls = ([(column_moments, shard) for shard in self.cached.shards] if self.cached
                 else [(shard_column_moments, self.data, i) for i in range(self.data.n_shards)])
        futures = [self.client.submit(*call, key=f"sandblaster-moments-{self.token}-{i}", pure=False)
                   for i, call in enumerate(calls)]
        return self.client.gather(futures)

    def close(self) -> None:
        """Release the last evaluation's futures and the cached shards from worker memory."""
        self._done_with = []
        if self.cached is not None:
            self.cached.close()
            self.cached = None


@dataclass(frozen=True)
class _Attempt:
    """One copy of one portion in flight: the portion, the kind of copy (``"gradient"``: the
    primary, pinned to its shard's holder or, streaming, anywhere; ``"backup"``: a copy on an
    idle worker; ``"rescue"``: a re-run from Zarr for a lost worker), where it was placed
    (None: wherever Dask runs it) and its future."""

    portion: int
    kind: str
    worker: str | None
    future: Future


class _Collection:
    """The bookkeeping of one evaluation's wait for its portions (see
    :meth:`MegaBatchEvaluator._collect`): winners, pending copies, rescues and backups."""

    def __init__(self, evaluator: MegaBatchEvaluator, primaries: list[Future | None], pinned: list[str | None],
                 x_future: Future, e: int, started: float, direct: DirectCalls) -> None:
        self.evaluator, self.pinned, self.x_future, self.e, self.started = evaluator, pinned, x_future, e, started
        # per portion: its finished copy, _DIRECT if a direct call answered it, None until then
        self.winners: list[Future | str | None] = [_DIRECT if i in direct.sums else None for i in range(len(pinned))]
        self.pending: set[Future] = set()
        #: every copy of a portion this evaluation started, by its task key (the keys the
        #: scheduler reports are this evaluation's exactly when they are in here)
        self.attempts: dict[str, _Attempt] = {}
        self.copied: dict[str, set[int]] = {"gradient": set(), "backup": set(), "rescue": set()}  # portions by kind
        self._started("gradient", [(i, pinned[i], f) for i, f in enumerate(primaries) if f is not None])
        self.owned = Counter(w for w in pinned if w is not None)  # portions per worker
        done_by = self.done_by()
        # workers whose portions are all done: when (those answering directly, when they answered)
        self.finished_at: dict[str, float] = {w: at for w, at in direct.finished.items()
                                              if w in self.owned and done_by[w] == self.owned[w]}
        self.tail: dict[str, float] = {}  # streaming: when a worker first sat idle, seconds per portion
        self.next_rescue_check = started + RESCUE_CHECK_SECONDS

    def _started(self, kind: str, copies: list[tuple[int, str | None, Future]]) -> None:
        """Record ``copies`` (portion, worker, future) of ``kind`` as pending attempts."""
        for i, worker, future in copies:
            self.attempts[future.key] = _Attempt(i, kind, worker, future)
            self.copied[kind].add(i)
            self.pending.add(future)

    def _attempt(self, future: Future) -> _Attempt:
        return self.attempts[future.key]

    @property
    def backed_up(self) -> bool:
        """Whether a backup was launched (then each finished copy is worth a look at once)."""
        return bool(self.copied["backup"])

    def n_done(self) -> int:
        return sum(f is not None for f in self.winners)

    def done_by(self) -> Counter[str | None]:
        """Portions done per worker they were pinned to."""
        return Counter(self.pinned[i] for i, f in enumerate(self.winners) if f is not None)

    def unclaimed(self) -> list[Portion]:
        """Portions without a winner, backup or rescue, last queued first (they would finish last)."""
        claimed = self.copied["backup"] | self.copied["rescue"]
        return [p for p in reversed(self.evaluator.portions)
                if self.winners[p.index] is None and p.index not in claimed]

    def check_parameters(self) -> None:
        """Raise when the task producing the parameters failed or they were lost (parameters
        carried inline by the tasks cannot be)."""
        if not isinstance(self.x_future, Future):
            return
        if self.x_future.status == "error":
            self.x_future.result()  # the task producing the parameters failed: its exception
        if self.x_future.status in ("lost", "cancelled"):  # the parameters were lost with their worker
            raise _EvaluationLost()

    def take(self, done: set[Future], now: float) -> None:
        """Record the first finished copy of each portion; cancel the other copies."""
        evaluator = self.evaluator
        for f in done:
            attempt = self._attempt(f)
            i = attempt.portion
            if self.winners[i] is not None:
                continue
            if f.status == "error":
                if isinstance(f.exception(), PartitionLostError):  # the replica is re-created, then a retry
                    raise _EvaluationLost()
                f.result()  # re-raise the task's exception
            if f.status != "finished":  # lost with its worker, or cancelled
                continue
            self.winners[i] = f
            if attempt.kind == "backup":
                evaluator.stats.backups_won += 1
                if evaluator.cached is not None:  # streaming keeps nothing
                    evaluator.cached.keep_copy(evaluator.portions[i].shard, attempt.worker)
            losers = [g for g in self.pending if self._attempt(g).portion == i]
            if losers:
                evaluator.client.cancel(losers)
                self.pending.difference_update(losers)
        for i, f in enumerate(self.winners):  # a finished copy lost with its worker: not a winner after all
            if isinstance(f, Future) and f.status != "finished":
                self.winners[i] = None
                self.finished_at.pop(self.pinned[i], None)  # type: ignore[arg-type]
        done_by = self.done_by()
        for w, n_owned in self.owned.items():
            if w not in self.finished_at and done_by[w] == n_owned:
                self.finished_at[w] = now

    def rescue_stranded(self, now: float) -> None:
        """Re-run from Zarr the portions whose worker left or whose copies were all lost."""
        covered = {self._attempt(f).portion for f in self.pending}
        orphans = [i for i, f in enumerate(self.winners) if f is None and i not in covered]
        if now < self.next_rescue_check and not orphans:
            return
        self.next_rescue_check = now + RESCUE_CHECK_SECONDS
        alive = set(self.evaluator._workers())
        rescued = self.copied["rescue"]
        stranded = [p for p in self.evaluator.portions
                    if self.winners[p.index] is None and p.index not in rescued
                    and (p.index not in covered or self.pinned[p.index] not in {*alive, None})]
        if stranded:
            rescues = self.evaluator._from_store("rescue", stranded, self.x_future, self.e)
            self._started("rescue", [(p.index, None, f) for p, f in zip(stranded, rescues)])

    def back_up_stragglers(self, now: float) -> None:
        """Copy the outstanding portions of straggling workers to idle ones."""
        evaluator = self.evaluator
        late: list[Portion] = []
        if evaluator.backup_tasks and not evaluator.cache:
            late, idle = self._streaming_stragglers(now)
        elif evaluator.backup_tasks and self.finished_at:
            late, idle = self._stragglers(now)
        for j, p in enumerate(late):
            worker = idle[j % len(idle)]
            self._started("backup", [(p.index, worker, evaluator._backup(p, self.x_future, self.e, worker))])
        evaluator.stats.backups_launched += len(late)

    def _stragglers(self, now: float) -> tuple[list[Portion], list[str]]:
        """Outstanding portions of workers much slower than the fastest idle one, and the idle workers."""
        owned, finished_at, done_by = self.owned, self.finished_at, self.done_by()
        rates = {w: owned[w] / max(finished_at[w] - self.started, 1e-9) if w in finished_at
                 else done_by[w] / (now - self.started) for w in owned}
        reference = max(rates[w] for w in finished_at)
        slow = {w for w in owned if w not in finished_at and rates[w] * self.evaluator.backup_slack < reference}
        if not slow:
            return [], []
        idle = sorted(finished_at, key=lambda w: -rates[w])
        return [p for p in self.unclaimed() if self.pinned[p.index] in slow], idle

    def _streaming_stragglers(self, now: float) -> tuple[list[Portion], list[str]]:
        """Streaming (see the module docstring): once a running worker has none of this
        evaluation's portions while none waits in the scheduler's queue, and ``backup_slack``
        times as long as a portion takes (thread-seconds per finished portion at that moment) has
        passed since, the outstanding portions, last first, and the idle workers. (Idle means
        the whole worker: a worker with free threads and a portion running is busy.)"""
        evaluator, tail, n_done = self.evaluator, self.tail, self.n_done()
        outstanding = self.unclaimed()
        if not outstanding or n_done == 0:
            return [], []
        if "since" in tail:
            if now - tail["since"] < evaluator.backup_slack * tail["portion_seconds"]:
                return [], []
        elif tail.get("checked_at") == n_done and now < tail["next_check"]:
            return [], []  # a worker goes idle when a portion finishes (or a cancelled copy stops)
        tail.update(checked_at=n_done, next_check=now + STREAMING_CHECK_SECONDS)
        workers = evaluator._workers()
        threads = sum(info.get("nthreads", 1) for info in workers.values())
        if len(outstanding) > TASKS_SENT_PER_THREAD * threads:
            return [], []
        held = {w: {self.attempts[key].portion for key in map(str, keys) if key in self.attempts}
                for w, keys in evaluator.client.processing().items()}
        if {p.index for p in outstanding} - set().union(*held.values()):  # queued: a free worker takes it
            return [], []
        idle = sorted(w for w, info in workers.items()
                      if w in held and not held[w] and info.get("status", "running") == "running")
        if not idle:
            return [], []
        if "since" not in tail:
            tail.update(since=now, portion_seconds=(now - self.started) * threads / n_done)
            return [], []
        return outstanding, idle

    def _measure_speeds(self, ended: float) -> None:
        """Rows per second each worker delivered in this evaluation (placement uses them)."""
        won = {i: self._attempt(f) for i, f in enumerate(self.winners) if isinstance(f, Future)}
        backup_won = {i: attempt.worker for i, attempt in won.items() if attempt.kind == "backup"}
        rows: Counter[str] = Counter({w: 0 for w in self.pinned if w is not None})  # every worker given work
        placement: list[str | None] = []
        for p in self.evaluator.portions:
            worker = backup_won.get(p.index, self.pinned[p.index])
            rescued = p.index in won and won[p.index].kind == "rescue"
            placement.append(None if rescued else worker)
            if worker is not None:
                rows[worker] += p.stop - p.start
        self.evaluator.placement = placement
        for worker, n_rows in rows.items():
            busy = (self.finished_at[worker] if worker in self.finished_at and worker not in backup_won.values()
                    else ended) - self.started
            self.evaluator._speed[worker] = max(n_rows, 1) / max(busy, 1e-9)
