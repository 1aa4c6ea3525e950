"""``PartitionActor``: one partition of one model replica, the one transport of model parallelism.

The K partitions of a replica run their partition programs (:mod:`dasklbfgs.parallel.base`)
side by side on K distinct workers, each partition with a ``PartitionActor`` on its worker.
Where a program yields an :class:`~dasklbfgs.parallel.exchanges.Exchange`, its actor sends
each array straight to the destination partition's actor (:meth:`PartitionActor.deliver`) and
waits for the arrays it expects (:meth:`PartitionActor.exchange`): activations and error sums
travel worker to worker, never through the client or the caller. Messages are keyed by job
(one evaluation, one training step) and exchange key, so several jobs may be in flight
through the partitions at once.

Who drives the program differs by solver, the transport does not:

- **Sandblaster** asks the actors to evaluate (:meth:`PartitionActor.evaluate`): each runs its
  program's arithmetic in a thread (``asyncio.to_thread``), so the worker's event loop keeps
  taking deliveries meanwhile.
- **Downpour**'s partition tasks run their programs in their own thread and exchange through
  the actor on their worker (:class:`TaskExchanges`): the arrays go out and come in on the
  worker's event loop, where the actor's calls run.

Every wait has a timeout (a peer's worker may be gone) and ends at once when the caller
abandons the job (:meth:`PartitionActor.abandon`) or the replica is torn down
(:meth:`PartitionActor.abort`); each error names the partition, the replica and the message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

import numpy as np

from dasklbfgs._actors import ActorRef, OnWorkerLoop, bind_local
from dasklbfgs._recent import RecentIds
from dasklbfgs._wire import aligned, free_answered_calls
from dasklbfgs.errors import PartitionLostError
from dasklbfgs.parallel.exchanges import Exchange, Step, T, advance, payload_bytes

__all__ = ["PartitionActor", "TaskExchanges", "EXCHANGE_TIMEOUT_SECONDS"]

#: How long a partition waits for a peer's arrays (or for a peer to take its own) before it
#: declares the peer lost.
EXCHANGE_TIMEOUT_SECONDS = 60.0
#: How many job ids a partition remembers as ended here, and as abandoned before they started
#: here: a late abandon or delivery concerns a recent job, and the memory must not grow with
#: every evaluation of a long run.
RECENT_JOBS = 256


class _Inbox:
    """Arrays that arrived for one exchange of one job, by sending partition."""

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self.arrived = asyncio.Event()


def _partitions(sources: list[int]) -> str:
    return f"partition {sources[0]}" if len(sources) == 1 else f"partitions {sources}"


class PartitionActor:
    """Partition ``index`` of replica ``replica`` of ``partitioned`` (a
    :class:`~dasklbfgs.parallel.base.PartitionedModel`): exchanges arrays with the other
    partitions' actors (:meth:`connect`), and runs its program on the rows it is given."""

    def __init__(self, partitioned: Any, index: int, timeout: float = EXCHANGE_TIMEOUT_SECONDS,
                 replica: int = 0) -> None:
        self.partitioned, self.index, self.timeout, self.replica = partitioned, index, timeout, replica
        self.peers: list[Any] = []
        self._inboxes: dict[tuple[Hashable, str], _Inbox] = {}
        # Jobs a caller gave up (a partition was lost) that have not ended here yet, and jobs
        # that ended here: an abandon or a peer's delivery arriving after its job ended here
        # is dropped (job ids are unique: that job never comes back).
        self._abandoned = RecentIds(RECENT_JOBS)
        self._ended = RecentIds(RECENT_JOBS)
        self.aborted = False  # the replica is torn down: every wait ends, now and later
        self.bytes_sent = 0
        self.messages_sent = 0
        self.evaluations = 0

    @property
    def name(self) -> str:
        return f"partition {self.index} of replica {self.replica}"

    async def connect(self, peers: list[Any]) -> None:
        """The actors of every partition of the replica, in partition order (this one's included)."""
        self.peers = list(peers)

    async def deliver(self, job: Hashable, key: str, source: int, array: np.ndarray) -> None:
        """Partition ``source``'s array for exchange ``key`` of ``job`` (aligned: an array off
        the wire may start at any byte, and BLAS would then be bypassed, with other roundings);
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
        self._wake(job)

    async def abort(self) -> None:
        """End every wait here, now and later (the replica is being re-created or the run has
        ended): :class:`PartitionLostError` at once."""
        self.aborted = True
        self._wake(None)

    def _wake(self, job: Hashable | None) -> None:
        for (j, _), inbox in self._inboxes.items():
            if job is None or j == job:
                inbox.arrived.set()

    async def evaluate(self, job: Hashable, params: np.ndarray, X: Any, y: np.ndarray,
                       w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """This partition's share of the loss and gradient sums over rows ``X, y`` (weights
        ``w``) at its parameters ``params``: ``(loss sum, gradient sum of its parameters)``,
        the loss identical on every partition. ``job`` names the evaluation (unique while it
        runs); its program's arithmetic runs in a thread."""
        program = self.partitioned.program(self.index, aligned(params), aligned(X), aligned(y),
                                           None if w is None else aligned(w))
        reply: dict[int, np.ndarray] | None = None
        try:
            while True:
                exchange, value = await asyncio.to_thread(advance, program, reply)
                if exchange is None:
                    self.evaluations += 1
                    return value  # the program's (loss sum, gradient sum)
                reply = await self.exchange(job, exchange)
        finally:
            self._abandoned.discard(job)
            self._ended.add(job)
            for stale in [k for k in self._inboxes if k[0] == job]:
                del self._inboxes[stale]

    async def exchange(self, job: Hashable, exchange: Exchange) -> dict[int, np.ndarray]:
        """Send ``exchange``'s arrays to their partitions and wait for the ones it expects
        (each exchange of a job is taken once: its inbox goes with it)."""
        what = f"{exchange.key!r} of {job}"
        try:
            await asyncio.wait_for(asyncio.gather(*(self.peers[q].deliver(job, exchange.key, self.index, array)
                                                    for q, array in exchange.send.items())), self.timeout)
        except Exception as exc:  # a dead peer: a closed comm, a lost actor, or no answer
            raise PartitionLostError(
                f"{self.name} could not deliver {what} to {_partitions(sorted(exchange.send))} "
                f"({type(exc).__name__}: {exc}); its worker is probably gone") from exc
        free_answered_calls()  # the arrays delivered
        self.bytes_sent += payload_bytes(exchange)
        self.messages_sent += len(exchange.send)
        inbox = self._inboxes.setdefault((job, exchange.key), _Inbox())
        expected = exchange.receive_from
        try:
            await asyncio.wait_for(self._arrival(job, inbox, expected, what), self.timeout)
        except TimeoutError:
            missing = sorted(set(expected) - set(inbox.arrays))
            raise PartitionLostError(f"{self.name} waited {self.timeout:.0f} s for {what} from "
                                     f"{_partitions(missing)}; its worker is probably gone") from None
        del self._inboxes[job, exchange.key]
        return {q: inbox.arrays[q] for q in expected}

    async def _arrival(self, job: Hashable, inbox: _Inbox, sources: tuple[int, ...], what: str) -> None:
        while not all(q in inbox.arrays for q in sources):
            if job in self._abandoned or self.aborted:
                raise PartitionLostError(f"{self.name} stopped waiting for {what}: "
                                         f"{'the replica was torn down' if self.aborted else 'its caller gave up'}")
            inbox.arrived.clear()
            await inbox.arrived.wait()

    async def stats(self) -> dict[str, Any]:
        """Bytes and messages sent to the peers, evaluations done, and what is held for jobs
        (abandoned ones not started here, inboxes of jobs in flight): both stay bounded."""
        return {"partition": self.index, "bytes_sent": self.bytes_sent, "messages_sent": self.messages_sent,
                "evaluations": self.evaluations, "abandoned_kept": len(self._abandoned),
                "inboxes_open": len(self._inboxes)}


class TaskExchanges:
    """A long-running task's side of partition ``own``'s exchanges: the task runs partition
    programs in its own thread (:meth:`run`), and each exchange goes through the
    :class:`PartitionActor` ``own`` on the task's worker, on the worker's event loop.
    ``job`` (set by the task, e.g. its training step) names the messages of the programs it
    runs next."""

    def __init__(self, own: ActorRef) -> None:
        [actor] = bind_local([own.handle()])
        if not isinstance(actor, OnWorkerLoop):
            raise RuntimeError(f"a partition task runs on a worker other than its partition actor's ({own.address})")
        self.actor: OnWorkerLoop = actor
        self.job: Hashable = "start"

    @property
    def partition(self) -> PartitionActor:
        """The actor itself (its counters, read in this thread)."""
        return self.actor.instance

    def run(self, program: Step[T]) -> T:
        """Drive ``program`` to its result under the current :attr:`job`."""
        reply: dict[int, np.ndarray] | None = None
        while True:
            exchange, value = advance(program, reply)
            if exchange is None:
                return value  # what the program returns
            reply = self.actor.exchange(self.job, exchange).result()
