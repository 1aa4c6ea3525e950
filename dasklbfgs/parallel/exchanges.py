"""The one communication primitive of partition programs, and the usual patterns on it.

A partition program is a generator. Where it needs arrays from other partitions it yields an
:class:`Exchange` (what it sends to whom, and whom it expects to hear from, under a key that
every partition uses for the same step) and is resumed with ``dict[int, np.ndarray]``: the
arrays the partitions in ``receive_from`` sent to it under that key. Programs never see how
the arrays travel: :func:`dasklbfgs.parallel.in_process.run_in_process` hands them over in one
process; a Dask runtime sends them worker to worker.

The helpers below are sub-generators (``received = yield from all_gather(...)``). Each always
yields, even with nothing to send (one partition, or the first band of a halo): every
partition then yields the same keys in the same order, which the executors check.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from dasklbfgs.errors import PartitionError

__all__ = ["Exchange", "Step", "advance", "payload_bytes", "all_gather", "reduce_scatter", "halo", "all_sum"]


@dataclass(frozen=True)
class Exchange:
    """One step of communication of one partition.

    ``key`` names the step (identical on every partition, unique within an evaluation);
    ``send`` maps destination partition -> array; ``receive_from`` lists the partitions whose
    arrays under ``key`` this partition expects back.
    """

    key: str
    send: dict[int, np.ndarray]
    receive_from: tuple[int, ...]


T = TypeVar("T")
#: What a partition program (or a helper) is: it yields exchanges, is resumed with the
#: arrays received, and returns its result (of type ``T``: ``Step[float]``).
Step = Generator[Exchange, dict[int, np.ndarray], T]


def advance(program: Step[Any], reply: dict[int, np.ndarray] | None) -> tuple[Exchange | None, Any]:
    """Run ``program`` to its next exchange, resumed with ``reply`` (None: start it):
    ``(the exchange, None)``, or ``(None, its return value)`` once it has finished. Every
    executor steps programs with it (a StopIteration must not cross into asyncio or a thread)."""
    try:
        exchange = next(program) if reply is None else program.send(reply)
    except StopIteration as stop:
        return None, stop.value
    if not isinstance(exchange, Exchange):
        raise PartitionError(f"a partition program must yield Exchange objects, got {type(exchange).__name__}")
    return exchange, None


def payload_bytes(exchange: Exchange) -> int:
    """Bytes of the arrays ``exchange`` sends (its payload; the message framing is extra)."""
    return sum(int(a.nbytes) for a in exchange.send.values())


def _others(p: int, k: int) -> tuple[int, ...]:
    return tuple(q for q in range(k) if q != p)


def all_gather(key: str, p: int, k: int, block: np.ndarray, axis: int = -1) -> Step[np.ndarray]:
    """Partition ``p``'s ``block`` to every other partition, theirs back: the blocks of all
    ``k`` partitions concatenated along ``axis`` in partition order."""
    others = _others(p, k)
    received = yield Exchange(key, {q: block for q in others}, others)
    return np.concatenate([block if q == p else received[q] for q in range(k)], axis=axis)


def reduce_scatter(key: str, p: int, bounds: Sequence[int], partial: np.ndarray) -> Step[np.ndarray]:
    """Sum over partitions of the ``partial`` sums (n x width), of which partition ``p`` receives
    its own columns ``bounds[p]:bounds[p + 1]``: each partition sends every other one the
    columns it owns and adds the parts in partition order 0..K-1 (deterministic)."""
    k = len(bounds) - 1
    others = _others(p, k)
    send = {q: np.ascontiguousarray(partial[:, bounds[q] : bounds[q + 1]]) for q in others}
    received = yield Exchange(key, send, others)
    mine = partial[:, bounds[p] : bounds[p + 1]]
    parts = [mine if q == p else received[q] for q in range(k)]
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


def halo(key: str, send: dict[int, np.ndarray], receive_from: Sequence[int]) -> Step[dict[int, np.ndarray]]:
    """Arrays to and from the neighbours a partition shares a border with (only those):
    returns what ``receive_from`` sent, by partition."""
    received = yield Exchange(key, {q: np.ascontiguousarray(a) for q, a in send.items()}, tuple(receive_from))
    return received


def all_sum(key: str, p: int, k: int, value: float) -> Step[float]:
    """A float summed over the ``k`` partitions in partition order: the same bits on every one."""
    values = yield from all_gather(key, p, k, np.array([value], dtype=np.float64))
    total = 0.0
    for v in values:
        total += float(v)
    return total
