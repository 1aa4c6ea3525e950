"""The coordinator's side, shared by Downpour and the peer methods: the watch loop and the
run's base class (:class:`Coordinator`).

Replicas train on their own; the coordinator only polls the actors that count their
progress (parameter shards for Downpour, replica mailboxes for the peer methods), keeps
the history, scores held-out data, writes checkpoints, streams metrics events for the
dashboard and calls the user's callback. A run object supplies what differs:
``poll() -> Progress``, ``current_params()``, ``checkpoint(steps)`` and ``request_stop(reason)``.
"""

from __future__ import annotations

import math
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import dask
import numpy as np
from dask.utils import parse_bytes
from distributed import Future

from dasklbfgs.errors import ConvergenceWarning
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.solvers._replicas.batches import is_non_finite
from dasklbfgs.solvers._replicas.ending import Divergence, judged_end, sample_objective, sample_ranges
from dasklbfgs.solvers.common_options import ReplicaOptions
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers.stats import RunStats

__all__ = ["Coordinator", "Progress", "WatchedRun", "watch", "replies_or_none", "step_timing", "DONE_MESSAGE"]

DONE_MESSAGE = "all replicas finished their epochs"


@dataclass
class Progress:
    """What one poll saw: cumulative counters and whether every replica has returned."""

    steps: int                 # global step: mini-batch steps summed over replicas
    loss_sum: float            # replica-reported mini-batch losses so far
    loss_count: int
    stop_reason: str | None
    finished: bool
    event: dict[str, Any] = field(default_factory=dict)  # extra fields for the metrics event


class WatchedRun(Protocol):
    """What :func:`watch` asks of a replica method's run (a :class:`Coordinator` subclass)."""

    context: RunContext
    start_loss: float

    def poll(self) -> Progress:
        """The replicas' progress now; restarts and recoveries happen here."""
        ...

    def current_params(self) -> np.ndarray:
        """The parameters the run would return now."""
        ...

    def checkpoint(self, steps: int) -> None:
        """Write the run's checkpoint at global step ``steps``."""
        ...

    def stop(self, reason: str) -> None:
        """Ask every replica to stop."""
        ...


def watch(run: WatchedRun, start_steps: int) -> tuple[list[dict[str, Any]], Status, str]:
    """Poll ``run`` until its replicas finish; return ``(history, status, message)``.

    Each poll with news becomes a history entry, reported through the run's context
    (:class:`~dasklbfgs.solvers.context.RunContext`: held-out scores and checkpoints on
    their cadences from ``start_steps``, the metrics event, the callback and stop rules).
    Status ``COMPLETED``: epochs done or ``max_steps`` reached (judged at the end: see
    :mod:`~dasklbfgs.solvers._replicas.ending`); ``NON_FINITE``: a replica's
    loss became non-finite; ``DIVERGED``: the mini-batch loss average or the held-out loss
    grew far past the loss at the start (:class:`~dasklbfgs.solvers._replicas.ending.Divergence`),
    and the run was stopped; ``CALLBACK_STOP``: the callback raised ``StopIteration`` (or a stop
    rule stopped the run). With ``options.defer_eval``, the parameters due for held-out
    scoring are kept and scored once the replicas have finished, so that scoring does not
    take CPU from them (the entries keep the times the parameters were taken at).
    """
    context = run.context
    options = context.options
    assert isinstance(options, ReplicaOptions)
    context.start_cadences(start_steps)
    history: list[dict[str, Any]] = []
    status, message = Status.COMPLETED, DONE_MESSAGE
    last_loss = (0.0, 0)
    deferred: list[tuple[dict[str, Any], np.ndarray]] = []
    divergence = Divergence()
    while True:
        time.sleep(options.poll_interval)
        progress = run.poll()
        steps = progress.steps
        loss_sum, loss_count = progress.loss_sum - last_loss[0], progress.loss_count - last_loss[1]
        if loss_count < 0:  # the counting actor was restored from a checkpoint
            loss_sum, loss_count = 0.0, 0
        last_loss = (progress.loss_sum, progress.loss_count)
        entry: dict[str, Any] = {"step": steps, "time": time.perf_counter() - context.started}
        if loss_count:
            entry["loss"] = loss_sum / loss_count
        # due on the cadence, and on the last poll too (the final parameters are scored besides)
        scored = context.evaluation_due(steps) or (progress.finished and options.eval_every is not None)
        # what the callback's x and early stopping read: the parameters scored, which move on after this poll
        read_params = run.current_params
        if scored and options.defer_eval:
            deferred.append((entry, run.current_params()))
        elif scored:
            scored_at = run.current_params()
            entry.update(context.score(scored_at))
            read_params = _fixed(scored_at)
        context.checkpoint_if_due(steps, run.checkpoint)
        if status != Status.DIVERGED and (message_diverged := divergence.seen(entry, run.start_loss)):
            status, message = Status.DIVERGED, message_diverged
            run.stop(message)
        if loss_count or scored:
            history.append(entry)
            if (reason := context.report(entry, read_params, **progress.event)) is not None:
                status, message = Status.CALLBACK_STOP, reason
                run.stop(message)
        reason = progress.stop_reason
        if reason is not None and is_non_finite(reason):
            status, message = Status.NON_FINITE, reason
        elif reason and reason.startswith("max_steps") and status not in (Status.CALLBACK_STOP, Status.DIVERGED):
            status, message = Status.COMPLETED, reason
        if progress.finished:
            for due, params in deferred:
                due.update(context.score(params))
            return history, status, message


