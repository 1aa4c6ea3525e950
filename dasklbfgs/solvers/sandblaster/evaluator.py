"""The mega-batch evaluation: Dask futures over cached data shards, backups, fixed-order sums.

Shards are loaded from Zarr once and stay in worker memory as Dask data; a portion is
computed where its shard lives (data affinity), Dask reloads a shard from Zarr if the
worker holding it is lost, and the partial ``(loss, gradient)`` sums are added in portion
order, so the result does not depend on which worker computed what (docs/algorithms.md
§1). Each evaluation goes one of three ways, with the same bits:

- **Direct calls** (the default on cached shards; :mod:`.direct_calls`): after asking
  the scheduler where the shards are, the client sends the parameters to each worker
  holding shards and asks it, in one message, for the sums of its portions; a round trip
  of about a millisecond instead of a task's trip through the scheduler. A sparse shard is
  sent only the parameters it reads (``Model.compact_positions``, asked of each shard once).
  Used when the client reaches the workers directly (``direct_to_workers=True``, as
  :func:`dasklbfgs.connect` sets, or Dask's default ``None`` and the workers answer a direct
  call: ``Client(cluster)`` as Dask users make one; :func:`.direct_calls.reaches_workers`),
  the model is whole (partitioned replicas call their partitions from tasks) and the copies
  of the parameters sent fit ``DIRECT_UPLOAD_BYTES``.
- **Tasks**: the parameters ride inside the tasks (or are scattered once, when large) and
  one ``sandblaster-gradient`` task is submitted per portion, pinned to its shard. This is
  also how an evaluation finishes what its direct calls did not bring back: portions of a
  worker that left, of a shard not (or no longer) where it was, and of a late worker.
- **Streaming** (out of core, ``cache=False``, chosen by ``sandblaster_lbfgs(cache="auto")``
  when the data do not fit the workers' memory limits): nothing is cached; every
  evaluation has one task per shard that reads and decodes its rows from Zarr, unpinned,
  so Dask hands the next shard to whichever worker is free (dynamic load balancing by the
  scheduler itself), and only the last portions in flight can straggle.

Backup tasks (docs/algorithms.md §1, after MapReduce), one rule for the three ways
(:mod:`.stragglers`): once some worker is idle, a busy worker progressing ``backup_slack``
times slower than the fastest idle one, credited with the portions it is computing, is a
straggler. Its outstanding portions are copied to the idle workers, which fetch the shard
from its holder (streaming: read it from Zarr again); whichever copy finishes first is used
and the other is cancelled. Both copies compute the same numbers. A direct call answers for
all its portions at once, so a worker is late once it has not answered ``backup_slack``
times later than its rows would take at the fastest answer's rate: it is told to stop, and
its portions go to tasks and are backed up at once. A helper keeps the shard it fetched,
and the next evaluations split that shard's portions between the two holders
(:mod:`.placement`), so work drifts away from a persistent straggler. Portions whose worker
died are rescued by reading their rows from Zarr.

The parts: :mod:`.direct_calls` (the client's side of the direct calls, :mod:`.portion_service`
the workers'), :mod:`.launcher` (an evaluation's tasks),
:mod:`.collection` (the wait for them: winners, rescues, backups), :mod:`.stragglers` (the
rule), :mod:`.placement` (which holder computes which portion) and :mod:`.shard_cache` (where
the shards live, and how they move to workers that join). This module chooses the way and
adds the sums.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from distributed import Client, Future

from dasklbfgs._typing import Dataset
from dasklbfgs._wire import INLINE_PARAMS_BYTES
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.models.sums import reduce_in_blocks
from dasklbfgs.solvers.sandblaster.active import ActiveParameters
from dasklbfgs.solvers.sandblaster.collection import Collection, EvaluationLost
from dasklbfgs.solvers.sandblaster.direct_calls import DirectCalls, DirectPath, Plan, reaches_workers
from dasklbfgs.solvers.sandblaster.launcher import ClusterWorkers, TaskLauncher
from dasklbfgs.solvers.sandblaster.options import SandblasterOptions
from dasklbfgs.solvers.sandblaster.placement import Speeds
from dasklbfgs.solvers.sandblaster.portions import Portion, planned_portions, warn_if_many
from dasklbfgs.solvers.sandblaster.shard_cache import MAX_ATTEMPTS, ShardCache
from dasklbfgs.solvers.sandblaster.stragglers import StragglerPolicy

__all__ = ["EvaluatorStats", "MegaBatchEvaluator", "PortionModel"]

GATHER_TIMEOUT_SECONDS = 5.0


class PortionModel(Protocol):
    """What an evaluation asks of the model its portions compute with: a
    :class:`~dasklbfgs.models.base.Model`, or Newton's
    :class:`~dasklbfgs.models.second_order.WithHessian` around one."""

    @property
    def n_params(self) -> int: ...

    def portion_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                              offset: np.ndarray | None = None) -> tuple[float, Any]: ...

    def compact_positions(self, X: Any) -> np.ndarray | None: ...


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
    # this process's own part of the evaluations: gathering what each worker is sent, and
    # adding the portions' sums (the rest is the workers' computing and the messages)
    gather_seconds: float = 0.0
    adding_seconds: float = 0.0

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
            # the seconds the busiest worker spent computing its direct calls' portions
            "busiest_worker_compute_seconds": max(self.direct_compute_seconds.values(), default=0.0),
            "gather_seconds_total": self.gather_seconds,
            "adding_seconds_total": self.adding_seconds,
        }


class MegaBatchEvaluator:
    """Evaluate a model's loss and gradient *sums* over a whole sharded dataset on Dask.

    ``portion_model`` (default: ``model``) is what the portion tasks call
    ``portion_loss_grad_sum`` on: with partitioned replicas, the
    :class:`~dasklbfgs.parallel.replica.OnPartitions` that hands each portion to the
    partitions of a replica. ``shards``: the dataset's shards already cached by someone else
    (a :class:`~dasklbfgs.solvers.sandblaster.cached.CachedDataset`), used instead of loading
    them, and left cached by :meth:`close`.
    """

    def __init__(
        self,
        client: Client,
        model: PortionModel,
        data: Dataset,
        *,
        portion_rows: int | None = None,
        backup_tasks: bool = True,
        backup_slack: float = SandblasterOptions.default("backup_slack"),
        cache: bool = True,
        portion_model: Any = None,
        direct: bool = True,
        shards: ShardCache | None = None,
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
        self.workers = ClusterWorkers(client)
        self.speeds = Speeds()  # rows/s per worker in the last evaluation: where portions go
        self._next_key = 0
        self._done_with: list[Any] = []  # the last evaluation's futures, kept until the next submits
        #: Where each portion of the last evaluation was computed (None: read from Zarr by a
        #: task wherever Dask ran it: streamed, or rescued from a lost worker).
        self.placement: list[str | None] = []

        self.cache = cache
        workers = self.workers.live()
        # (streaming, a portion decodes the whole Zarr chunk it reads from: one per shard)
        self.portions: list[Portion] = planned_portions(data, portion_rows, cache)
        if portion_rows is not None:  # the default plan never has more portions than shards: nothing to blame on it
            warn_if_many(self.portions, portion_rows)
        self.cached: ShardCache | None = None
        #: The fast path (module docstring): cached shards of a whole model, and a client that
        #: reaches the workers (reaches_workers: it says so, or they answer it); None: tasks only.
        self.direct = (DirectPath(client, model, self.token, data.n_shards)
                       if direct and cache and portion_model is None and reaches_workers(client, sorted(workers))
                       else None)
        self._owns_cache = shards is None
        #: The parameters evaluated at (None: all of them; :meth:`restrict_to`)
        self.active: ActiveParameters | None = None
        if cache:
            started = time.perf_counter()
            self.cached = ShardCache(client, data, self.token, sorted(workers)) if shards is None else shards
            self._moves_before = self.cached.moves  # a cache of earlier runs has moved shards for them
            if self.direct is not None and data.is_sparse:
                try:
                    self.direct.read_positions(self.cached)
                except BaseException:
                    self.close()  # the shards it loaded go with it
                    raise
            self.stats.load_seconds = time.perf_counter() - started

    def restrict_to(self, active: ActiveParameters) -> None:
        """Evaluate from now on at the ``active`` parameters alone (every other one zero) and
        return the sums there: the direct calls read and answer them as before (each shard's
        positions among the active ones); a task, which reads a shard's columns as stored, is
        given the whole parameters and its sums are cut to the active ones. The same sums."""
        self.active = active
        if self.direct is not None:
            self.direct.restrict_to(active)

    @property
    def stragglers(self) -> StragglerPolicy | None:
        """The straggler rule of every evaluation (:mod:`.stragglers`); None without backup tasks."""
        return StragglerPolicy(self.backup_slack) if self.backup_tasks else None

    # -- evaluation ----------------------------------------------------------------------

    def evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient sums over all rows at parameters ``x``: :meth:`portion_results`
        added in portion order."""
        started = time.perf_counter()
        results = self.portion_results(x)
        adding = time.perf_counter()
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(adding - started)  # the sums are in; adding them is this process's work
        # Fixed portion order and grouping: the same sums whoever computed which portion.
        loss, sums = reduce_in_blocks(list(results), None if self.direct is None else self.direct.blocks)
        self.stats.adding_seconds += time.perf_counter() - adding
        return loss, sums

    def portion_results(self, x: np.ndarray) -> list[Any]:
        """What every portion's ``portion_loss_grad_sum`` returned at parameters ``x``, in portion
        order, not added: for a portion model whose results are not sums to add (held-out
        summaries, :mod:`.held_out`).

        If a worker dies with results this evaluation still needed (a finished portion's
        sums, or the scattered parameters), the evaluation starts over with fresh tasks;
        the sums are the same, since they are added in portion order whoever computes them.
        """
        for _attempt in range(MAX_ATTEMPTS):
            try:
                return self._evaluate_once(x)
            except EvaluationLost:
                self.stats.restarts += 1
                if self.on_restart is not None:
                    self.on_restart()
        raise WorkerLostError(f"an evaluation lost workers {MAX_ATTEMPTS} times in a row; giving up")

    def _evaluate_once(self, x: np.ndarray) -> list[Any]:
        client = self.client
        started = time.perf_counter()
        direct = self._call_direct(x, started) if self.direct is not None else DirectCalls()
        if len(direct.sums) == len(self.portions):
            self._done_with = []  # a previous evaluation's tasks: nothing is submitted after them
            self.stats.direct_evaluations += 1
            self.placement = [direct.computed_on[i] for i in range(len(self.portions))]
            return [direct.sums[i] for i in range(len(self.portions))]
        whole = x if self.active is None else self.active.expand(x)  # what a task's rows read
        params: Future | np.ndarray = whole
        if whole.nbytes > INLINE_PARAMS_BYTES:  # scattered once, not carried by every portion task
            try:
                [params] = client.scatter([whole], hash=False)
            except OSError as exc:  # CommClosedError: sent to a worker that just died, not yet known dead
                time.sleep(0.2)
                raise EvaluationLost() from exc
        winners: list[Future] = []
        try:
            winners = [f for f in self._run_portions(params, started, direct) if isinstance(f, Future)]
            if any(f.status != "finished" for f in winners):
                raise EvaluationLost()
            timeout = max(GATHER_TIMEOUT_SECONDS, 3 * (time.perf_counter() - started))
            try:
                # A winner lost with its worker after it finished would make a plain gather
                # wait forever (its task is pinned to the dead worker); Client.gather takes no
                # timeout, so its coroutine (private) is run under one.
                gathered = iter(client.sync(client._gather, winners, callback_timeout=timeout))
            except (TimeoutError, CancelledError) as exc:
                if all(f.status == "finished" for f in winners):
                    raise
                raise EvaluationLost() from exc
            return [direct.sums[i] if i in direct.sums else self._from_task(next(gathered))
                    for i in range(len(self.portions))]
        finally:
            # Released with the next evaluation's submission, not now: the client batches its
            # messages to the scheduler 10 ms apart, and a release sent now would hold the
            # next evaluation's tasks back until then (a cancel would wait for a reply).
            self._done_with = [*winners, params] if isinstance(params, Future) else winners

    def _from_task(self, answer: tuple[float, Any]) -> tuple[float, Any]:
        """A task's ``(loss, sums)``, its sums at the parameters evaluated at."""
        loss, sums = answer
        return (loss, sums) if self.active is None else (loss, self.active.restrict_sums(sums))

    def _call_direct(self, x: np.ndarray, started: float) -> DirectCalls:
        """Each worker's portions in one direct call (:class:`.DirectPath`), pinned as the tasks
        would be; portions of shards being reloaded are left to tasks, and everything when the
        parameters to send would exceed ``DIRECT_UPLOAD_BYTES``."""
        assert self.direct is not None, "called only on the fast path"
        calls = self.direct.call(x, self.direct_plan(), self.portions, started, self.stragglers)
        self.stats.gather_seconds += calls.gather_seconds
        for worker, at in calls.finished.items():
            self.speeds.measured(worker, calls.rows[worker], at - started)
        spent = self.stats.direct_compute_seconds
        for worker, seconds in calls.compute_seconds.items():
            spent[worker] = spent.get(worker, 0.0) + seconds
        return calls

    def direct_plan(self) -> Plan:
        """Each worker's portions for direct calls, pinned as the tasks would be (none for a
        shard being reloaded)."""
        holders = self._holders()
        plan: Plan = {}
        for p, worker in zip(self.portions, self.speeds.pin(holders, self.portions)):
            if worker is not None:
                shard_key, local = str(holders[p.shard][worker].key), p.local
                plan.setdefault(worker, []).append((p.index, shard_key, local.start, local.stop))
        return plan

    def portion_sums(self, x_future: Future) -> list[Future]:
        """Futures of every portion's ``(loss, sums)`` at the parameters held by
        ``x_future`` (already on the cluster), in portion order, left on the workers for a
        reduction that never passes through this process. Backups and rescues as in
        :meth:`evaluate`; a lost ``x_future`` raises :class:`WorkerLostError`."""
        assert self.active is None, "the sums of a reduction on the workers are over the whole parameters"
        started = time.perf_counter()
        try:
            winners = [f for f in self._run_portions(x_future, started) if isinstance(f, Future)]
        except EvaluationLost:
            raise WorkerLostError("the parameters of an evaluation were lost with their worker") from None
        self.stats.evaluations += 1
        self.stats.eval_seconds.append(time.perf_counter() - started)
        return winners

    def _run_portions(self, x: Future | np.ndarray, started: float,
                      direct: DirectCalls | None = None) -> list[Future | str]:
        """Submit every portion not answered by ``direct`` calls at the parameters ``x``
        under fresh task keys and return one finished copy of each (:class:`.Collection`;
        ``DIRECT`` for the answered ones); on failure the tasks are cancelled."""
        direct = direct or DirectCalls()
        launcher = TaskLauncher(self.client, self.token, self._next_key, self.portion_model, self.data, x,
                                self.cached)
        self._next_key += 1
        primaries, pinned = self._submit_primaries(launcher, direct)
        self._done_with = []  # the last evaluation's futures: released after this submission
        collection = Collection(launcher, self.portions, self.workers, self.stragglers, primaries, pinned,
                                started, direct)
        try:
            with self.client.as_current():  # distributed.wait resolves the current client
                winners = collection.run()
        except BaseException:
            self.client.cancel([f for f in primaries if f is not None])
            raise
        finally:
            self.stats.backups_launched += collection.backups_launched
            self.stats.backups_won += collection.backups_won
        self.placement, delivered = collection.delivered(time.perf_counter())
        for worker, (rows, seconds) in delivered.items():
            self.speeds.measured(worker, rows, seconds)
        return winners

    def _submit_primaries(self, launcher: TaskLauncher,
                          direct: DirectCalls) -> tuple[list[Future | None], list[str | None]]:
        """One task per portion not answered by a direct call (None for those), pinned to the
        worker holding its shard (data affinity).

        Pinning also keeps Dask's work stealing from copying shards between workers;
        balancing across workers is the backup tasks' job, as in the paper. A shard lost
        with its worker is reloaded from Zarr by Dask and the next evaluation follows it;
        portions pinned to a worker that dies mid-evaluation are rescued by the
        :class:`.Collection`. Returns the futures and the worker each is pinned to (for the
        answered portions: the worker that answered; streaming: None, anywhere).
        """
        if not self.cache:  # streaming: any worker reads any portion; Dask balances them
            return list(launcher.from_store("gradient", self.portions)), [None] * len(self.portions)
        holders = self._holders()
        left = [p for p in self.portions if p.index not in direct.sums]
        pinned: list[str | None] = [direct.computed_on.get(p.index) for p in self.portions]
        # Not back to a worker the direct calls could not reach or gave up on while its shard
        # has another holder (a late one is backed up at once when it is the only one).
        shunned = direct.lost | direct.late
        holders = [{w: f for w, f in where.items() if w not in shunned} or where for where in holders]
        for p, worker in zip(left, self.speeds.pin(holders, left)):
            pinned[p.index] = worker
        futures: list[Future | None] = [None] * len(self.portions)
        for p, future in zip(left, launcher.pinned(left, holders, [pinned[p.index] for p in left])):
            futures[p.index] = future
        return futures, pinned

    def _holders(self) -> list[dict[str | None, Future]]:
        """Per shard, worker -> its copy there (:meth:`ShardCache.holders`, which also moves shards)."""
        if self.cached is None:
            raise RuntimeError("the evaluator was closed: it holds no shards")
        holders = self.cached.holders()
        self.stats.shards_moved = self.cached.moves - self._moves_before
        return holders

    def rows_per_worker(self) -> dict[str, int]:
        """Rows each worker computed in the last evaluation (from :attr:`placement`; rows read
        from Zarr by tasks wherever Dask ran them are not counted)."""
        rows: Counter[str] = Counter()
        for p, worker in zip(self.portions, self.placement):
            if worker is not None:
                rows[worker] += p.stop - p.start
        return dict(rows)

    def close(self) -> None:
        """Release the last evaluation's futures and the cached shards from worker memory (not
        shards it was given: their owner releases them)."""
        self._done_with = []
        if self.cached is not None and self._owns_cache:
            self.cached.close()
        self.cached = None
