"""Argument checks every replica-based method (Downpour and the peer methods) shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dasklbfgs.data.sharded import as_dataset
from dasklbfgs.solvers._replicas.batches import replica_rows
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.base import Model

__all__ = ["ReplicaRun", "check_param_shards", "check_replica_run"]


@dataclass(frozen=True)
class ReplicaRun:
    dataset: Any
    rows: list[tuple[int, int]]   # each replica's contiguous block of rows
    eval_set: Any


def check_replica_run(model: Model, data: Any, options: Any, eval_data: Any) -> ReplicaRun:
    """The dataset and each replica's rows for ``options`` (a
    :class:`~dasklbfgs.solvers.common_options.ReplicaOptions`); a clear error when they do
    not fit the data."""
    dataset = as_dataset(data)
    model.check_data(dataset)
    if options.n_replicas > dataset.n_samples:
        raise ConfigurationError(
            f"n_replicas ({options.n_replicas}) is larger than the dataset's {dataset.n_samples} rows: "
            "each replica trains on rows of its own"
        )
    rows = replica_rows(dataset.n_samples, options.n_replicas)
    smallest = min(b - a for a, b in rows)
    if options.batch_size > smallest:
        raise ConfigurationError(
            f"batch_size ({options.batch_size}) is larger than a replica's data ({smallest} rows with "
            f"{options.n_replicas} replicas over {dataset.n_samples} rows)"
        )
    if options.eval_every is not None and eval_data is None:
        raise ConfigurationError("eval_every needs eval_data")
    eval_set = as_dataset(eval_data) if eval_data is not None else None
    if eval_set is not None:
        model.check_data(eval_set)
    return ReplicaRun(dataset, rows, eval_set)


def check_param_shards(model: Model, n_param_shards: int) -> int:
    """``n_param_shards``, or an error when the model has fewer parameters than shards."""
    if n_param_shards > model.n_params:
        raise ConfigurationError(
            f"n_param_shards ({n_param_shards}) is larger than the model's {model.n_params} parameters"
        )
    return n_param_shards
