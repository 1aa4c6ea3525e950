"""A Downpour model replica: a long-running task that trains on its own rows.

The loop is the paper's (ALGORITHMS.md §3): fetch the parameters every ``n_fetch`` steps,
compute a mini-batch gradient, accrue it (and optionally take a local step), and push the
accrued gradient to the shards every ``n_push`` steps. Fetches and pushes go to all
shards at once and run in parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ReplicaConfig", "epoch_order", "replica_rows", "run_replica"]


@dataclass(frozen=True)
class ReplicaConfig:
    batch_size: int
    n_fetch: int
    n_push: int
    epochs: int
    local_learning_rate: float
    seed: int
    wire_dtype: str = "float64"


def replica_rows(n_samples: int, n_replicas: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal row ranges, one per replica (its training subset)."""
    edges = [n_samples * r // n_replicas for r in range(n_replicas + 1)]
    return list(zip(edges[:-1], edges[1:]))


def epoch_order(n_rows: int, seed: int, replica: int, epoch: int) -> np.ndarray:
    """The replica's row order for one epoch: seeded, so runs repeat exactly."""
    return np.random.default_rng([seed, replica, epoch]).permutation(n_rows)


def batch_gradient(model: Any, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean loss plus penalty over one mini-batch, and its gradient."""
    loss, grad = model.loss_grad_sum(params, X, y)
    penalty, penalty_grad = model.penalty(params)
    n = X.shape[0]
    return loss / n + penalty, grad / n + penalty_grad


def _fetch(shards: list[Any], dtype: str) -> tuple[np.ndarray, list[int], str | None]:
    calls = [s.fetch(dtype) for s in shards]  # all in flight before the first wait
    replies = [c.result() for c in calls]
    params = np.concatenate([r[0] for r in replies]).astype(np.float64)
    stop = next((r[2] for r in replies if r[2]), None)
    return params, [r[1] for r in replies], stop


def _push(shards, bounds, accrued, versions, replica, steps, loss_sum, *, dtype: str, fetch: bool):
    """Push to every shard in parallel; with ``fetch`` also return the updated parameters."""
    wire = accrued.astype(dtype, copy=False)
    calls = [
        s.push(wire[a:b], v, replica, steps, loss_sum, fetch)
        for s, (a, b), v in zip(shards, bounds, versions)
    ]
    replies = [c.result() for c in calls]
    stop = next((r[1] for r in replies if r[1]), None)
    if not fetch:
        return stop, None
    params = np.concatenate([r[2] for r in replies]).astype(np.float64)
    return stop, (params, [r[0] for r in replies])


def run_replica(replica: int, *, model: Any, data: Any, rows: tuple[int, int], shards: list[Any],
                bounds: list[tuple[int, int]], config: ReplicaConfig, first_epoch: int = 0) -> dict[str, Any]:
    """Train until the epochs are done or a shard asks to stop; return the replica's tallies."""
    try:
        from distributed import secede

        secede()  # a long-running task must not hold one of the worker's task threads
    except ValueError:  # not inside a Dask task (unit tests call this directly)
        pass
    X, y = data.load_rows(*rows)
    n = X.shape[0]
    accrued = np.zeros(model.n_params)
    accrued_steps, accrued_loss = 0, 0.0
    steps = fetches = pushes = examples = 0
    stop: str | None = None
    params = np.zeros(model.n_params)
    versions: list[int] = []
    need_fetch = True
    for epoch in range(first_epoch, config.epochs):
        order = epoch_order(n, config.seed, replica, epoch)
        for start in range(0, n, config.batch_size):
            if need_fetch:
                params, versions, stop = _fetch(shards, config.wire_dtype)
                fetches += 1
                if stop:
                    break
            index = np.sort(order[start : start + config.batch_size])
            loss, grad = batch_gradient(model, params, X[index], y[index])
            if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
                reason = (f"replica {replica} computed a non-finite loss ({loss}) at its step {steps} "
                          f"(epoch {epoch}); the gradient was not pushed")
                for s in shards:
                    s.request_stop(reason).result()
                stop = reason
                break
            accrued += grad
            accrued_steps += 1
            accrued_loss += loss
            examples += index.size
            if config.local_learning_rate:
                params -= config.local_learning_rate * grad
            steps += 1
            need_fetch = steps % config.n_fetch == 0
            if steps % config.n_push == 0:
                stop, fetched = _push(shards, bounds, accrued, versions, replica, accrued_steps,
                                      accrued_loss, dtype=config.wire_dtype, fetch=need_fetch)
                pushes += 1
                if fetched is not None:
                    params, versions = fetched
                    fetches += 1
                    need_fetch = False
                accrued[:] = 0.0
                accrued_steps, accrued_loss = 0, 0.0
                if stop:
                    break
        if stop:
            break
    if accrued_steps and not stop:
        _push(shards, bounds, accrued, versions, replica, accrued_steps, accrued_loss,
              dtype=config.wire_dtype, fetch=False)
        pushes += 1
    return {"replica": replica, "steps": steps, "fetches": fetches, "pushes": pushes,
            "examples": examples, "stopped_by": stop}
