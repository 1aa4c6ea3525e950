"""A worker's portions of an evaluation in one direct call: the evaluation's fast path.

A task per portion costs a trip through the scheduler (the client's message to it, its
message to the worker, the worker's report back, the client's gather: about 12 ms per
evaluation on two workers, whatever the work). The shards are already in the workers'
memory as Dask data, so the client can instead ask each worker, directly, for the sums of
the portions it holds: one message there and one back (about 1.4 ms for two workers).

:class:`PortionService` is a worker plugin that adds that request to every worker's
handlers. It reads the shards from the worker's own memory (``worker.data``, where Dask
keeps them; a shard that is not there any more is answered with ``None`` and the client
computes that portion with a task) and computes the portions with
:func:`~dasklbfgs.solvers.sandblaster.tasks.portion_loss_grad`, the function the tasks
run, on the worker's task threads: the same bits as the task path. A worker plugin rather
than an actor, because a worker holding an actor cannot be retired.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import distributed.worker
import numpy as np
from distributed import Client, WorkerPlugin
from distributed.protocol import to_serialize

from dasklbfgs._recent import RecentIds
from dasklbfgs.models.sums import SparseSum
from dasklbfgs.solvers.sandblaster.stragglers import Progress, StragglerPolicy
from dasklbfgs.solvers.sandblaster.tasks import portion_compact_loss_grad, portion_loss_grad

#: What get_worker() reads, set for the model's code as in a task: distributed has no public
#: way to make get_worker() answer on a thread it did not start a task on (None: a
#: distributed without it, where get_worker() then answers only in tasks).
_worker_cvar: ContextVar[Any] | None = getattr(distributed.worker, "_worker_cvar", None)

__all__ = ["PortionService", "HANDLER", "start_service", "DirectCalls", "Plan", "Sent", "as_sums", "call_workers",
           "as_gather_index", "parameters_to_send"]

PROTOCOL = 2  # in the names below: a cluster kept running across an upgrade gets the new service beside the old
HANDLER = f"dasklbfgs_portion_sums_v{PROTOCOL}"
ABANDON = f"dasklbfgs_portion_abandon_v{PROTOCOL}"
ABANDONED_KEPT = 256  # abandoned call ids a worker remembers
#: How often a wait for answers asks the scheduler whether the workers it waits for are
#: still in the cluster (a worker that hangs, or dies before it is reached, never answers).
LIVENESS_SECONDS = 1.0


class PortionService(WorkerPlugin):
    """Answers ``HANDLER`` requests: the sums of listed portions of shards in the worker's memory."""

    name = f"dasklbfgs-portion-service-v{PROTOCOL}"
    idempotent = True  # registered by every evaluator; once per worker is enough

    def setup(self, worker: Any) -> None:
        self.worker = worker
        self.abandoned = RecentIds(ABANDONED_KEPT)  # calls whose answer nobody waits for
        self.running = 0  # calls being answered
        self.portions_computed = 0
        worker.handlers[HANDLER] = self.portion_sums
        worker.handlers[ABANDON] = self.abandon

    def teardown(self, worker: Any) -> None:
        worker.handlers.pop(HANDLER, None)
        worker.handlers.pop(ABANDON, None)

    def abandon(self, call: str) -> None:
        """The client backed up call ``call``'s portions elsewhere: compute no more of them."""
        self.abandoned.add(call)

    async def portion_sums(self, call: str, model: bytes, x: Any, local_params: dict[str, Any],
                           items: list[tuple[str, int, int]]) -> dict[str, Any]:
        """``(loss, sums)`` of each portion ``(shard key, first row, stop row)`` in the order
        given, ``None`` for a portion whose shard this worker no longer holds (or left
        uncomputed once the call was abandoned); and the seconds the worker computed.

        A shard key in ``local_params`` comes with only the parameters its portions read
        (:func:`~dasklbfgs.solvers.sandblaster.tasks.portion_compact_loss_grad`; its sums
        are then the gradient's values there), any other is computed at the whole ``x``.
        The portions are split into one contiguous run per task thread of the worker, each
        with its own copy of the model (as each task unpickles its own)."""
        data = self.worker.data
        shards = [data[key] if key in data else None for key, _, _ in items]  # read on the event loop
        work = [(shard, slice(start, stop), local_params.get(key))
                for shard, (key, start, stop) in zip(shards, items)]
        threads = max(1, min(self.worker.state.nthreads, len(work)))
        runs = [work[len(work) * i // threads:len(work) * (i + 1) // threads] for i in range(threads)]
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        self.running += 1
        try:
            answers = await asyncio.gather(*(
                loop.run_in_executor(self.worker.executors["default"], self._compute, call, model, x, run)
                for run in runs))
        finally:
            self.running -= 1
        sums = [s for answer in answers for s in answer]
        self.portions_computed += sum(s is not None for s in sums)
        return {"sums": to_serialize(sums), "seconds": time.perf_counter() - started}

    def _compute(self, call: str, model: bytes, x: Any, work: list[tuple[Any, slice, Any]]) -> list[Any]:
        """The portions' sums, on a task thread of the worker (where ``get_worker()`` answers as
        in a task), stopping early when the call is abandoned."""
        token = None if _worker_cvar is None else _worker_cvar.set(self.worker)
        try:
            the_model = pickle.loads(model)
            return [None if shard is None or call in self.abandoned
                    else portion_loss_grad(shard, local, model=the_model, x=x) if params is None
                    else portion_compact_loss_grad(shard, local, model=the_model, local_params=params)
                    for shard, local, params in work]
        finally:
            if _worker_cvar is not None and token is not None:
                _worker_cvar.reset(token)


def start_service(client: Client) -> None:
    """Add the request to the cluster's workers, present and future (once per cluster)."""
    client.register_plugin(PortionService(), name=PortionService.name)


@dataclass
class DirectCalls:
    """What the direct calls of one evaluation brought back."""

    sums: dict[int, Any] = field(default_factory=dict)  # portion index -> its (loss, sums)
    computed_on: dict[int, str] = field(default_factory=dict)  # portion index -> the worker that answered it
    finished: dict[str, float] = field(default_factory=dict)  # worker -> when its answer arrived (perf_counter)
    rows: dict[str, int] = field(default_factory=dict)  # worker -> the rows it computed (those finished only)
    compute_seconds: dict[str, float] = field(default_factory=dict)  # worker -> the seconds it computed
    lost: set[str] = field(default_factory=set)  # workers that could not be reached
    late: set[str] = field(default_factory=set)  # workers given up on as stragglers


#: A direct call's plan: worker -> its portions as ``(index, shard key, first row, stop row)``.
Plan = dict[str, list[tuple[int, str, int, int]]]
#: What a direct call sends a worker: the whole parameters (None: none of its portions need
#: them) and, per shard key, the parameters that shard's portions read.
Sent = tuple[np.ndarray | None, dict[str, np.ndarray]]


def as_gather_index(positions: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """Each shard's positions (None: every parameter) as ``np.intp``, the index numpy gathers
    and ``np.add.at`` take without converting: a 4-byte index is converted at every call,
    which made adding a million-wide evaluation's compact sums about 1.5x slower
    (``benchmarks.coordinator``)."""
    return [None if p is None else np.asarray(p, dtype=np.intp) for p in positions]


def parameters_to_send(x: np.ndarray, plan: Plan, positions: list[np.ndarray | None]) -> tuple[dict[str, Sent], int]:
    """What a direct call sends each worker of ``plan``, and the bytes in all: per shard key,
    ``x`` at the positions its portions read (``positions``, per portion index; each shard's
    gathered once), and the whole ``x`` only to a worker with a portion that reads every
    parameter (None)."""
    sent: dict[str, Sent] = {}
    gathered: dict[str, np.ndarray] = {}  # shard key -> x at its positions
    for worker, items in plan.items():
        whole: np.ndarray | None = None
        compact: dict[str, np.ndarray] = {}
        for index, shard_key, _, _ in items:
            at = positions[index]
            if at is None:
                whole = x
            elif shard_key not in compact:
                if shard_key not in gathered:
                    gathered[shard_key] = x[at]
                compact[shard_key] = gathered[shard_key]
        sent[worker] = (whole, compact)
    upload = sum((0 if whole is None else whole.nbytes) + sum(v.nbytes for v in compact.values())
                 for whole, compact in sent.values())
    return sent, upload


def as_sums(answers: dict[int, Any], positions: list[np.ndarray | None], size: int) -> None:
    """Turn, in place, the answers of portions sent compact parameters (the gradient's values
    at their ``positions``) into the :class:`~dasklbfgs.models.sums.SparseSum` a task returns."""
    for index, (loss, values) in answers.items():
        at = positions[index]
        if at is not None:
            answers[index] = (loss, SparseSum(size, at, values))


def call_workers(client: Client, call: str, model: Any, sent: dict[str, Sent], plan: Plan, started: float,
                 stragglers: StragglerPolicy | None) -> DirectCalls:
    """Ask every worker of ``plan`` for the sums of its portions, at once, with the
    parameters ``sent`` to it, and wait for the answers.

    A worker that cannot be reached is ``lost``. With ``stragglers`` (the policy of
    :mod:`.stragglers`), a worker still computing is given up on (``late``) once the policy
    calls it a straggler; a worker answers for all its rows at once, so until then they are
    all in flight, and it is late once it has taken ``backup_slack`` times as long as its
    rows would take at the fastest answer's rate (and a backup's round trip longer at
    least). Its portions are then computed by tasks, as the task path backs up a
    straggler's (its answer, if it comes, is dropped, and the worker told to stop computing
    it). ``call`` names the calls of this evaluation, unique. Any other error (the model's)
    is raised.
    """
    return client.sync(_call_workers, client, call, cloudpickle.dumps(model), sent, plan, started, stragglers)


async def _call_workers(client: Client, call: str, blob: bytes, sent: dict[str, Sent], plan: Plan, started: float,
                        stragglers: StragglerPolicy | None) -> DirectCalls:
    out = DirectCalls()
    calls = {
        asyncio.ensure_future(getattr(client.rpc(worker), HANDLER)(
            call=call, model=blob, x=to_serialize(sent[worker][0]), local_params=to_serialize(sent[worker][1]),
            items=[(key, start, stop) for _, key, start, stop in items])): worker
        for worker, items in plan.items()
    }
    rows = {worker: sum(stop - start for _, _, start, stop in items) for worker, items in plan.items()}
    pending = set(calls)

    def progress(now: float) -> dict[str, Progress]:
        """What the straggler policy is told: the workers that answered, idle after the rows
        they computed, and those still computing, all their rows in flight."""
        answered = {w: Progress(n, n, 0, out.finished[w] - started) for w, n in out.rows.items()}
        return answered | {calls[t]: Progress(rows[calls[t]], 0, rows[calls[t]], now - started) for t in pending}

    def give_up(given_up: set[asyncio.Future], why: set[str]) -> None:
        """Stop waiting for ``given_up`` (noting their workers in ``why``) and tell those
        workers to compute no more of this call."""
        why.update(calls[t] for t in given_up)
        _forget(given_up)
        _forget({asyncio.ensure_future(getattr(client.rpc(calls[t]), ABANDON)(call=call)) for t in given_up})

    next_liveness_check = started + LIVENESS_SECONDS
    while pending:
        wake = next_liveness_check
        if stragglers is not None:
            wake = min(wake, started + stragglers.next_straggler_after(progress(time.perf_counter())))
        done, pending = await asyncio.wait(pending, timeout=max(0.0, wake - time.perf_counter()),
                                           return_when=asyncio.FIRST_COMPLETED)
        now = time.perf_counter()
        if stragglers is not None:
            late = {t for t in pending if calls[t] in stragglers.judge(progress(now)).stragglers}
            give_up(late, out.late)
            pending -= late
        if pending and now >= next_liveness_check:  # a worker that left without a word (or hangs unreachable)
            workers = (await client.scheduler.identity(n_workers=-1))["workers"]
            gone = {t for t in pending if calls[t] not in workers}
            give_up(gone, out.lost)
            pending -= gone
            next_liveness_check = time.perf_counter() + LIVENESS_SECONDS
        for answered in done:
            worker = calls[answered]
            error = answered.exception()
            if error is not None and not isinstance(error, OSError):  # the model's: raised as itself
                _forget(done)
                give_up(pending, out.lost)  # the other workers told to stop
                raise error
            answer = None if error is not None else answered.result()
            if not isinstance(answer, dict):
                # CommClosedError, a refused connection: the worker is gone; no answer at all:
                # a worker closing (its plugins torn down before it stops listening)
                out.lost.add(worker)
                continue
            out.compute_seconds[worker] = answer["seconds"]
            computed = 0
            for (index, _, start, stop), sums in zip(plan[worker], answer["sums"]):
                if sums is not None:
                    out.sums[index], out.computed_on[index] = sums, worker
                    computed += stop - start
            if computed:  # a worker that held none of its shards any more says nothing of speed
                out.finished[worker], out.rows[worker] = now, computed
    return out


def _forget(calls: set[asyncio.Future]) -> None:
    """Drop the answers still to come (a late or lost worker's): retrieved when they arrive, unused."""
    for future in calls:
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
