"""``ParameterShard``: a Dask actor that owns one contiguous slice of the parameters.

Each shard stores its slice and the optimizer state for it, and applies the update rule
itself when a replica pushes an accrued gradient (docs/algorithms.md §3). Shards never talk to
each other. A shard of a model with a row table also takes row-sparse pushes and fetches
(:mod:`dasklbfgs.solvers._replicas.wire`) and updates only the rows a push carries, which is
exact for rules where a zero gradient is a zero step (Adagrad, SGD, FTRL). A shard of a model
with an l1 term runs FTRL-Proximal with that term as its threshold, growing with the steps
accrued (docs/algorithms.md §9). There ``z`` and ``n`` and the step count are the truth and
the parameters are their closed form, computed when read (:meth:`ParameterShard._current`):
a zero gradient leaves ``z`` and ``n`` alone, so rows a push does not carry only move through
the threshold, and row-sparse pushes and fetches stay exact. The same shards hold
EASGD's center variable (:meth:`ParameterShard.elastic`). Methods are ``async`` so that
several shards hosted by one worker interleave on its event loop instead of queueing behind
one actor thread (Dask runs every synchronous actor method of a worker on one thread).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from dasklbfgs.optim.collective import elastic_difference
from dasklbfgs.optim.updates import ftrl_step, ftrl_weights, make_rule
from dasklbfgs.solvers._replicas.wire import ShardLayout, payload_nbytes

__all__ = ["ParameterShard", "ShardMoved"]

_WHOLE = slice(None)  # the whole slice, as an index

_STATS = ("index", "version", "steps", "loss_sum", "loss_count", "first_loss", "bytes_in", "bytes_out",
          "dense_bytes_in", "dense_bytes_out", "stop_reason")
# What a handover carries besides a checkpoint's state: the run's counters and stop condition.
_CARRIED = ("loss_sum", "loss_count", "first_loss", "staleness", "pushes_by_replica", "bytes_in", "bytes_out",
            "dense_bytes_in", "dense_bytes_out", "stop_reason", "max_steps")


class ShardMoved(Exception):
    """The shard was handed over to another worker: call its successor (the run's directory
    publishes it). A call refused so was not applied here."""


class ParameterShard:
    """Slice ``[start, stop)`` of the flat parameter vector and its optimizer state."""

    index: int = 0
    start: int = 0
    stop: int = 0

    def __init__(self, index: int, start: int, stop: int, values: np.ndarray, rule: str,
                 hyper: dict[str, Any], table: Any = None, l1: np.ndarray | None = None) -> None:
        self.index, self.start, self.stop = index, start, stop
        # The model's per-coordinate l1 weights on this slice (0 on intercepts); FTRL only.
        self.l1 = None if l1 is None else np.array(l1, dtype=np.float64)
        self.layout = ShardLayout(start, stop, table)
        self.rule_name, self.hyper = rule, dict(hyper)
        self._rule = make_rule(rule, **hyper)
        self.values = np.array(values, dtype=np.float64)
        self.state = self._rule.init(self.values)
        self.version = 0          # pushes applied
        self.steps = 0            # mini-batch steps those pushes accrued
        self.loss_sum = 0.0       # replica-reported mini-batch losses, summed
        self.loss_count = 0
        self.first_loss: float | None = None  # the mean loss of the first push: at the run's start
        self.staleness: Counter[int] = Counter()
        self.pushes_by_replica: Counter[int] = Counter()
        self.steps_by_replica: Counter[int] = Counter()  # where a restarted replica resumes
        self.bytes_in = self.bytes_out = 0
        self.dense_bytes_in = self.dense_bytes_out = 0  # what the same traffic costs as whole slices
        self.stop_reason: str | None = None
        self.max_steps: int | None = None
        self.moved = False

    def _serving(self) -> None:
        if self.moved:
            raise ShardMoved(f"parameter shard {self.index} was handed over to another worker")

    def _current(self, where: Any = _WHOLE) -> np.ndarray:
        """The parameters at ``where`` (local indices or a slice) now; every read goes through here.

        With the model's l1 they are FTRL's closed form of ``z, n`` at the threshold ``S l1``
        for the ``S`` steps accrued so far, on every row, also rows no push has carried since
        their ``z, n`` last changed. Before the first push they are the start values.
        """
        if self.l1 is None or self.steps == 0:
            return self.values[where]
        state = {k: v[where] for k, v in self.state.items()}
        return ftrl_weights(state, **{**self.hyper, "l1": self.l1[where] * self.steps})

    def _values(self, dtype: Any, rows: np.ndarray | None = None) -> Any:
        if rows is None:
            out: Any = self._current().astype(dtype, copy=True)
        else:
            out = self.layout.gather(self._current, rows, dtype)
        self.bytes_out += payload_nbytes(out)
        self.dense_bytes_out += self.values.size * np.dtype(dtype).itemsize
        return out

    async def fetch(self, dtype: str = "float64", rows: np.ndarray | None = None) -> tuple[Any, int, str | None]:
        """The current slice (as ``dtype`` on the wire), its version and, if the run is
        stopping, why. With ``rows`` (local table row ids): only those rows and the dense
        rest, as ``(rows, values, dense)``."""
        self._serving()
        return self._values(dtype, rows), self.version, self.stop_reason

    async def push(self, gradient: Any, seen_version: int, replica: int, steps: int,
                   loss_sum: float, fetch: bool = False,
                   fetch_rows: np.ndarray | None = None) -> tuple[int, str | None, Any]:
        """Apply one accrued gradient; ``seen_version`` is the version it was computed from.

        ``gradient`` is the whole slice, or ``(rows, values, dense)`` carrying only some
        table rows (the others' gradient is zero). With ``fetch=True`` the reply also
        carries the updated slice (or, with ``fetch_rows``, those rows and the dense rest)
        in the gradient's dtype: a replica due to fetch right after pushing saves a round
        trip, and sees exactly what a separate fetch would have returned.
        """
        self._serving()
        self.bytes_in += payload_nbytes(gradient)
        if isinstance(gradient, tuple):
            rows, table, dense = gradient
            wire_dtype = table.dtype
            flat = np.concatenate([table.ravel(), dense]).astype(np.float64, copy=False)
            for where, part in self.layout.pieces(rows):  # rows by index, dense ranges as slices
                self._update(where, flat[part], steps)
        else:
            wire_dtype = gradient.dtype
            self._update(_WHOLE, gradient, steps)
        self.dense_bytes_in += self.values.size * np.dtype(wire_dtype).itemsize
        # A shard restored from a checkpoint has an older version than replicas saw: lag 0.
        self.staleness[max(self.version - seen_version, 0)] += 1
        self.pushes_by_replica[replica] += 1
        self.steps_by_replica[replica] += steps
        self.version += 1
        self.steps += steps
        self.loss_sum += loss_sum
        self.loss_count += steps
        if self.first_loss is None and steps:
            self.first_loss = loss_sum / steps
        if self.max_steps is not None and self.steps >= self.max_steps and self.stop_reason is None:
            self.stop_reason = f"max_steps ({self.max_steps}) reached"
        values = self._values(wire_dtype, fetch_rows) if fetch else None
        return self.version, self.stop_reason, values

    def _update(self, where: Any, gradient: np.ndarray, steps: int) -> None:
        """Apply one push's ``gradient`` (of ``steps`` steps; float64, or float32 off the wire)
        to the parameters at ``where``: a whole slice in place where the rule can (no
        slice-long temporaries, not even a float64 copy of a float32 gradient; one pass)."""
        if where is _WHOLE and self.l1 is None and self._rule.apply is not None:
            self._rule.apply(gradient, self.state, self.values)
            return
        gradient = gradient.astype(np.float64, copy=False)
        state = {k: v[where] for k, v in self.state.items()}
        if self.l1 is None:
            delta, state = self._rule.update(gradient, state)
            self.values[where] += delta
        else:
            state = self._ftrl_with_model_l1(where, gradient, state, steps, self.l1)
        if where is _WHOLE:
            self.state = state
        else:
            for k, v in state.items():
                self.state[k][where] = v

    def _ftrl_with_model_l1(self, where: Any, gradient: np.ndarray, state: dict[str, np.ndarray],
                            steps: int, l1: np.ndarray) -> dict[str, np.ndarray]:
        """FTRL-Proximal's new ``z, n`` at ``where``, whose threshold is the model's l1 (``l1``,
        this shard's weights) times the mini-batch steps whose gradients ``z`` has summed (this
        push's included).

        ``z`` holds about ``S`` times the mean-loss gradient after ``S`` steps, so the l1 of
        the same sum is ``S l1``: the fixed point then satisfies the model's optimality
        conditions (``|grad| <= l1`` where ``w = 0``). A constant threshold would fade
        against the growing ``z``. The gradient was taken at the closed form before the push
        (sigma's ``played``); the parameters are that closed form, never incremented, so
        ``|z| <= S l1`` gives exact zeros, and :meth:`_current` computes them when read.
        """
        threshold = l1[where] * (self.steps + steps)
        _, state = ftrl_step(gradient, state, self._current(where), **{**self.hyper, "l1": threshold})
        return state

    async def elastic(self, x: np.ndarray, alpha: float) -> np.ndarray:
        """EASGD's exchange with the center (docs/algorithms.md §6), atomic on this slice:
        ``d = alpha (x_i - x~)``; the center adds ``d`` and the replica subtracts it."""
        self._serving()
        x = np.asarray(x, dtype=np.float64)
        self.bytes_in += x.nbytes
        d = elastic_difference(x, self.values, alpha)
        self.values += d
        self.version += 1
        self.bytes_out += d.nbytes
        self.dense_bytes_in += x.nbytes
        self.dense_bytes_out += d.nbytes
        return d

    async def request_stop(self, reason: str) -> None:
        """Ask every replica to stop at its next fetch or push (first reason wins)."""
        self._serving()
        if self.stop_reason is None:
            self.stop_reason = reason

    async def stop_at(self, max_steps: int) -> None:
        """Stop the run once the pushes applied here have accrued ``max_steps`` steps.

        Checked on every push, so replicas overshoot by at most the steps already in flight.
        """
        self._serving()
        self.max_steps = int(max_steps)

    async def stats(self) -> dict[str, Any]:
        self._serving()
        counters = {name: dict(getattr(self, name)) for name in ("staleness", "pushes_by_replica", "steps_by_replica")}
        return {**{name: getattr(self, name) for name in _STATS}, **counters}

    async def get_state(self) -> dict[str, Any]:
        """Everything a checkpoint needs to re-create this shard."""
        self._serving()
        return {
            "index": self.index, "start": self.start, "stop": self.stop,
            "values": np.array(self._current()), "optimizer_state": {k: v.copy() for k, v in self.state.items()},
            "version": self.version, "steps": self.steps,
            "steps_by_replica": {str(k): v for k, v in self.steps_by_replica.items()},
        }

    async def hand_over(self) -> dict[str, Any]:
        """This shard's state, counters included, for its successor on another worker; every
        later call is refused with :class:`ShardMoved` (so no push is applied here after the
        state was taken: the replica sends it to the successor instead)."""
        self._serving()
        state = await self.get_state()
        self.moved = True
        return {**state, "carried": {name: getattr(self, name) for name in _CARRIED}}

    async def set_state(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's state, or a handed-over one (:meth:`hand_over`)."""
        self._serving()
        if (state["start"], state["stop"]) != (self.start, self.stop):
            raise ValueError(
                f"state for slice [{state['start']}, {state['stop']}) given to shard "
                f"{self.index} owning [{self.start}, {self.stop})"
            )
        self.values = np.array(state["values"], dtype=np.float64)
        self.state = {k: np.array(v, dtype=np.float64) for k, v in state["optimizer_state"].items()}
        self.version, self.steps = int(state["version"]), int(state["steps"])
        self.steps_by_replica = Counter({int(k): int(v) for k, v in state.get("steps_by_replica", {}).items()})
        for name, value in state.get("carried", {}).items():
            setattr(self, name, value)
