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
than an actor, because a worker holding an actor cannot be retired. The client's side of
the calls: :mod:`.direct_calls`.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from contextvars import ContextVar
from typing import Any

import distributed.worker
from distributed import Client, WorkerPlugin
from distributed.protocol import to_serialize

from dasklbfgs._recent import RecentIds
from dasklbfgs.solvers.sandblaster.tasks import portion_compact_loss_grad, portion_loss_grad

#: What get_worker() reads, set for the model's code as in a task: distributed has no public
#: way to make get_worker() answer on a thread it did not start a task on (None: a
#: distributed without it, where get_worker() then answers only in tasks).
_worker_cvar: ContextVar[Any] | None = getattr(distributed.worker, "_worker_cvar", None)

__all__ = ["ABANDON", "HANDLER", "PortionService", "start_service"]

PROTOCOL = 2  # in the names below: a cluster kept running across an upgrade gets the new service beside the old
HANDLER = f"dasklbfgs_portion_sums_v{PROTOCOL}"
ABANDON = f"dasklbfgs_portion_abandon_v{PROTOCOL}"
ABANDONED_KEPT = 256  # abandoned call ids a worker remembers


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
