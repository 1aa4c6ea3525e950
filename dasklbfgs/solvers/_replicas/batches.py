"""Each replica's rows and mini-batches, the same for Downpour and the peer methods, and
what a long-running replica task does on its worker."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["Batches", "epoch_order", "is_non_finite", "leave_task_slot", "non_finite_message", "replica_rows"]


def replica_rows(n_samples: int, n_replicas: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal row ranges, one per replica (its training subset)."""
    edges = [n_samples * r // n_replicas for r in range(n_replicas + 1)]
    return list(zip(edges[:-1], edges[1:]))


def epoch_order(n_rows: int, seed: int, replica: int, epoch: int) -> np.ndarray:
    """The replica's row order for one epoch: seeded, so runs repeat exactly."""
    return np.random.default_rng([seed, replica, epoch]).permutation(n_rows)


class Batches:
    """The replica's mini-batches in order, step after step across epochs (with lookahead).

    ``config`` needs ``batch_size``, ``epochs`` and ``seed`` (a Downpour or peer config).
    """

    def __init__(self, n_rows: int, config: Any, replica: int) -> None:
        self.n_rows, self.config, self.replica = n_rows, config, replica
        self.per_epoch = math.ceil(n_rows / config.batch_size)
        self.total = config.epochs * self.per_epoch
        self._orders: dict[int, np.ndarray] = {}

    def __getitem__(self, step: int) -> tuple[int, np.ndarray]:
        epoch = step // self.per_epoch
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = epoch_order(self.n_rows, self.config.seed, self.replica, epoch)
        start = (step % self.per_epoch) * self.config.batch_size
        return epoch, np.sort(self._orders[epoch][start : start + self.config.batch_size])


def leave_task_slot() -> None:
    """Secede: a long-running replica must not hold one of the worker's task threads."""
    try:
        from distributed import secede

        secede()
    except ValueError:  # not inside a Dask task (unit tests call replicas directly)
        pass


def is_non_finite(reason: str | None) -> bool:
    """Whether a replica's stop reason is :func:`non_finite_message`'s."""
    return reason is not None and reason.startswith("replica ") and "computed a non-finite loss" in reason


def non_finite_message(replica: int, loss: float, step: int, epoch: int, synchronous: bool = False) -> str:
    where = f"synchronous step {step}" if synchronous else f"its step {step} (epoch {epoch})"
    return f"replica {replica} computed a non-finite loss ({loss}) at {where}; the gradient was not applied"
