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
import hashlib
import pickle
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from distributed import Client, WorkerPlugin
from distributed.protocol import to_serialize
from distributed.worker import _worker_cvar  # what get_worker() reads: set for the model, as in a task

from dasklbfgs.solvers.sandblaster.tasks import portion_loss_grad

__all__ = ["PortionService", "HANDLER", "start_service", "DirectCalls", "call_workers"]

HANDLER = "dasklbfgs_portion_sums"
ABANDON = "dasklbfgs_portion_abandon"
MODELS_KEPT = 8  # unpickled models a worker keeps, by digest: evaluators of runs at the same time
ABANDONED_KEPT = 256  # abandoned call ids a worker remembers
#: A worker is not given up on while it is less late than this: a backup task's own round
#: trip through the scheduler takes about as long, so it could not win (and jitter of a
#: millisecond would send every small evaluation down the task path).
LATE_FLOOR_SECONDS = 0.025


class PortionService(WorkerPlugin):
    """Answers ``HANDLER`` requests: the sums of listed portions of shards in the worker's memory."""

    name = "dasklbfgs-portion-service"
    idempotent = True  # registered by every evaluator; once per worker is enough

    def setup(self, worker: Any) -> None:
        self.worker = worker
        self.models: OrderedDict[bytes, Any] = OrderedDict()
        self.abandoned: OrderedDict[str, None] = OrderedDict()  # calls whose answer nobody waits for
        self.running = 0  # calls being answered
        self.portions_computed = 0
        worker.handlers[HANDLER] = self.portion_sums
        worker.handlers[ABANDON] = self.abandon

    def teardown(self, worker: Any) -> None:
        worker.handlers.pop(HANDLER, None)
        worker.handlers.pop(ABANDON, None)

    def abandon(self, call: str) -> None:
        """The client backed up call ``call``'s portions elsewhere: compute no more of them."""
        self.abandoned[call] = None
        while len(self.abandoned) > ABANDONED_KEPT:
            self.abandoned.popitem(last=False)

    def _model(self, digest: bytes, blob: bytes) -> Any:
        if digest not in self.models:
            self.models[digest] = pickle.loads(blob)
            while len(self.models) > MODELS_KEPT:
                self.models.popitem(last=False)
        self.models.move_to_end(digest)
        return self.models[digest]

    async def portion_sums(self, call: str, digest: bytes, model: bytes, x: Any,
                           items: list[tuple[str, int, int]]) -> dict[str, Any]:
        """``(loss, sums)`` of each portion ``(shard key, first row, stop row)`` in the order
        given, ``None`` for a portion whose shard this worker no longer holds (or left
        uncomputed once the call was abandoned); and the seconds the worker computed."""
        data = self.worker.data
        shards = [data[key] if key in data else None for key, _, _ in items]  # read on the event loop
        work = [(shard, slice(start, stop)) for shard, (_, start, stop) in zip(shards, items)]
        the_model = self._model(digest, model)
        started = time.perf_counter()
        self.running += 1
        try:
            sums = await asyncio.get_running_loop().run_in_executor(
                self.worker.executors["default"], self._compute, call, the_model, x, work)
        finally:
            self.running -= 1
        self.portions_computed += sum(s is not None for s in sums)
        return {"sums": to_serialize(sums), "seconds": time.perf_counter() - started}

    def _compute(self, call: str, model: Any, x: Any, work: list[tuple[Any, slice]]) -> list[Any]:
        """The portions' sums, on a task thread of the worker (where ``get_worker()`` answers as
        in a task), stopping early when the call is abandoned."""
        token = _worker_cvar.set(self.worker)
        try:
            return [None if shard is None or call in self.abandoned
                    else portion_loss_grad(shard, local, model=model, x=x) for shard, local in work]
        finally:
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
    compute_seconds: dict[str, float] = field(default_factory=dict)  # worker -> the seconds it computed
    lost: set[str] = field(default_factory=set)  # workers that could not be reached
    late: set[str] = field(default_factory=set)  # workers given up on as stragglers


def call_workers(client: Client, call: str, model: Any, x: Any, plan: dict[str, list[tuple[int, str, int, int]]],
                 started: float, backup_slack: float | None) -> DirectCalls:
    """Ask every worker of ``plan`` (worker -> its portions as ``(index, shard key, first
    row, stop row)``) for their sums, at once, and wait for the answers.

    A worker that cannot be reached is ``lost``. With ``backup_slack``, once a worker has
    answered, a worker still computing is given up on (``late``) when it has taken
    ``backup_slack`` times as long as its rows would take at the fastest answer's rate (and
    ``LATE_FLOOR_SECONDS`` longer at least): its
    portions are then backed up by tasks, as the task path backs up a straggler's (its
    answer, if it comes, is dropped, and the worker told to stop computing it). ``call``
    names the calls of this evaluation, unique. Any other error (the model's) is raised.
    """
    blob = cloudpickle.dumps(model)
    digest = hashlib.blake2b(blob, digest_size=16).digest()
    return client.sync(_call_workers, client, call, blob, digest, x, plan, started, backup_slack)


async def _call_workers(client: Client, call: str, blob: bytes, digest: bytes, x: Any,
                        plan: dict[str, list[tuple[int, str, int, int]]], started: float,
                        backup_slack: float | None) -> DirectCalls:
    out = DirectCalls()
    payload = to_serialize(x)
    calls = {
        asyncio.ensure_future(getattr(client.rpc(worker), HANDLER)(
            call=call, digest=digest, model=blob, x=payload,
            items=[(key, start, stop) for _, key, start, stop in items])): worker
        for worker, items in plan.items()
    }
    rows = {worker: sum(stop - start for _, _, start, stop in items) for worker, items in plan.items()}
    pending = set(calls)
    fastest = 0.0  # rows per second of the fastest answer so far

    def due(worker: str) -> float:
        """When ``worker`` is late: ``backup_slack`` times its rows' time at the fastest rate,
        and at least ``LATE_FLOOR_SECONDS`` past that time."""
        expected = rows[worker] / fastest
        return started + max(backup_slack * expected, expected + LATE_FLOOR_SECONDS)

    while pending:
        timeout = None
        if backup_slack is not None and fastest > 0:
            timeout = max(0.0, min(due(calls[t]) for t in pending) - time.perf_counter())
        done, pending = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        now = time.perf_counter()
        if backup_slack is not None and fastest > 0:
            late = {t for t in pending if now >= due(calls[t])}
            out.late.update(calls[t] for t in late)
            _forget(late)
            _forget({asyncio.ensure_future(getattr(client.rpc(calls[t]), ABANDON)(call=call)) for t in late})
            pending -= late
        for answered in done:
            worker = calls[answered]
            error = answered.exception()
            if isinstance(error, OSError):  # CommClosedError, a refused connection: the worker is gone
                out.lost.add(worker)
                continue
            if error is not None:
                _forget(pending)
                raise error
            answer = answered.result()
            out.finished[worker] = now
            out.compute_seconds[worker] = answer["seconds"]
            for (index, *_), sums in zip(plan[worker], answer["sums"]):
                if sums is not None:
                    out.sums[index], out.computed_on[index] = sums, worker
            fastest = max(fastest, rows[worker] / max(now - started, 1e-9))
    _forget(pending)
    return out


def _forget(calls: set[asyncio.Future]) -> None:
    """Drop the answers still to come (a late worker's): retrieved when they arrive, unused."""
    for future in calls:
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
