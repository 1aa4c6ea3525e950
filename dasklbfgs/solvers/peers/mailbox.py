"""``PeerMailbox``: a Dask actor per replica through which the peer methods talk.

Each replica of synchronous SGD, EASGD, gossip and neighbour exchange owns a mailbox on
its own worker. Peers write into it with actor calls (tree messages, neighbour gradients,
push-sum shares) and read the parameters the replica last published (gossip pulls,
held-out scoring). The owning replica runs in the same process and uses the instance
directly, so publishing, reporting progress and waiting for a message cost no round trip
and no serialisation; peers on the same worker call it in-process through
:func:`~dasklbfgs._actors.bind_local`, like Downpour's shards. A lock
makes the two sides (the worker's event loop and the replica's thread) safe; the replica is
the only one that ever waits.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np

from dasklbfgs.errors import WorkerLostError
from dasklbfgs.models.sums import SparseSum
from dasklbfgs.solvers._replicas.wire import payload_nbytes

__all__ = ["PeerMailbox", "Stopped"]

_STATS = ("replica", "steps", "loss_sum", "loss_count", "recent_loss", "messages_in", "bytes_in", "reads", "bytes_out",
          "stop_reason")


class PeerMailbox:
    """Messages for one replica, its last published parameters and its progress counters."""

    replica: int = 0

    def __init__(self, replica: int) -> None:
        self.replica = replica
        self._lock = threading.Condition()
        self._slots: dict[Hashable, Any] = {}
        self._queue: list[tuple[int, np.ndarray | SparseSum]] = []
        self._shares: list[tuple[np.ndarray, float]] = []
        self.published: np.ndarray | None = None
        self.published_step = -1
        self.steps = 0
        self.loss_sum = 0.0
        self.loss_count = 0
        self.recent_loss = float("nan")  # moving average of the owner's mini-batch losses
        self.messages_in = 0
        self.bytes_in = 0
        self.reads = 0            # parameters read by peers (gossip pulls)
        self.bytes_out = 0
        self.stop_reason: str | None = None
        self.aborted = False      # the run is over (a peer was lost): no message will come
        self.finished = False     # the owner took its last step: it takes no more gradients or shares

    # -- called by peers through the actor (in-process when on the same worker) ----------

    async def put(self, key: Hashable, value: Any) -> None:
        """Leave ``value`` under ``key`` for the owner (a tree message)."""
        with self._lock:
            self._slots[key] = value
            self._count(value)
            self._lock.notify_all()

    async def deliver(self, sender: int, gradient: np.ndarray | SparseSum) -> bool:
        """Queue neighbour ``sender``'s gradient (compact when it is zero outside the
        coordinates its batch touched); the owner applies it between its own batches."""
        return self._accept("_queue", (sender, gradient), gradient)

    async def share(self, numerator: np.ndarray, weight: float) -> bool:
        """Take a push-sum share (half of a peer's numerator and weight); False once the owner
        has finished (the sender keeps it, so no share of the sums is ever lost)."""
        return self._accept("_shares", (numerator, weight), numerator)

    def _accept(self, queue: str, item: tuple[Any, Any], payload: Any) -> bool:
        """Append ``item`` to the list named ``queue``; False once the owner has finished.
        The list is looked up under the lock: draining and finishing replace it."""
        with self._lock:
            if self.finished:
                return False
            getattr(self, queue).append(item)
            self._count(payload)
            return True

    def _count(self, value: Any) -> None:
        self.messages_in += 1
        self.bytes_in += payload_nbytes(value)

    async def read(self) -> tuple[np.ndarray | None, int]:
        """The parameters the owner last published and the step it published them at."""
        published = self.published
        if published is not None:
            self.reads += 1
            self.bytes_out += published.nbytes
        return published, self.published_step

    async def peek(self) -> tuple[np.ndarray | None, int]:
        """Like :meth:`read`, for the coordinator: not counted as traffic between replicas."""
        return self.published, self.published_step

    async def request_stop(self, reason: str) -> None:
        """Ask the owner to stop after its current step (first reason wins)."""
        self.request_stop_now(reason)

    async def abort(self) -> None:
        """End any wait of the owner's at once, even a synchronous step's."""
        with self._lock:
            self.aborted = True
            self._lock.notify_all()

    async def stats(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _STATS}

    # -- the owner's side (same process) --------------------------------------------------

    def take(self, key: Hashable, timeout: float, stoppable: bool = True) -> Any:
        """Wait for the message under ``key`` and remove it; with ``stoppable``, a stop
        request ends the wait with :class:`Stopped`."""
        with self._lock:
            if not self._lock.wait_for(
                    lambda: key in self._slots or self.aborted or (stoppable and self.stop_reason is not None),
                    timeout):
                raise WorkerLostError(
                    f"replica {self.replica} waited {timeout:.0f} s for {key!r} from a peer; "
                    "a peer's worker is probably gone"
                )
            if key not in self._slots:
                raise Stopped(self.stop_reason or "the run was aborted")
            return self._slots.pop(key)

    def wait_aborted(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the coordinator's :meth:`abort`; whether it came."""
        with self._lock:
            return self._lock.wait_for(lambda: self.aborted, timeout)

    def drain(self, queue: str = "_queue") -> list[Any]:
        """Take all of the list named ``queue``: neighbours' gradients, or ``"_shares"``."""
        with self._lock:
            items = getattr(self, queue)
            setattr(self, queue, [])
        return items

    def finish(self) -> list[tuple[np.ndarray, float]]:
        """Refuse further gradients and shares; return the shares that arrived before."""
        with self._lock:
            self.finished = True
            shares, self._shares, self._queue = self._shares, [], []
        return shares

    def publish(self, params: np.ndarray, step: int) -> None:
        self.published, self.published_step = params.copy(), step

    def report(self, steps: int, loss_sum: float, loss_count: int, recent_loss: float) -> None:
        self.steps, self.loss_sum, self.loss_count, self.recent_loss = steps, loss_sum, loss_count, recent_loss

    def request_stop_now(self, reason: str) -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
            self._lock.notify_all()


class Stopped(Exception):
    """The run was stopped while a replica waited for a peer's message."""
