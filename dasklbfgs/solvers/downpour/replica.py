"""A Downpour model replica: a long-running task that trains on its own rows.

The loop is the paper's (docs/algorithms.md §3): fetch the parameters every ``n_fetch`` steps,
compute a mini-batch gradient, accrue it (and optionally take a local step), and push the
accrued gradient to the shards every ``n_push`` steps. Fetches and pushes go to all
shards at once and run in parallel. With ``overlap`` a push (and the fetch riding on its
reply) stays in flight while the next mini-batch gradient is computed, which hides the
round trip at the price of one more step of staleness. With a row-sparse wire
(:mod:`dasklbfgs.solvers._replicas.wire`), pushes carry
only the table rows touched since the last push, and fetches only the rows the batches
up to the next fetch will read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs._actors import bind_local, remote_first
from dasklbfgs._typing import Dataset
from dasklbfgs._wire import free_answered_calls
from dasklbfgs.models.base import Model
from dasklbfgs.solvers._replicas.batches import ReplicaTask, leave_task_slot
from dasklbfgs.solvers._replicas.directory import ShardDirectory
from dasklbfgs.solvers._replicas.parameter_shard import ShardMoved
from dasklbfgs.solvers._replicas.wire import Wire
from dasklbfgs.solvers.downpour.options import DownpourOptions

__all__ = ["DownpourReplica", "ReplicaConfig", "run_replica"]


@dataclass(frozen=True)
class ReplicaConfig:
    """What every Downpour replica task reads: the run's options as the user gave them (frozen;
    an option a replica reads is its declaration plus that read), and the row table of
    row-sparse pushes and fetches the coordinator chose (None: dense transfer)."""

    options: DownpourOptions
    table: Any = None

    @property
    def sparse(self) -> bool:
        return self.table is not None


def _stop_reason(replies: list[Any], position: int) -> str | None:
    return next((r[position] for r in replies if r[position]), None)


class _ShardsLost(Exception):
    """A call to a parameter shard failed: its worker is gone."""


def _start(make_calls: Callable[[], list[Any]]) -> list[Any]:
    """Start calls to the shards. A handle whose actor Dask already knows is lost refuses the
    call at once ("Worker holding Actor was lost"): a lost shard too, seen before a call."""
    try:
        return make_calls()
    except (RuntimeError, OSError) as exc:
        raise _ShardsLost(str(exc)) from exc


ShardCall = Callable[[int, Any], Any]  # (shard index, handle) -> the call in flight
Sent = tuple[list[Any], ShardCall, int]  # calls in flight, how to send each again, the generation sent to


class DownpourReplica(ReplicaTask):
    """One Downpour replica's state between steps and the calls it makes to the shards.

    Build it on the replica's worker (it loads the rows), take :meth:`resume_step`, then
    :meth:`run` from there; :func:`run_replica` does both.
    """

    def __init__(self, replica: int, *, model: Model, data: Dataset, rows: tuple[int, int],
                 bounds: list[tuple[int, int]], config: ReplicaConfig, directory: ShardDirectory) -> None:
        self.directory = directory
        self.generation = -1
        self.take_replacements()
        super().__init__(replica, model, data, rows, config)
        self.wire = Wire(bounds, config.options.wire_dtype, config.table, copy=config.options.overlap)
        # Pushing every step (dense): each gradient is pushed as it is, instead of being added
        # into a zeroed accumulator and the accumulator zeroed again (three passes over the
        # parameters per step saved; 0 + g is g, so the values pushed are the same).
        self.direct = config.options.n_push == 1 and not config.sparse
        self.local_rate = config.options.local_rate()  # the step on the replica's own copy between fetches
        self.accrued = np.zeros(model.n_params)
        self.touched = np.zeros(config.table.n_rows, dtype=bool) if config.sparse else None
        self.accrued_steps, self.accrued_loss = 0, 0.0
        self.fetches = self.pushes = self.reconnects = 0
        self.seconds_waiting = 0.0  # for the shards' replies: the exchange's share of a step
        self.params = np.zeros(model.n_params)
        self.versions: list[int] = [0] * len(self.shards)
        self.computed_from = self.versions  # the versions the accrued gradient was computed from
        self.need_fetch = True
        self.in_flight: tuple[Sent, bool] | None = None

    def take_replacements(self) -> None:
        """Take the shard handles published after ours (the coordinator re-creates lost
        shards); the shard on this worker is called in-process, not over TCP."""
        self.generation, shards = self.directory.current(newer_than=self.generation)
        self.shards = bind_local(self.own_shards(shards))

    def own_shards(self, shards: list[Any]) -> list[Any]:
        """The shards this replica fetches from and pushes to (all; a partition: its own)."""
        return shards

    def send(self, call: ShardCall) -> Sent:
        """Start ``call`` on every shard (all in flight before the first wait; the remote
        shards first, :func:`remote_first`)."""
        return _start(lambda: remote_first(self.shards, call)), call, self.generation

    def replies(self, sent: Sent) -> list[Any]:
        """The replies of calls in flight. A shard handed over to another worker refused the
        call without applying it: take the successors and send that call again, so no push
        is lost to a handover. Any other failure is a lost shard (:class:`_ShardsLost`)."""
        calls, call, generation = sent
        replies = []
        waiting_since = time.perf_counter()
        for i, pending in enumerate(calls):
            sent_to = generation
            while True:
                try:
                    replies.append(pending.result())
                    break
                except ShardMoved:
                    if self.generation == sent_to:  # (several shards move at once: successors taken once)
                        self.take_replacements()
                    sent_to = self.generation
                    pending = _start(lambda: [call(i, self.shards[i])])[0]  # noqa: B023 - used at once
                except Exception as exc:  # the actor's worker died: RuntimeError, CommClosedError, OSError
                    raise _ShardsLost(str(exc)) from exc
        self.seconds_waiting += time.perf_counter() - waiting_since
        return replies

    def resume_step(self, first_epoch: int) -> int:
        """The step to start at: the shards' count of this replica's steps, or ``first_epoch``'s first."""
        while True:  # a shard may die before this replica (re)starts: wait for its replacement
            try:
                done_before = max(st["steps_by_replica"].get(self.replica, 0)
                                  for st in self.replies(self.send(lambda i, sh: sh.stats())))
                break
            except _ShardsLost:
                self.take_replacements()
        return max(first_epoch * self.batches.per_epoch, done_before)

    def rows_ahead(self, step: int) -> np.ndarray | None:
        """Table rows the batches from ``step`` up to the next fetch read."""
        if not self.config.sparse:
            return None
        ahead = range(step, min(step + self.config.options.n_fetch, self.batches.total))
        return np.unique(np.concatenate([self.model.touched_rows(self.X[self.batches[t][1]]) for t in ahead]))

    def fetch(self, step: int) -> str | None:
        rows = self.wire.split_rows(self.rows_ahead(step))
        replies = self.replies(self.send(lambda i, s: s.fetch(self.config.options.wire_dtype, rows[i])))
        self.wire.apply_fetched(self.params, [r[0] for r in replies])
        self.versions = [r[1] for r in replies]
        return _stop_reason(replies, 2)

    def send_push(self, with_fetch_from: int | None) -> tuple[Sent, bool]:
        """Push the accrued gradient to every shard, asking for a fetch from step
        ``with_fetch_from`` on in the same reply; returns the calls in flight."""
        touched_rows = np.flatnonzero(self.touched) if self.touched is not None else None
        fetch = with_fetch_from is not None
        # ``fetch``: with_fetch_from is not None (mypy does not narrow through the aliased condition)
        fetch_rows = self.wire.split_rows(self.rows_ahead(with_fetch_from)) if fetch else [None] * len(self.shards)  # type: ignore[arg-type]
        payloads = self.wire.payloads(self.accrued, touched_rows)
        seen, steps, loss = self.computed_from, self.accrued_steps, self.accrued_loss  # as sent, if sent again
        sent = self.send(lambda i, s: s.push(payloads[i], seen[i], self.replica, steps, loss, fetch, fetch_rows[i]))
        return sent, fetch

    def collect(self, in_flight: tuple[Sent, bool] | None) -> str | None:
        """Wait for a push's replies (and apply the fetch riding on them); the stop reason, if any."""
        if in_flight is None:
            return None
        sent, fetched = in_flight
        replies = self.replies(sent)
        free_answered_calls()  # the pushed gradient
        if fetched:
            self.wire.apply_fetched(self.params, [r[2] for r in replies])
            self.versions = [r[0] for r in replies]
        return _stop_reason(replies, 1)

    def drop_accrued(self) -> None:
        if not self.direct:  # (direct: the next step's gradient replaces it)
            self.accrued[:] = 0.0
        if self.touched is not None:
            self.touched[:] = False
        self.accrued_steps, self.accrued_loss = 0, 0.0

    def accrue(self, loss: float, grad: np.ndarray, Xb: Any) -> None:
        if self.accrued_steps == 0:  # staleness is counted from the parameters the window began with
            self.computed_from = self.versions
        if self.direct:
            self.accrued = grad
        else:
            self.accrued += grad
        if self.touched is not None:
            self.touched[self.model.touched_rows(Xb)] = True
        self.accrued_steps += 1
        self.accrued_loss += loss

    def step(self, step: int) -> bool:
        """One mini-batch: fetch if due, compute, accrue, push if due; True to stop."""
        epoch, index = self.batches[step]
        if self.need_fetch:
            self.stop = self.fetch(step)
            self.fetches += 1
        if self.stopping(step):
            return True
        batch = self.batch(index)
        computed = self.gradient(self.params, batch, epoch)
        if computed is None:
            self.replies(self.send(lambda i, s: s.request_stop(self.stop)))
            return True
        loss, grad = computed
        self.accrue(loss, grad, batch.X)
        self.examples += index.size
        if self.local_rate:
            self.params -= self.local_rate * grad
        self.steps += 1
        self.need_fetch = self.steps % self.config.options.n_fetch == 0 and step + 1 < self.batches.total
        return self.steps % self.config.options.n_push == 0 and self.push(step)

    def stopping(self, step: int) -> bool:
        """Whether to stop before computing ``step`` (a fetch said why in ``stop``)."""
        return bool(self.stop)

    def push(self, step: int) -> bool:
        """Push the accrued gradient (the next fetch riding on it when due); True to stop."""
        if self.config.options.overlap:  # the previous push's reply, then this push stays in flight
            self.stop = self.collect(self.in_flight)
            self.in_flight = None
            if self.stop:
                return True
            self.in_flight = self.send_push(step + 1 if self.need_fetch else None)
        else:
            self.stop = self.collect(self.send_push(step + 1 if self.need_fetch else None))
        self.pushes += 1
        if self.need_fetch:
            self.fetches += 1
            self.need_fetch = False
        self.drop_accrued()
        return bool(self.stop)

    def reconnect(self) -> None:
        """Go on with the re-created shards: drop the accrued gradient and fetch again."""
        self.take_replacements()
        self.reconnects += 1
        self.drop_accrued()
        self.in_flight, self.need_fetch = None, True

    def finish(self) -> None:
        """Collect the push in flight, then push what has accrued since (unless stopping)."""
        try:
            last = self.collect(self.in_flight)
            self.stop = self.stop or last
            if self.accrued_steps and not self.stop:
                self.collect(self.send_push(None))
                self.pushes += 1
        except _ShardsLost:
            pass  # the run is ending; the last accrued gradient is lost with the shard

    def run(self, first_step: int) -> dict[str, Any]:
        """Train from ``first_step`` until the epochs are done or a shard asks to stop."""
        loop_started = time.perf_counter()
        for step in range(first_step, self.batches.total):
            try:
                if self.step(step):
                    break
            except _ShardsLost:
                self.reconnect()
        self.finish()
        return self.tallies(time.perf_counter() - loop_started, fetches=self.fetches, pushes=self.pushes,
                            first_step=first_step, reconnects=self.reconnects,
                            seconds_waiting=self.seconds_waiting)


def run_replica(replica: int, *, model: Model, data: Dataset, rows: tuple[int, int], bounds: list[tuple[int, int]],
                config: ReplicaConfig, directory: ShardDirectory, first_epoch: int = 0) -> dict[str, Any]:
    """Train until the epochs are done or a shard asks to stop; return the replica's tallies.

    The replica takes the current shard handles from ``directory`` on start and after any
    failed call to a shard (the shard's worker died and the coordinator re-created it):
    the accrued gradient is dropped, the parameters fetched again, and training goes on.
    It resumes at the step the shards have counted for it, so a replica that Dask
    restarts on another worker continues where its applied pushes left off.
    """
    leave_task_slot()
    trainer = DownpourReplica(replica, model=model, data=data, rows=rows, bounds=bounds, config=config,
                              directory=directory)
    return trainer.run(trainer.resume_step(first_epoch))
