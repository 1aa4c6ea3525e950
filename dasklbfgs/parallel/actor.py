"""``PartitionActor``: one partition of one model replica, a Dask actor on a worker of its own.

The K partitions of a replica run their partition programs (:mod:`dasklbfgs.parallel.base`)
side by side on K distinct workers. Where a program yields an
:class:`~dasklbfgs.parallel.exchanges.Exchange`, its actor sends each array straight to the
destination partition's actor (:meth:`PartitionActor.deliver`) and waits for the arrays it
expects: activations and error sums travel worker to worker, never through the client or the
caller. The program's arithmetic runs in a thread (``asyncio.to_thread``), so the worker's
event loop keeps taking deliveries meanwhile, and several evaluations (jobs, named by the
caller) may be in flight through the partitions at once: messages are keyed by job and step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import numpy as np

from dasklbfgs._recent import RecentIds
from dasklbfgs._wire import aligned, free_answered_calls
from dasklbfgs.errors import PartitionLostError
from dasklbfgs.parallel.exchanges import Exchange, advance, payload_bytes

__all__ = ["PartitionActor", "EXCHANGE_TIMEOUT_SECONDS"]

#: How long a partition waits for a peer's arrays before it declares the peer lost.
EXCHANGE_TIMEOUT_SECONDS = 60.0
#: How many job ids a partition remembers as ended here, and as abandoned before they started
#: here: a late abandon or delivery concerns a recent job, and the memory must not grow with
#: every evaluation of a long run.
RECENT_JOBS = 256


class _Inbox:
    """Arrays that arrived for one step of one job, by sending partition."""

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self.arrived = asyncio.Event()


class PartitionActor:
    """Partition ``index`` of a replica of ``partitioned`` (a
    :class:`~dasklbfgs.parallel.base.PartitionedModel`): runs its program on the rows it is
    given, exchanging with the other partitions' actors (:meth:`connect`)."""

    def __init__(self, partitioned: Any, index: int, timeout: float = EXCHANGE_TIMEOUT_SECONDS) -> None:
        self.partitioned, self.index, self.timeout = partitioned, index, timeout
        self.peers: list[Any] = []
        self._inboxes: dict[tuple[Hashable, str], _Inbox] = {}
        # Jobs a caller gave up (a partition was lost) that have not ended here yet, and jobs
        # that ended here: an abandon or a peer's delivery arriving after its job ended here
        # is dropped (job ids are unique: that job never comes back).
        self._abandoned = RecentIds(RECENT_JOBS)
        self._ended = RecentIds(RECENT_JOBS)
        self.params: np.ndarray | None = None  # kept between evaluations (set_params)
        self.accrued: np.ndarray | None = None  # gradient sums accrued here (evaluate(accrue=True))
        self.bytes_sent = 0
        self.messages_sent = 0
        self.evaluations = 0

    async def connect(self, peers: list[Any]) -> None:
        """The actors of every partition of the replica, in partition order (this one's included)."""
        self.peers = list(peers)

    async def deliver(self, job: Hashable, key: str, source: int, array: np.ndarray) -> None:
        """Partition ``source``'s array for step ``key`` of ``job`` (aligned: an array off the
        wire may start at any byte, and BLAS would then be bypassed, with other roundings);
        dropped if ``job`` has ended here (a peer still sending after this partition gave up)."""
        if job in self._ended:
            return
        inbox = self._inboxes.setdefault((job, key), _Inbox())
        inbox.arrays[source] = aligned(array)
        inbox.arrived.set()

    async def abandon(self, job: Hashable) -> None:
        """End ``job`` here: a wait for its messages raises :class:`PartitionLostError` at once
        (the caller found another partition lost; this one must not wait out its timeout).
        Nothing to do if ``job`` has already ended here; remembered (among the
        ``RECENT_JOBS`` latest) if it has not started here yet."""
        if job in self._ended:
            return
        self._abandoned.add(job)
        for (j, _), inbox in self._inboxes.items():
            if j == job:
                inbox.arrived.set()

    async def set_params(self, params: np.ndarray) -> None:
        """Keep ``params`` (this partition's) for the evaluations that bring none."""
        self.params = aligned(np.asarray(params))

    async def take_accrued(self) -> np.ndarray | None:
        """The gradient sums accrued since the last take (None if none), and start afresh."""
        accrued, self.accrued = self.accrued, None
        return accrued

    async def evaluate(self, job: Hashable, params: np.ndarray | None, X: Any, y: np.ndarray,
                       w: np.ndarray | None = None, accrue: bool = False) -> tuple[float, np.ndarray | None]:
        """This partition's share of the loss and gradient sums over rows ``X, y`` (weights
        ``w``) at its parameters ``params`` (None: the kept ones, :meth:`set_params`):
        ``(loss sum, gradient sum of its parameters)``, the loss identical on every partition.
        With ``accrue`` the gradient is added to the sums kept here (:meth:`take_accrued`) and
        not sent back. ``job`` names the evaluation (unique while it runs)."""
        params = self.params if params is None else aligned(params)
        program = self.partitioned.program(self.index, params, aligned(X), aligned(y),
                                           None if w is None else aligned(w))
        reply: dict[int, np.ndarray] | None = None
        try:
            while True:
                exchange, value = await asyncio.to_thread(advance, program, reply)
                if exchange is None:
                    self.evaluations += 1
                    loss, grad = value
                    if not accrue:
                        return loss, grad
                    if self.accrued is None:
                        self.accrued = grad  # the program's own fresh array
                    else:
                        self.accrued += grad
                    return loss, None
                reply = await self._exchange(job, exchange)
        finally:
            self._abandoned.discard(job)
            self._ended.add(job)
            for stale in [k for k in self._inboxes if k[0] == job]:
                del self._inboxes[stale]

    async def _exchange(self, job: Hashable, exchange: Exchange) -> dict[int, np.ndarray]:
        """Send ``exchange``'s arrays to their partitions and wait for the ones it expects."""
        await asyncio.gather(*(self.peers[q].deliver(job, exchange.key, self.index, array)
                               for q, array in exchange.send.items()))
        free_answered_calls()  # the arrays delivered
        self.bytes_sent += payload_bytes(exchange)
        self.messages_sent += len(exchange.send)
        inbox = self._inboxes.setdefault((job, exchange.key), _Inbox())
        expected = exchange.receive_from
        try:
            await asyncio.wait_for(self._arrival(job, inbox, expected), self.timeout)
        except TimeoutError:
            missing = sorted(set(expected) - set(inbox.arrays))
            raise PartitionLostError(
                f"partition {self.index} waited {self.timeout:.0f} s for step {exchange.key!r} from "
                f"partition(s) {missing}; their worker is probably gone") from None
        return {q: inbox.arrays[q] for q in expected}

    async def _arrival(self, job: Hashable, inbox: _Inbox, sources: tuple[int, ...]) -> None:
        while not all(q in inbox.arrays for q in sources):
            if job in self._abandoned:
                raise PartitionLostError(f"partition {self.index}: evaluation {job} was abandoned by its caller")
            inbox.arrived.clear()
            await inbox.arrived.wait()

    async def stats(self) -> dict[str, Any]:
        """Bytes and messages sent to the peers, evaluations done, and what is held for jobs
        (abandoned ones not started here, inboxes of jobs in flight): both stay bounded."""
        return {"partition": self.index, "bytes_sent": self.bytes_sent, "messages_sent": self.messages_sent,
                "evaluations": self.evaluations, "abandoned_kept": len(self._abandoned),
                "inboxes_open": len(self._inboxes)}
