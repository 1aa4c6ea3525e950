"""Argument checks every replica-based method (Downpour and the peer methods) shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dasklbfgs._checks import check_int
from dasklbfgs.data.sharded import as_dataset
from dasklbfgs.solvers.downpour.replica import replica_rows
from dasklbfgs.errors import ConfigurationError

__all__ = ["ReplicaRun", "check_replica_run"]


@dataclass(frozen=True)
class ReplicaRun:
    dataset: Any
    rows: list[tuple[int, int]]
    batch_size: int
    epochs: int
    max_steps: int | None
    eval_set: Any
    eval_every: int | None


def check_replica_run(model: Any, data: Any, *, n_replicas: Any, batch_size: Any, epochs: Any, max_steps: Any,
                      eval_data: Any, eval_every: Any, defer_eval: Any = False) -> ReplicaRun:
    """The dataset, each replica's rows and the checked counts; a clear error for bad ones."""
    dataset = as_dataset(data)
    model.check_data(dataset)
    n_replicas = check_int(n_replicas, "n_replicas")
    batch_size = check_int(batch_size, "batch_size")
    epochs = check_int(epochs, "epochs")
    if max_steps is not None:
        max_steps = check_int(max_steps, "max_steps")
    rows = replica_rows(dataset.n_samples, n_replicas)
    smallest = min(b - a for a, b in rows)
    if batch_size > smallest:
        raise ConfigurationError(
            f"batch_size ({batch_size}) is larger than a replica's data ({smallest} rows with "
            f"{n_replicas} replicas over {dataset.n_samples} rows)"
        )
    if eval_every is not None:
        eval_every = check_int(eval_every, "eval_every")
        if eval_data is None:
            raise ConfigurationError("eval_every needs eval_data")
    if not isinstance(defer_eval, bool):
        raise ConfigurationError(f"defer_eval must be True or False, got {defer_eval!r}")
    eval_set = as_dataset(eval_data) if eval_data is not None else None
    if eval_set is not None:
        model.check_data(eval_set)
    return ReplicaRun(dataset, rows, batch_size, epochs, max_steps, eval_set, eval_every)
