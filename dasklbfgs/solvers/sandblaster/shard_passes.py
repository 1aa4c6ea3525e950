"""Passes over the shards other than an evaluation: a task per shard, next to its cached copy
(or reading it from Zarr when the run streams), the results in shard order, so that nothing
built from them depends on where a task ran."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dasklbfgs._wire import INLINE_PARAMS_BYTES
from dasklbfgs.errors import NonFiniteObjectiveError
from dasklbfgs.models.online_pass import PassResult, averaged
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.tasks import (
    column_moments,
    compact_positions,
    shard_column_moments,
    shard_online_pass,
    stored_shard_online_pass,
    stored_shard_positions,
)

__all__ = ["column_moments_by_shard", "online_pass_by_shard", "online_start", "read_positions_by_shard"]

logger = logging.getLogger(__name__)


def column_moments_by_shard(evaluator: MegaBatchEvaluator) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per shard, ``(n, mean, M2)`` of the columns of X
    (:func:`~dasklbfgs.solvers.sandblaster.tasks.column_moments`): computed once per set of
    cached shards, which every fit on them (a path's, a fold's) then shares (the same values:
    they depend on the rows and weights alone)."""
    def compute() -> list[tuple[int, np.ndarray, np.ndarray]]:
        return _per_shard(evaluator, "moments", column_moments, shard_column_moments)

    return compute() if evaluator.cached is None else evaluator.cached.remembered("column_moments", compute)


def read_positions_by_shard(evaluator: MegaBatchEvaluator) -> list[np.ndarray | None]:
    """Per shard, the parameters its rows read (:meth:`Model.compact_positions
    <dasklbfgs.models.base.Model.compact_positions>`; None: all of them): asked of the cached
    shards once per parameter layout, or read from Zarr by a task per shard when streaming."""
    if evaluator.cached is not None:
        return evaluator.cached.compact_positions(evaluator.model)
    return _per_shard(evaluator, "positions", compact_positions, stored_shard_positions, model=evaluator.model)


def online_pass_by_shard(evaluator: MegaBatchEvaluator, x: np.ndarray, learning_rate: float,
                         number: int) -> list[PassResult]:
    """Pass ``number`` of Adagrad over each shard from ``x``
    (:func:`~dasklbfgs.models.online_pass.adagrad_pass`)."""
    client = evaluator.client
    start = client.scatter(x, broadcast=True, hash=False) if x.nbytes > INLINE_PARAMS_BYTES else x
    return _per_shard(evaluator, f"online-{number}", shard_online_pass, stored_shard_online_pass,
                      model=evaluator.model, x=start, learning_rate=learning_rate)


def online_start(evaluator: MegaBatchEvaluator, x: np.ndarray | None, options: Any,
                 dataset: str) -> tuple[np.ndarray, dict[str, Any]]:
    """The point ``options.online_passes`` passes of Adagrad over the shards reach from ``x``
    (None: zeros), each pass's per-shard results averaged
    (:func:`~dasklbfgs.models.online_pass.averaged`), and what the passes did; a pass that
    diverges is refused, naming the rate and the ``dataset``."""
    passes_asked, rate = options.online_passes, options.online_learning_rate
    x = np.zeros(evaluator.model.n_params) if x is None else x
    started, losses = time.perf_counter(), []
    for number in range(passes_asked):
        passes = online_pass_by_shard(evaluator, x, rate, number)
        x = averaged(x, passes)
        losses.append(sum(p.loss for p in passes) / max(sum(p.rows_weight for p in passes), 1e-300))
        if not (np.all(np.isfinite(x)) and np.isfinite(losses[-1])):
            raise NonFiniteObjectiveError(
                f"online pass {number + 1} of {passes_asked} diverged (online_learning_rate={rate:g}, "
                f"progressive loss {losses[-1]:g}): lower the rate (dataset {dataset!r})")
    done = {"passes": passes_asked, "seconds": time.perf_counter() - started, "progressive_loss": losses}
    logger.info("online start: %d pass(es) of Adagrad in %.2f s, progressive loss %s", passes_asked, done["seconds"],
                ", ".join(f"{v:.5g}" for v in losses))
    return x, done


def _per_shard(evaluator: MegaBatchEvaluator, name: str, on_cached: Callable[..., Any],
               from_store: Callable[..., Any], **kwargs: Any) -> list[Any]:
    """``on_cached(shard, **kwargs)`` on each cached shard, or ``from_store(data, index, **kwargs)``."""
    client, data, cached = evaluator.client, evaluator.data, evaluator.cached
    keys = [f"sandblaster-{name}-{evaluator.token}-{i}" for i in range(data.n_shards)]
    if cached is not None:
        futures = [client.submit(on_cached, shard, key=key, pure=False, **kwargs)
                   for shard, key in zip(cached.shards, keys)]
    else:
        futures = [client.submit(from_store, data, i, key=key, pure=False, **kwargs) for i, key in enumerate(keys)]
    return client.gather(futures)
