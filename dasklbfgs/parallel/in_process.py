"""Driving K partition programs in lockstep in one process: the reference executor.

Each round, every program yields one :class:`~dasklbfgs.parallel.exchanges.Exchange`; the
executor checks that they agree (same key, a key not used before in this evaluation, every
``receive_from`` naming exactly the partitions that sent to it), hands every partition copies
of the arrays sent to it (as a message would: a receiver cannot alter the sender's arrays),
and counts the bytes. The Dask runtime does the same with real messages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasklbfgs.errors import PartitionError
from dasklbfgs.parallel.exchanges import Exchange, Step, advance, payload_bytes

__all__ = ["InProcessRun", "run_in_process"]


@dataclass
class InProcessRun:
    """What :func:`run_in_process` returns: each program's return value, in partition order,
    and the payload bytes each partition sent, by key."""

    results: list[Any]
    bytes_sent: list[dict[str, int]] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(sum(sent.values()) for sent in self.bytes_sent)

    def bytes_of(self, key: str) -> int:
        """Bytes all partitions sent under ``key``."""
        return sum(sent.get(key, 0) for sent in self.bytes_sent)


def _check_round(exchanges: Sequence[Exchange | None], used: set[str]) -> tuple[str, list[Exchange]]:
    """The round's key and exchanges, after checking that every partition takes part with that key."""
    finished = [p for p, e in enumerate(exchanges) if e is None]
    keys = {p: e.key for p, e in enumerate(exchanges) if e is not None}
    if finished:
        raise PartitionError(f"partition(s) {finished} returned while partition(s) {sorted(keys)} still exchange "
                             f"(keys {sorted(set(keys.values()))!r}): the programs disagree on their steps")
    if len(set(keys.values())) > 1:
        raise PartitionError(f"partitions yielded different keys in one round: {keys!r}")
    key = keys[0]
    if key in used:
        raise PartitionError(f"key {key!r} was used twice in one evaluation: keys must be unique")
    k = len(exchanges)
    taking_part = [exchange for exchange in exchanges if exchange is not None]  # all of them: none finished
    for p, exchange in enumerate(taking_part):
        bad = [q for q in exchange.send if not (isinstance(q, (int, np.integer)) and 0 <= q < k and q != p)]
        if bad:
            raise PartitionError(f"partition {p} sends under key {key!r} to {bad}, which are not other "
                                 f"partitions of 0..{k - 1}")
    return key, taking_part


def _deliver(exchanges: Sequence[Exchange], key: str) -> list[dict[int, np.ndarray]]:
    """Each partition's received arrays (copies), after checking ``receive_from``."""
    inboxes = []
    for p, exchange in enumerate(exchanges):
        senders = sorted(q for q, e in enumerate(exchanges) if p in e.send)
        if sorted(exchange.receive_from) != senders:
            raise PartitionError(f"under key {key!r} partition {p} expects arrays from "
                                 f"{sorted(exchange.receive_from)}, "
                                 f"but {senders} sent to it")
        inboxes.append({q: np.array(exchanges[q].send[p], copy=True) for q in senders})
    return inboxes


def run_in_process(programs: Sequence[Step[Any]]) -> InProcessRun:
    """Run the K partition ``programs`` (generators) to their ends, exchanging in lockstep.

    Raises :class:`~dasklbfgs.errors.PartitionError` naming the key and partitions when the
    programs disagree (different keys in one round, a key used twice, one finishing before the
    others, ``receive_from`` not matching who sent).
    """
    k = len(programs)
    bytes_sent: list[dict[str, int]] = [defaultdict(int) for _ in range(k)]
    used: set[str] = set()
    inboxes: list[dict[int, np.ndarray] | None] = [None] * k
    while True:
        steps = [advance(program, inbox) for program, inbox in zip(programs, inboxes)]
        exchanges = [exchange for exchange, _ in steps]
        if all(exchange is None for exchange in exchanges):
            return InProcessRun([result for _, result in steps], [dict(sent) for sent in bytes_sent])
        key, taking_part = _check_round(exchanges, used)
        used.add(key)
        for p, exchange in enumerate(taking_part):
            bytes_sent[p][key] += payload_bytes(exchange)
        inboxes = list(_deliver(taking_part, key))
