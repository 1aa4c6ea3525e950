"""A group of parameter-shard actors: Downpour's parameter servers and EASGD's center.

A :class:`ParameterShardGroup` owns one :class:`~.parameter_shard.ParameterShard` actor per
contiguous slice of the flat parameter vector and does what a run does with them: create
them on chosen workers (:meth:`~ParameterShardGroup.start`), call every shard at once
(:meth:`~ParameterShardGroup.call`), read the vector out (:meth:`~ParameterShardGroup.fetch`),
re-create shards lost with their worker from saved states
(:meth:`~ParameterShardGroup.recover`), move shards off a worker whose retirement the
scheduler refused (:meth:`~ParameterShardGroup.hand_over`: Dask cannot move actors) and
release them all (:meth:`~ParameterShardGroup.close`). Each re-creation is a new
generation, published in a :class:`~.directory.ShardDirectory` when the group has one (the
replicas look the current shards up there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed import Future

from dasklbfgs.errors import WorkerLostError
from dasklbfgs.solvers._replicas.directory import ShardDirectory
from dasklbfgs.solvers._replicas.parameter_shard import ParameterShard

if TYPE_CHECKING:
    from dasklbfgs.solvers._replicas.watch import Coordinator

__all__ = ["HANDOVER_GRACE_SECONDS", "ParameterShardGroup"]

# How long a handed-over shard stays (refusing calls, which replicas then send to its
# successor) before it is released: replicas that call it later see a lost shard instead.
HANDOVER_GRACE_SECONDS = 2.0
CALL_ATTEMPTS = 3  # calls to every shard, re-creating lost shards before each


class ParameterShardGroup:
    """The parameter-shard actors of one run.

    ``arguments(i)`` gives :class:`ParameterShard`'s arguments for shard ``i`` (index,
    bounds, starting values, update rule, ...); ``name`` keys the actors
    (:meth:`Coordinator.key`). ``restore()`` returns the states to re-create lost shards
    from and the global step they hold (None: a lost shard ends the run), and ``on_new(shard)``
    brings a re-created shard up to date with the run (its step limit, a stop already asked).
    """

    def __init__(self, host: Coordinator, name: str, bounds: list[tuple[int, int]],
                 arguments: Callable[[int], tuple[Any, ...]], *, directory: ShardDirectory | None = None,
                 restore: Callable[[list[int]], tuple[list[dict[str, Any]], int]] | None = None,
                 on_new: Callable[[Any], None] | None = None) -> None:
        self.host, self.name, self.bounds, self.arguments = host, name, bounds, arguments
        self.directory, self.restore, self.on_new = directory, restore, on_new
        self.generation = 0
        self.futures: list[Future] = []
        self.handles: list[Any] = []
        self.placed: list[str | None] = []  # the worker each shard was created on
        self.recoveries: list[dict[str, Any]] = []
        self.handovers: list[dict[str, Any]] = []
        self.leaving: set[str] = set()          # workers someone tried to retire: no shard goes there
        self.handed_over: list[tuple[float, Future]] = []  # (when, old shard) waiting for release

    def __len__(self) -> int:
        return len(self.bounds)

    def start(self, homes: list[str | None], states: list[dict[str, Any]] | None = None) -> list[str | None]:
        """Create every shard, shard ``i`` on ``homes[i]`` (another worker if that one left;
        None: any), with ``states`` if given; the workers they landed on."""
        self.futures = [self._new(i, worker) for i, worker in enumerate(homes)]
        self.handles = [f.result() for f in self.futures]
        if states is not None:
            for shard, state in zip(self.handles, states):
                shard.set_state(state).result()
        self._publish()
        self.placed = self.host.workers_of(self.futures, homes) if self.futures else []
        return self.placed

    def replace(self, indices: list[int], homes: dict[int, str | None],
                arguments: Callable[[int], tuple[Any, ...]]) -> None:
        """Create shards ``indices`` anew (the next generation) on ``homes[i]`` from
        ``arguments`` (new starting values), and release the ones they replace."""
        old = [self.futures[i] for i in indices]
        self.generation += 1
        self.arguments = arguments
        for i in indices:
            self.futures[i], self.placed[i] = self._new(i, homes[i]), homes[i]
        self.handles = [f.result() for f in self.futures]
        self.placed = self.host.workers_of(self.futures, self.placed)
        self._publish()
        self.host.release(old)

    def _new(self, i: int, worker: str | None) -> Future:
        return self.host.actor(ParameterShard, *self.arguments(i), key=self.host.key(self.name, i, self.generation),
                               worker=worker)

    def _publish(self) -> None:
        if self.directory is not None:
            self.directory.publish(self.futures, self.generation)

    # -- calls ------------------------------------------------------------------------------

    def call(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` on every shard in parallel, re-creating lost shards first (and when
        one is lost while its reply is late)."""
        for _ in range(CALL_ATTEMPTS):
            self.recover()
            try:
                return self.host.replies(lambda: [getattr(s, method)(*args) for s in self.handles],
                                         check=self.raise_if_lost)
            except Exception as exc:
                if not self.host.actor_failed(self.futures, exc):
                    raise
        raise WorkerLostError(f"parameter shards kept failing during {method!r}")

    def fetch(self) -> np.ndarray:
        """The flat vector the shards hold, in order."""
        return np.concatenate([reply[0] for reply in self.call("fetch")])

    def raise_if_lost(self, among: list[int] | None = None) -> None:
        lost = [i for i in among or range(len(self.futures)) if self.futures[i].status == "error"]
        if lost:
            raise WorkerLostError(f"parameter shard(s) {lost} were lost with their worker")

    def workers(self) -> dict[int, str]:
        """Where each shard not lost lives."""
        alive = [f for f in self.futures if f.status == "finished"]  # who_has refuses cancelled ones
        where = self.host.client.who_has(alive) if alive else {}
        return {i: next(iter(where[f.key])) for i, f in enumerate(self.futures) if where.get(f.key)}

    # -- recovery and hand-over ---------------------------------------------------------------

    def recover(self) -> None:
        """Re-create every shard whose worker died, from ``restore()``'s states, on a live worker."""
        lost = [i for i, f in enumerate(self.futures) if f.status == "error"]
        if not lost:
            return
        started = time.perf_counter()
        if self.restore is None:
            raise WorkerLostError(f"parameter shard(s) {lost} were lost with their worker")
        states, restored_step = self.restore(lost)
        live = self.host.live_workers()
        if not live:
            raise WorkerLostError(f"parameter shard(s) {lost} were lost and no worker is left to re-create them on")
        gone = [self.futures[i] for i in lost]
        self._replace(lost, states, live)
        self.host.release(gone)  # after the new generation is published: a lookup never finds a forgotten key
        self.recoveries.append({"shards": lost, "restored_step": restored_step, "time": started - self.host.started,
                                "seconds": time.perf_counter() - started})

    def _replace(self, indices: list[int], states: list[dict[str, Any]], live: list[str]) -> list[str]:
        """Re-create shards ``indices`` with ``states`` on live workers (those not leaving, and
        without a shard if there are such), publish them as the next generation; their workers."""
        staying = [w for w in live if w not in self.leaving] or live
        holding = set(self.workers().values())
        candidates = [w for w in staying if w not in holding] or staying
        self.generation += 1
        placed = []
        for n, i in enumerate(indices):
            placed.append(candidates[n % len(candidates)])
            future = self._new(i, placed[-1])
            shard = future.result()
            shard.set_state(states[i]).result()
            if self.on_new is not None:
                self.on_new(shard)
            self.futures[i], self.handles[i], self.placed[i] = future, shard, placed[-1]
        self._publish()
        return placed

    def hand_over(self) -> None:
        """Move the shards of workers whose retirement was refused to other live workers, as
        they are now (no step lost, no checkpoint needed), and release handed-over shards
        after a grace period so that a repeated retirement succeeds."""
        host = self.host
        now = time.monotonic()
        due = [(when, f) for when, f in self.handed_over if now - when >= HANDOVER_GRACE_SECONDS]
        if due:
            host.release([f for _, f in due])
            self.handed_over = self.handed_over[len(due):]  # kept in the order they were handed over
        self.leaving.update(host.refused_retirements())
        if not self.leaving:
            return
        moving = sorted(i for i, w in self.workers().items() if w in self.leaving)
        live = [w for w in host.live_workers() if w not in self.leaving]
        if not moving or not live:  # with no worker to move to, the shard stays (and the worker too)
            return
        started = time.perf_counter()
        states: list[dict[str, Any]] = [{}] * len(self.handles)
        for i in moving:
            try:
                states[i] = host.replies(partial(self._hand_over_call, i), check=partial(self.raise_if_lost, [i]))[0]
            except Exception as exc:  # lost on its way out: recover() restores it
                if not host.actor_failed([self.futures[i]], exc):
                    raise
        moving = [i for i in moving if states[i]]
        if not moving:
            return
        old = [self.futures[i] for i in moving]
        placed = self._replace(moving, states, live)
        self.handed_over += [(time.monotonic(), f) for f in old]
        self.handovers.append({"shards": moving, "to": placed, "steps": [int(states[i]["steps"]) for i in moving],
                               "time": started - host.started, "seconds": time.perf_counter() - started})

    def _hand_over_call(self, i: int) -> list[Any]:
        return [self.handles[i].hand_over()]

    def close(self) -> list[Future]:
        """The group's futures (current and handed over) for the run to release, and forget them."""
        futures = [*self.futures, *(f for _, f in self.handed_over)]
        self.futures, self.handles, self.handed_over = [], [], []
        if self.directory is not None:
            self.directory.delete()
        return futures
