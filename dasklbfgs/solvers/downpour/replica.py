"""A Downpour model replica: a long-running task that trains on its own rows.

The loop is the paper's (ALGORITHMS.md §3): fetch the parameters every ``n_fetch`` steps,
compute a mini-batch gradient, accrue it (and optionally take a local step), and push the
accrued gradient to the shards every ``n_push`` steps. Fetches and pushes go to all
shards at once and run in parallel. With ``overlap`` a push (and the fetch riding on its
reply) stays in flight while the next mini-batch gradient is computed, which hides the
round trip at the price of one more step of staleness. With a row-sparse wire (:mod:`.wire`), pushes carry
only the table rows touched since the last push, and fetches only the rows the batches
up to the next fetch will read.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.solvers._replicas.batches import Batches, leave_task_slot, non_finite_message
from dasklbfgs.solvers.downpour.directory import ShardDirectory
from dasklbfgs.solvers._replicas.local_actors import bind_local
from dasklbfgs.solvers.downpour.wire import Wire
from dasklbfgs.models.base import Model

__all__ = ["ReplicaConfig", "run_replica"]


@dataclass(frozen=True)
class ReplicaConfig:
    batch_size: int
    n_fetch: int
    n_push: int
    epochs: int
    local_learning_rate: float
    seed: int
    wire_dtype: str = "float64"
    sparse: bool = False
    overlap: bool = False


def _stop_reason(replies: list[Any], position: int) -> str | None:
    return next((r[position] for r in replies if r[position]), None)


class _ShardsLost(Exception):
    """A call to a parameter shard failed: its worker is gone."""


def _results(calls: list[Any]) -> list[Any]:
    try:
        return [c.result() for c in calls]
    except Exception as exc:  # the actor's worker died: RuntimeError, CommClosedError, OSError
        raise _ShardsLost(str(exc)) from exc


def _replacements(replica: int, directory: ShardDirectory | None, generation: int, lost: _ShardsLost
                  ) -> tuple[int, list[Any]]:
    """The shard handles published after ``generation`` (the coordinator re-creates lost shards)."""
    if directory is None:
        raise RuntimeError(f"replica {replica} lost a parameter shard: {lost}") from lost.__cause__
    generation, shards = directory.current(newer_than=generation)
    return generation, bind_local(shards)


def run_replica(replica: int, *, model: Model, data: Any, rows: tuple[int, int], shards: list[Any] | None,
                bounds: list[tuple[int, int]], config: ReplicaConfig, first_epoch: int = 0,
                directory: ShardDirectory | None = None) -> dict[str, Any]:
    """Train until the epochs are done or a shard asks to stop; return the replica's tallies.

    ``shards`` are the actor handles, or ``None`` to take them from ``directory``. With a
    ``directory``, the replica takes the current shard handles from it on start and
    after any failed call to a shard (the shard's worker died and the coordinator re-created
    it): the accrued gradient is dropped, the parameters fetched again, and training goes
    on. It resumes at the step the shards have counted for it, so a replica that Dask
    restarts on another worker continues where its applied pushes left off.
    """
    leave_task_slot()
    generation = -1
    if directory is not None:
        generation, shards = directory.current()
    if shards is None:
        raise ValueError("run_replica needs shards or a directory to find them in")
    shards = bind_local(shards)  # the shard on this worker: called in-process, not over TCP
    X, y = data.load_rows(*rows)
    batches = Batches(X.shape[0], config, replica)
    wire = Wire(bounds, config.wire_dtype, model.row_table if config.sparse else None, copy=config.overlap)
    # Pushing every step (dense): each gradient is pushed as it is, instead of being added
    # into a zeroed accumulator and the accumulator zeroed again (three passes over the
    # parameters per step saved; 0 + g is g, so the values pushed are the same).
    direct = config.n_push == 1 and not config.sparse
    accrued = np.zeros(model.n_params)
    touched = np.zeros(model.row_table.n_rows, dtype=bool) if config.sparse else None
    accrued_steps, accrued_loss = 0, 0.0
    steps = fetches = pushes = examples = reconnects = 0
    stop: str | None = None
    params = np.zeros(model.n_params)
    versions: list[int] = [0] * len(shards)
    while True:  # a shard may die before this replica (re)starts: wait for its replacement
        try:
            done_before = max(st["steps_by_replica"].get(replica, 0)
                              for st in _results([sh.stats() for sh in shards]))
            break
        except _ShardsLost as lost:
            generation, shards = _replacements(replica, directory, generation, lost)
    first_step = max(first_epoch * batches.per_epoch, done_before)

    def rows_ahead(step: int) -> np.ndarray | None:
        """Table rows the batches from ``step`` up to the next fetch read."""
        if not config.sparse:
            return None
        ahead = range(step, min(step + config.n_fetch, batches.total))
        return np.unique(np.concatenate([model.touched_rows(X[batches[t][1]]) for t in ahead]))

    def fetch(step: int) -> str | None:
        nonlocal versions
        calls = [s.fetch(config.wire_dtype, r) for s, r in zip(shards, wire.split_rows(rows_ahead(step)))]
        replies = _results(calls)  # all in flight before the first wait
        wire.apply_fetched(params, [r[0] for r in replies])
        versions = [r[1] for r in replies]
        return _stop_reason(replies, 2)

    def send_push(with_fetch_from: int | None) -> tuple[list[Any], bool]:
        touched_rows = np.flatnonzero(touched) if touched is not None else None
        fetch_rows = wire.split_rows(rows_ahead(with_fetch_from)) if with_fetch_from is not None else [None] * len(shards)
        calls = [
            s.push(payload, v, replica, accrued_steps, accrued_loss, with_fetch_from is not None, f)
            for s, payload, v, f in zip(shards, wire.payloads(accrued, touched_rows), computed_from, fetch_rows)
        ]
        return calls, with_fetch_from is not None

    def collect(in_flight: tuple[list[Any], bool] | None) -> str | None:
        nonlocal versions
        if in_flight is None:
            return None
        calls, fetched = in_flight
        replies = _results(calls)
        if fetched:
            wire.apply_fetched(params, [r[2] for r in replies])
            versions = [r[0] for r in replies]
        return _stop_reason(replies, 1)

    def drop_accrued() -> None:
        nonlocal accrued_steps, accrued_loss
        if not direct:  # (direct: the next step's gradient replaces it)
            accrued[:] = 0.0
        if touched is not None:
            touched[:] = False
        accrued_steps, accrued_loss = 0, 0.0

    need_fetch = True
    in_flight: tuple[list[Any], bool] | None = None
    computed_from = versions
    seconds_computing, loop_started = 0.0, time.perf_counter()
    for step in range(first_step, batches.total):
        try:
            epoch, index = batches[step]
            if need_fetch:
                stop = fetch(step)
                fetches += 1
                if stop:
                    break
            Xb = X[index]
            started = time.perf_counter()
            loss, grad = model.objective(params, Xb, y[index])
            seconds_computing += time.perf_counter() - started
            if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
                stop = non_finite_message(replica, loss, steps, epoch)
                _results([s.request_stop(stop) for s in shards])
                break
            if accrued_steps == 0:  # staleness is counted from the parameters the window began with
                computed_from = versions
            if direct:
                accrued = grad
            else:
                accrued += grad
            if touched is not None:
                touched[model.touched_rows(Xb)] = True
            accrued_steps += 1
            accrued_loss += loss
            examples += index.size
            if config.local_learning_rate:
                params -= config.local_learning_rate * grad
            steps += 1
            need_fetch = steps % config.n_fetch == 0 and step + 1 < batches.total
            if steps % config.n_push == 0:
                if config.overlap:  # the previous push's reply, then this push stays in flight
                    stop = collect(in_flight)
                    in_flight = None
                    if stop:
                        break
                    in_flight = send_push(step + 1 if need_fetch else None)
                else:
                    stop = collect(send_push(step + 1 if need_fetch else None))
                pushes += 1
                if need_fetch:
                    fetches += 1
                    need_fetch = False
                drop_accrued()
                if stop:
                    break
        except _ShardsLost as lost:
            generation, shards = _replacements(replica, directory, generation, lost)
            reconnects += 1
            drop_accrued()
            in_flight, need_fetch = None, True
    try:
        last = collect(in_flight)
        stop = stop or last
        if accrued_steps and not stop:
            collect(send_push(None))
            pushes += 1
    except _ShardsLost:
        pass  # the run is ending; the last accrued gradient is lost with the shard
    return {"replica": replica, "steps": steps, "fetches": fetches, "pushes": pushes, "examples": examples,
            "seconds_in_loop": time.perf_counter() - loop_started, "seconds_computing": seconds_computing,
            "stopped_by": stop, "first_step": first_step, "reconnects": reconnects}