def step_timing(tallies: list[dict[str, Any]]) -> dict[str, float]:
    """Per replica step, medians over replicas: wall time in the training loop, time
    computing gradients, and the rest (exchanging, waiting for peers, updating); with
    replicas that time their waits for replies (Downpour's), that wait too."""
    counted = [t for t in tallies if t["steps"]]
    if not counted:
        return {"seconds_per_step": math.nan, "seconds_computing_per_step": math.nan,
                "seconds_exchanging_per_step": math.nan}
    loop, computing = (float(np.median([t[key] / t["steps"] for t in counted]))
                       for key in ("seconds_in_loop", "seconds_computing"))
    timing = {"seconds_per_step": loop, "seconds_computing_per_step": computing,
              "seconds_exchanging_per_step": loop - computing}
    if all("seconds_waiting" in t for t in counted):
        timing["seconds_waiting_per_step"] = float(np.median([t["seconds_waiting"] / t["steps"] for t in counted]))
    return timing


def replies_or_none(calls: list[Any], timeout: float) -> list[Any]:
    """Each actor call's reply, or None if it failed or is not back within ``timeout`` seconds
    (all told): an actor's worker may be going (during a restart, another worker may be
    going too)."""
    deadline = time.monotonic() + timeout
    replies = []
    for call in calls:
        try:
            replies.append(call.result(timeout=max(0.1, deadline - time.monotonic())))
        except (OSError, TimeoutError):
            replies.append(None)
    return replies


ACTOR_LOSS_WAIT = 30.0  # seconds: about the scheduler's time to notice a dead worker
CALL_CHECK_SECONDS = 0.5  # while a reply to the coordinator is late, check for lost workers this often
RETIRE_CHECK_SECONDS = 0.5  # how often the coordinator looks for refused retirements
SCHEDULER_EVENTS = "all"  # the scheduler's event topic with the outcomes of retire_workers
WorkerOrAny = TypeVar("WorkerOrAny", bound="str | None")  # a worker's address, or None: any worker


