"""Argument checks every replica-based method (Downpour and the peer methods) shares."""

from __future__ import annotations

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.base import Model
from dasklbfgs.solvers.common_options import ReplicaOptions, replica_rows
from dasklbfgs.solvers.context import RunContext

__all__ = ["check_param_shards", "checked_rows"]


def checked_rows(context: RunContext) -> list[tuple[int, int]]:
    """Each replica's contiguous block of the dataset's rows, for ``context.options`` (a
    :class:`~dasklbfgs.solvers.common_options.ReplicaOptions`); a clear error when the
    replicas or their batches do not fit the data, or ``eval_every`` has nothing to score."""
    options, n_samples = context.options, context.dataset.n_samples
    assert isinstance(options, ReplicaOptions)
    if options.n_replicas > n_samples:
        raise ConfigurationError(
            f"n_replicas ({options.n_replicas}) is larger than the dataset's {n_samples} rows: "
            "each replica trains on rows of its own"
        )
    rows = replica_rows(n_samples, options.n_replicas)
    smallest = min(b - a for a, b in rows)
    if options.batch_size > smallest:
        raise ConfigurationError(
            f"batch_size ({options.batch_size}) is larger than a replica's data ({smallest} rows with "
            f"{options.n_replicas} replicas over {n_samples} rows)"
        )
    if options.eval_every is not None and context.eval_set is None:
        raise ConfigurationError("eval_every needs eval_data")
    if getattr(options, "early_stopping", False) and getattr(options, "defer_eval", False):
        raise ConfigurationError("early_stopping stops on scorings made during the run; defer_eval scores them "
                                 "after it: set one of them")
    return rows


def check_param_shards(model: Model, n_param_shards: int) -> int:
    """``n_param_shards``, or an error when the model has fewer parameters than shards."""
    if n_param_shards > model.n_params:
        raise ConfigurationError(
            f"n_param_shards ({n_param_shards}) is larger than the model's {model.n_params} parameters"
        )
    return n_param_shards
