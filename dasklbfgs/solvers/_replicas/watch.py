"""The coordinator's watch loop, shared by Downpour and the peer methods.

Replicas train on their own; the coordinator only polls the actors that count their
progress (parameter shards for Downpour, replica mailboxes for the peer methods), keeps
the history, scores held-out data, writes checkpoints, streams metrics events for the
dashboard and calls the user's callback. A run object supplies what differs:
``poll() -> Progress``, ``current_params()``, ``checkpoint(steps)`` and ``stop(reason)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import OptimizeResult

from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.optim.lbfgs import MSG_CALLBACK, Status
from dasklbfgs.solvers._replicas.batches import is_non_finite
from dasklbfgs.solvers.common_options import ReplicaOptions

__all__ = ["Progress", "watch", "step_timing", "DONE_MESSAGE"]

DONE_MESSAGE = "all replicas finished their epochs"


@dataclass
class Progress:
    """What one poll saw: cumulative counters and whether every replica has returned."""

    steps: int                 # global step: mini-batch steps summed over replicas
    loss_sum: float            # replica-reported mini-batch losses so far
    loss_count: int
    stop_reason: str | None
    finished: bool
    event: dict[str, Any] = field(default_factory=dict)  # extra fields for the metrics event


def watch(run: Any, options: ReplicaOptions, *, started: float, start_steps: int, checkpoint_every: int | None,
          callback: Callable[[OptimizeResult], Any] | None) -> tuple[list[dict[str, Any]], Status, str]:
    """Poll ``run`` until its replicas finish; return ``(history, status, message)``.

    Status ``CONVERGED``: epochs done or ``max_steps`` reached; ``NON_FINITE``: a replica's
    loss became non-finite; ``CALLBACK_STOP``: the callback raised ``StopIteration``. With
    ``options.defer_eval``, the parameters due for
    held-out scoring are kept and scored once the replicas have finished, so that scoring
    does not take CPU from them (the entries keep the times the parameters were taken at).
    """
    eval_every, defer_eval = options.eval_every, options.defer_eval
    history: list[dict[str, Any]] = []
    status, message = Status.CONVERGED, DONE_MESSAGE
    last_loss = (0.0, 0)
    next_eval = None if eval_every is None else start_steps + eval_every
    next_checkpoint = None if checkpoint_every is None else start_steps + checkpoint_every
    stopped_by_callback = False
    deferred: list[tuple[dict[str, Any], np.ndarray]] = []
    while True:
        time.sleep(options.poll_interval)
        progress = run.poll()
        steps = progress.steps
        loss_sum, loss_count = progress.loss_sum - last_loss[0], progress.loss_count - last_loss[1]
        if loss_count < 0:  # the counting actor was restored from a checkpoint
            loss_sum, loss_count = 0.0, 0
        last_loss = (progress.loss_sum, progress.loss_count)
        entry: dict[str, Any] = {"time": time.perf_counter() - started, "step": steps}
        if loss_count:
            entry["train_loss"] = loss_sum / loss_count
        if next_eval is not None and (steps >= next_eval or progress.finished):
            if defer_eval:
                deferred.append((entry, run.current_params()))
            else:
                entry.update(held_out_metrics(run.model, run.current_params(), run.eval_set))
            while next_eval <= steps:
                next_eval += eval_every  # type: ignore[operator]
        if next_checkpoint is not None and steps >= next_checkpoint:
            run.checkpoint(steps)
            while next_checkpoint <= steps:
                next_checkpoint += checkpoint_every  # type: ignore[operator]
        if loss_count or len(entry) > 2 or (deferred and deferred[-1][0] is entry):
            history.append(entry)
            run.metrics.send(**entry, **progress.event)
            if callback is not None and not stopped_by_callback:
                try:
                    callback(OptimizeResult(**entry))
                except StopIteration:
                    stopped_by_callback = True
                    status, message = Status.CALLBACK_STOP, MSG_CALLBACK
                    run.stop(message)
        reason = progress.stop_reason
        if is_non_finite(reason):
            status, message = Status.NON_FINITE, reason
        elif reason and reason.startswith("max_steps") and not stopped_by_callback:
            status, message = Status.CONVERGED, reason
        if progress.finished:
            for due, params in deferred:
                due.update(held_out_metrics(run.model, params, run.eval_set))
            return history, status, message


def step_timing(tallies: list[dict[str, Any]]) -> dict[str, float]:
    """Per replica step, medians over replicas: wall time in the training loop, time
    computing gradients, and the rest (exchanging, waiting for peers, updating)."""
    per_step = [(t["seconds_in_loop"] / t["steps"], t["seconds_computing"] / t["steps"]) for t in tallies if t["steps"]]
    if not per_step:
        return {"seconds_per_step": math.nan, "seconds_computing_per_step": math.nan,
                "seconds_exchanging_per_step": math.nan}
    loop, computing = (float(np.median(v)) for v in zip(*per_step))
    return {"seconds_per_step": loop, "seconds_computing_per_step": computing,
            "seconds_exchanging_per_step": loop - computing}