class Coordinator:
    """One run's replica tasks over its context's client, data and metrics stream. A
    subclass holds the actors and supplies ``request_stop(reason)`` and what :func:`watch`
    asks (:class:`WatchedRun`)."""

    def __init__(self, context: RunContext, rows: list[tuple[int, int]]) -> None:
        assert context.client is not None and context.metrics is not None, "a planned run runs connected"
        self.context, self.client, self.metrics = context, context.client, context.metrics
        assert isinstance(context.options, ReplicaOptions)
        self.model, self.method = context.model, context.solver.name
        self.options: Any = context.options  # the solver's ReplicaOptions subclass
        self.data, self.rows, self.eval_set = context.dataset, rows, context.eval_set
        self.x_start = context.x_start()
        self.started = context.started  # the run's clock (history entries' "time")
        self.max_steps = self.options.max_steps
        self.token = uuid.uuid4().hex[:8]
        self.replica_futures: dict[Any, Future] = {}  # by replica, or (replica, partition)
        self.stop_reason: str | None = None
        # retirements refused from now on (scheduler times): the run moves its actors off those workers
        self.events_seen = max((stamp for stamp, _ in self.client.get_events(SCHEDULER_EVENTS)), default=0.0)
        self.next_retire_check = 0.0

    def release(self, futures: Any) -> None:
        """Cancel the run's tasks and actors for good, whoever else holds them: handles to an
        actor that other actors keep (in reference cycles on the workers) would otherwise
        keep it alive after the run."""
        self.client.cancel(list(futures), force=True)

    def actor_failed(self, futures: list[Future], error: BaseException) -> bool:
        """Whether one of the actors' futures has failed since a call raised ``error``. A call
        can fail on a dead worker ("Unable to contact Actor's worker") before the scheduler
        has noticed the worker is gone and failed the actor's future: after a connection
        error, wait up to ``ACTOR_LOSS_WAIT`` seconds for that."""
        deadline = time.monotonic() + (ACTOR_LOSS_WAIT if isinstance(error, OSError) else 0.0)
        while not any(f.status == "error" for f in futures):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def replies(self, make_calls: Callable[[], list[Any]], check: Callable[[], None] | None = None) -> list[Any]:
        """The replies of the actor calls ``make_calls()`` starts (all sent before the first wait).

        A call to a worker that just died can hang for Dask's connect timeout (30 s) although
        the scheduler knows within a second: while a reply is late, ``check()`` (default
        :meth:`lost`) is asked every ``CALL_CHECK_SECONDS`` and raises if an actor is gone."""
        check = check or self.lost
        replies = []
        for call in make_calls():
            while True:
                try:
                    replies.append(call.result(timeout=CALL_CHECK_SECONDS))
                    break
                except TimeoutError:
                    check()
        return replies

    def measure_start_loss(self) -> None:
        """Set ``self.start_loss``, what the run is judged against (:mod:`~dasklbfgs.solvers._replicas.ending`):
        the objective at the starting parameters on :attr:`judged_rows`, computed on a worker
        (the data may not be readable from this process). Measured before the replicas start
        (one small task), so every poll can be judged at once: a fast exploding run would
        otherwise pass its first polls unjudged, and the task does not compete with the
        replicas for a worker."""
        self.start_loss = self.sample_objective(self.x_start)

    def end_loss(self, x: np.ndarray, history: list[dict[str, Any]]) -> tuple[float, str]:
        """The loss the run's end is judged by, at its final parameters ``x``, and what it is
        (for the message): the objective on :attr:`judged_rows`, as at the start."""
        return self.sample_objective(x), f"the objective on {sum(b - a for a, b in self.judged_rows):,} training rows"

    @property
    def judged_rows(self) -> list[tuple[int, int]]:
        """The training rows the start and the end are measured on: the first of each replica's."""
        return sample_ranges(self.rows)

    def sample_objective(self, params: np.ndarray) -> float:
        """The objective at ``params`` on :attr:`judged_rows`, computed by a worker."""
        future = self.client.submit(sample_objective, self.model, self.data, self.judged_rows,
                                    self._ahead(params, None), pure=False)
        try:
            return future.result()
        finally:
            future.release()

    def refused_retirements(self) -> frozenset[str]:
        """The workers whose retirement the scheduler refused since the last look (at most every
        ``RETIRE_CHECK_SECONDS``): Dask cannot move actors, so a worker holding one of the
        run's stays until the run moves it elsewhere. Read with ``get_events``:
        ``subscribe_topic`` keeps one handler per topic and client, and would replace the user's."""
        now = time.monotonic()
        if now < self.next_retire_check:
            return frozenset()
        self.next_retire_check = now + RETIRE_CHECK_SECONDS
        refused: set[str] = set()
        for stamp, event in self.client.get_events(SCHEDULER_EVENTS):
            if stamp > self.events_seen and isinstance(event, dict) and event.get("action") == "retire-workers":
                refused.update(event.get("could-not-retire", ()))
            self.events_seen = max(self.events_seen, stamp)
        return frozenset(refused)

    def live_workers(self) -> list[str]:
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def actor(self, cls: type, *args: Any, key: str, worker: str | None) -> Future:
        """Start the actor ``cls(*args)`` on ``worker``, or on another one if that worker has
        left in the meantime (an actor pinned to a departed worker would never start); None:
        any worker. :meth:`workers_of` says where actors ended up. Large arrays among ``args``
        (a wide model's slice of the start) go to the worker ahead of the actor's task rather
        than inside it: Dask warns about, and slows down on, large task graphs."""
        args = tuple(self._ahead(a, worker) for a in args)
        return self.client.submit(cls, *args, actor=True, key=key, workers=None if worker is None else [worker],
                                  allow_other_workers=True, pure=False)

    def _ahead(self, value: Any, worker: str | None) -> Any:
        """``value``, or a future of it scattered to ``worker`` (None: any) if it is an array as
        large as Dask's warning threshold for task graphs (smaller ones travel as before)."""
        threshold = parse_bytes(dask.config.get("distributed.admin.large-graph-warning-threshold"))
        if not (isinstance(value, np.ndarray) and value.nbytes >= threshold):
            return value
        try:
            return self.client.scatter(value, workers=None if worker is None else [worker], hash=False)
        except (ValueError, KeyError, OSError):  # the worker left in the meantime: any worker
            return self.client.scatter(value, hash=False)

    def workers_of(self, actors: list[Future], asked: list[WorkerOrAny]) -> list[WorkerOrAny]:
        """The worker each started actor lives on (the one ``asked`` for it, if it has already
        gone again: its loss is noticed like any other)."""
        where = self.client.who_has(actors)
        return [min(where.get(f.key) or [w]) for f, w in zip(actors, asked)]

    def key(self, name: str, index: int, generation: int = 0) -> str:
        """The key of the run's task or actor ``name`` number ``index``; after ``generation``
        restarts a new one (Dask refuses to reuse a released key in flight)."""
        return f"{name}-{self.token}-{index}" + (f"-g{generation}" if generation else "")

    def launch(self, r: int, task: Callable[..., Any], worker: str | None, *, allow_other_workers: bool,
               generation: int = 0, partition: int | None = None, **kwargs: Any) -> None:
        """Start replica ``r``'s ``task`` on its rows, on ``worker`` (None: any worker), keyed for
        ``generation`` (:meth:`key`); with ``partition``, that partition's task of the replica
        (a replica split over workers: model parallelism; the task is told its ``partition``), kept under
        ``(r, partition)``."""
        name = f"{self.method}-replica" + ("" if partition is None else f"-p{partition}")
        if partition is not None:
            kwargs["partition"] = partition
        self.replica_futures[r if partition is None else (r, partition)] = self.client.submit(
            task, r, model=self.model, data=self.data, rows=self.rows[r], **kwargs,
            key=self.key(name, r, generation),
            workers=None if worker is None else [worker],
            allow_other_workers=allow_other_workers, pure=False,
        )

    def stop(self, reason: str) -> None:
        """Ask every replica to stop; the run keeps its first reason."""
        self.stop_reason = self.stop_reason or reason
        self.request_stop(reason)

    def request_stop(self, reason: str) -> None:
        raise NotImplementedError

    def train(self) -> Result:
        raise NotImplementedError

    def close(self) -> None:
        """Release the run's actors and tasks, whether it finished or failed."""
        raise NotImplementedError

    def run_to_end(self) -> Result:
        """Train, then close whatever happened (what a replica method's planned run does)."""
        try:
            return self.train()
        finally:
            self.close()

    def lost(self) -> None:
        """Raise if actors the run cannot go on without are gone (none by default)."""

    def replicas_finished(self) -> bool:
        """Whether every replica task has returned; a failed one stops the run and raises its error."""
        finished = all(f.done() for f in self.replica_futures.values())
        for f in self.replica_futures.values():
            if f.status == "error":
                self.stop("a replica failed")
                self.lost()
                f.result()
        return finished

    def running(self) -> int:
        return sum(not f.done() for f in self.replica_futures.values())

    def result(self, x: np.ndarray, steps: int, watched: tuple[list[dict[str, Any]], Status, str],
               stats: RunStats, event: dict[str, Any] | None = None, **extra: Any) -> Result:
        """The run's :class:`Result`, its ending judged (:mod:`~dasklbfgs.solvers._replicas.ending`;
        a :class:`~dasklbfgs.errors.ConvergenceWarning` for a run that did not succeed, unless
        its callback stopped it). Its final entry (with eval data: held-out metrics of
        ``x``, also appended to the history) is streamed as the finished event."""
        history, status, message = watched
        if status == Status.COMPLETED:  # ran its course: judged by the loss it reached
            status, message = judged_end(message, self.start_loss, *self.end_loss(x, history))
        if not status.succeeded and status != Status.CALLBACK_STOP:
            warnings.warn(f"{self.method} did not succeed ({status.name}): {message}", ConvergenceWarning,
                          stacklevel=5)
        final: dict[str, Any] = {"step": steps, "time": stats["wall_seconds"]}
        if self.eval_set is not None:
            final.update(self.context.score(x))
            history.append(final)
        self.metrics.send(**final, **(event or {}), finished=True)
        losses = [entry["loss"] for entry in history if "loss" in entry]
        return Result(
            x=x, fun=losses[-1] if losses else math.nan, nit=steps, status=status,
            success=status.succeeded, message=message, history=history, stats=stats,
            run_id=self.metrics.run, solver=self.method, **extra,
        )


def _fixed(params: np.ndarray) -> Callable[[], np.ndarray]:
    """A reader of parameters already fetched."""
    return lambda: params
