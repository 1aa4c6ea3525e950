"""Each replica's mini-batches, the same for Downpour and the peer methods, and what a
long-running replica task does on its worker (each replica's rows:
:func:`~dasklbfgs.solvers.common_options.replica_rows`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.models.base import Model
from dasklbfgs.solvers.common_options import ReplicaOptions

__all__ = ["Batch", "Batches", "ReplicaTask", "epoch_order", "is_non_finite", "leave_task_slot", "non_finite_message"]


def epoch_order(n_rows: int, seed: int, replica: int, epoch: int) -> np.ndarray:
    """The replica's row order for one epoch: seeded, so runs repeat exactly."""
    return np.random.default_rng([seed, replica, epoch]).permutation(n_rows)


class Batches:
    """The replica's mini-batches in order, step after step across epochs (with lookahead).

    ``options``' ``batch_size``, ``epochs`` and ``seed`` decide them.
    """

    def __init__(self, n_rows: int, options: ReplicaOptions, replica: int) -> None:
        self.n_rows, self.options, self.replica = n_rows, options, replica
        self.per_epoch = math.ceil(n_rows / options.batch_size)
        self.total = options.epochs * self.per_epoch
        self._orders: dict[int, np.ndarray] = {}

    def __getitem__(self, step: int) -> tuple[int, np.ndarray]:
        epoch = step // self.per_epoch
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = epoch_order(self.n_rows, self.options.seed, self.replica, epoch)
        start = (step % self.per_epoch) * self.options.batch_size
        return epoch, np.sort(self._orders[epoch][start : start + self.options.batch_size])


class Batch(NamedTuple):
    """One mini-batch: its rows of X and y, their sample weights scaled to a mean of 1 over
    the dataset (None: unweighted), so that the batch's mean loss, taken over its row count,
    is an unbiased estimate of the dataset's weighted mean loss, and their offsets (None:
    the dataset has none)."""

    X: Any
    y: np.ndarray
    w: np.ndarray | None
    offset: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.X.shape[0])


class ReplicaTask:
    """What every replica task keeps on its worker (Downpour's and the peer methods'): its
    rows and batches, its counts, why it stopped, and its time computing gradients.
    ``config`` is the method's replica configuration: its ``options`` (the run's, frozen) and
    what the coordinator derived from them."""

    def __init__(self, replica: int, model: Model, data: Dataset, rows: tuple[int, int], config: Any) -> None:
        self.replica, self.model, self.config = replica, model, config
        self.X, self.y = data.load_rows(*rows)
        weights = data.load_weights(*rows)
        self.w = None if weights is None else weights * (data.n_samples / data.total_weight)
        self.offset = data.load_offsets(*rows)
        self.batches = Batches(self.X.shape[0], config.options, replica)
        self.steps = self.examples = 0
        self.stop: str | None = None
        self.seconds_computing = 0.0

    def timed(self, compute: Callable[..., Any], *args: Any) -> Any:
        """``compute(*args)``, its time added to ``seconds_computing``."""
        started = time.perf_counter()
        out = compute(*args)
        self.seconds_computing += time.perf_counter() - started
        return out

    def batch(self, index: np.ndarray) -> Batch:
        """The rows ``index`` of the replica's rows (see :class:`Batch`)."""
        return Batch(self.X[index], self.y[index], None if self.w is None else self.w[index],
                     None if self.offset is None else self.offset[index])

    def gradient(self, params: np.ndarray, batch: Batch, epoch: int) -> tuple[float, np.ndarray] | None:
        """The mini-batch loss and gradient at ``params``; None when either is not finite
        (``stop`` then says so)."""
        loss, grad = self.timed(lambda: self.model.objective(params, batch.X, batch.y, batch.w, n=batch.size,
                                                             offset=batch.offset))
        if math.isfinite(loss) and np.all(np.isfinite(grad)):
            return loss, grad
        self.stop = non_finite_message(self.replica, loss, self.steps, epoch)
        return None

    def tallies(self, seconds_in_loop: float, **extra: Any) -> dict[str, Any]:
        """What the task returns to the coordinator: these counts and the method's ``extra``."""
        return {"replica": self.replica, "steps": self.steps, "examples": self.examples, "stopped_by": self.stop,
                "seconds_in_loop": seconds_in_loop, "seconds_computing": self.seconds_computing, **extra}


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
