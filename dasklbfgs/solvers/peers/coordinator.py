"""The peer methods' coordinator (:mod:`dasklbfgs.solvers.peers`): it places each replica
with its :class:`PeerMailbox` on a named worker (EASGD's center on parameter shards),
launches the replica tasks and runs the shared watch loop (:mod:`dasklbfgs.solvers._replicas`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import distributed
import numpy as np

from dasklbfgs._actors import ActorRef, wait_all
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.optim.updates import UpdateRule, make_rule
from dasklbfgs.solvers._replicas.parameter_shard import ParameterShard
from dasklbfgs.solvers._replicas.run_checks import check_param_shards, checked_rows
from dasklbfgs.solvers._replicas.shard_group import ParameterShardGroup
from dasklbfgs.solvers._replicas.watch import Coordinator, Progress, replies_or_none, step_timing, watch
from dasklbfgs.solvers._replicas.wire import param_bounds
from dasklbfgs.solvers.common_options import global_steps_per_epoch
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.peers.mailbox import PeerMailbox
from dasklbfgs.solvers.peers.options import EASGDOptions, PeerOptions
from dasklbfgs.solvers.peers.replica import REPLICAS, PeerConfig, average_of, run_peer_replica
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers.stats import PeerStats

__all__ = ["PeerPlan", "peer_config", "plan_peers"]

RESTART_WAIT = 30.0  # seconds for the surviving replicas to stop and hand over their states
CLOSE_WAIT = 5.0     # seconds for the mailboxes to take the abort at the end of a run

WORKER_WAIT = 60.0  # seconds to wait for a first worker on a cluster that has none yet


@dataclass(frozen=True)
class PeerPlan:
    """A peer method's checked run: each replica's rows, what every replica task needs to
    know, and the center's parameter shards (EASGD; 0 for the others). :meth:`run` trains
    on the context's cluster."""

    context: RunContext
    rows: list[tuple[int, int]]
    config: PeerConfig
    n_center_shards: int

    def run(self) -> Result:
        return _PeerRun(self).run_to_end()


def plan_peers(context: RunContext) -> PeerPlan:
    """The peer method's own checks and replica configuration (the registered ``plan``)."""
    options = context.options
    assert isinstance(options, PeerOptions)
    rows = checked_rows(context)
    rule = make_rule(options.optimizer, learning_rate=options.learning_rate, **(options.optimizer_options or {}))
    n_center_shards = 0
    if isinstance(options, EASGDOptions):  # the center lives on parameter shards
        n_center_shards = check_param_shards(context.model, options.n_param_shards)
    return PeerPlan(context, rows, peer_config(options, rows, rule), n_center_shards)


def peer_config(options: PeerOptions, rows: list[tuple[int, int]], rule: UpdateRule) -> PeerConfig:
    """What every replica task of the run reads: the options as given, and what they imply
    for this run's replicas."""
    n_replicas = len(rows)
    return PeerConfig(
        options=options, n_replicas=n_replicas, rule=rule.name, hyper=tuple(sorted(rule.hyper.items())),
        total_steps=options.epochs * max(math.ceil((b - a) / options.batch_size) for a, b in rows),
        step_cap=None if options.max_steps is None else math.ceil(options.max_steps / n_replicas),
        alpha=options.moving_rate(n_replicas), torus_shape=options.grid(n_replicas),
        push_sum=options.weighs_replicas,
    )


class _PeerRun(Coordinator):
    """The mailboxes, the center (EASGD) and the replica tasks of one run, and the restarts
    that replace them when a worker holding some of them is lost (:meth:`restart`)."""

    def __init__(self, plan: PeerPlan) -> None:
        super().__init__(plan.context, plan.rows)
        client, model, config, n_center_shards = self.client, self.model, plan.config, plan.n_center_shards
        x_start = self.x_start
        self.config, self.max_restarts = config, self.options.max_restarts
        self.generation = 0                     # restarts so far: part of every new key
        self.restarts: list[dict[str, Any]] = []
        self.traffic_before = {"messages": 0, "bytes": 0}  # through the mailboxes of earlier generations
        self.polled: list[dict[str, Any]] = [{"steps": 0, "loss_sum": 0.0, "recent_loss": math.nan}
                                             for _ in range(config.n_replicas)]  # last mailbox stats seen
        client.wait_for_workers(1, timeout=WORKER_WAIT)
        workers = self.live_workers()
        self.place_mailboxes(workers)
        self.bounds = param_bounds(model.n_params, n_center_shards) if n_center_shards else []
        self.center = ParameterShardGroup(self, "easgd-center", self.bounds, self._center_of(x_start))
        self.center.start([workers[i % len(workers)] for i in range(len(self.bounds))])

    def place_mailboxes(self, workers: list[str]) -> None:
        """A mailbox per replica, spread over ``workers``; each replica will run where its mailbox lives."""
        self.placement = [workers[r % len(workers)] for r in range(self.config.n_replicas)]
        self.mailbox_futures = [self.actor(PeerMailbox, r, key=self.key("peer-mailbox", r, self.generation), worker=w)
                                for r, w in enumerate(self.placement)]
        self.mailboxes = [f.result() for f in self.mailbox_futures]
        self.placement = self.workers_of(self.mailbox_futures, self.placement)  # if a worker left meanwhile

    def _center_of(self, center: np.ndarray) -> Callable[[int], tuple[Any, ...]]:
        """:class:`ParameterShard`'s arguments for EASGD's center shard ``i`` holding its slice
        of ``center`` (its rule adds what the replicas send)."""
        def arguments(i: int) -> tuple[Any, ...]:
            a, b = self.bounds[i]
            return (i, a, b, center[a:b], "sgd", {"learning_rate": 1.0})
        return arguments

    def start_replicas(self, resumes: list[dict[str, Any]] | None = None) -> None:
        mailboxes = [ActorRef(PeerMailbox, w, m.key) for m, w in zip(self.mailboxes, self.placement)]
        # the center's shards were asked for named workers (__init__, restart): placed on named ones
        center = [ActorRef(ParameterShard, w, sh.key)
                  for sh, w in zip(self.center.handles, cast("list[str]", self.center.placed))]
        for r, worker in enumerate(self.placement):
            # a replica uses its own mailbox in-process: it must run where the mailbox lives
            self.launch(r, run_peer_replica, worker, allow_other_workers=False, generation=self.generation,
                        config=self.config, mailboxes=mailboxes, x0=self.x_start, center=center or None,
                        bounds=self.bounds or None, resume=None if resumes is None else resumes[r])

    # -- losing a worker --------------------------------------------------------------------

    def lost(self, error: BaseException | None = None) -> None:
        """Restart the replicas if a mailbox or center shard was lost (after ``error`` from a
        call to one, waiting for the scheduler to say so); re-raise any other ``error``."""
        actors = self.mailbox_futures + self.center.futures
        if error is not None and not self.actor_failed(actors, error):
            raise error
        if any(f.status == "error" for f in actors):
            self.restart()

    def restart(self, leaving: frozenset[str] = frozenset()) -> None:
        """Go on without the mailboxes and center shards lost with their worker, or off the
        workers ``leaving`` (their retirement was refused: Dask cannot move actors): stop
        every surviving replica and take its state, give each lost replica the state its
        method rebuilds (:meth:`PeerReplica.resumed`), and relaunch all replicas on new
        mailboxes spread over the live workers, each at the step it reached. A loss fails
        with :class:`WorkerLostError` after ``max_restarts`` restarts or with no worker left."""
        started = time.perf_counter()
        lost = [r for r, f in enumerate(self.mailbox_futures) if f.status == "error"]
        lost_shards = [i for i, f in enumerate(self.center.futures) if f.status == "error"]
        what = " and ".join(part for part in (lost and f"the mailboxes of replica(s) {lost}",
                                              lost_shards and f"center shard(s) {lost_shards}") if part)
        losses = sum(1 for entry in self.restarts if entry["replicas"] or entry["center_shards"])
        if what and losses >= self.max_restarts:
            raise WorkerLostError(
                f"{self.method}: {what} were lost with their worker after {losses} restart(s) of the "
                f"replicas, and max_restarts is {self.max_restarts}: raise max_restarts to go on after more losses"
            )
        workers = [w for w in self.live_workers() if w not in leaving]
        if not workers and not what:
            return  # nowhere to move to: the replicas stay, and the workers cannot retire
        if not workers:
            raise WorkerLostError(f"{self.method}: {what} were lost and no worker is left to restart the replicas on")
        entries = self.stop_replicas(lost)
        old = [*self.replica_futures.values(), *self.mailbox_futures]
        self.generation += 1
        center = self.restore_center(lost_shards, entries, workers, leaving) if len(self.center) else None
        resumes = REPLICAS[self.method].resumed(entries, center)
        self.place_mailboxes(workers)
        self.release(old)
        self.start_replicas(resumes)
        if self.stop_reason is not None:
            self.request_stop(self.stop_reason)
        self.restarts.append({"replicas": lost, "center_shards": lost_shards, "moved_off": sorted(leaving),
                              "step": sum(e["steps"] for e in entries), "seconds": time.perf_counter() - started})

    def stop_replicas(self, lost: list[int]) -> list[dict[str, Any]]:
        """Abort the run on the surviving mailboxes and collect each replica's state: a
        survivor's final tallies, or for a replica lost with its worker (or not back within
        ``RESTART_WAIT``) the counters last polled from its mailbox."""
        alive = [r for r in range(self.config.n_replicas) if r not in lost]
        replies_or_none([self.mailboxes[r].abort() for r in alive], RESTART_WAIT)
        with contextlib.suppress(TimeoutError):
            distributed.wait([self.replica_futures[r] for r in alive], timeout=RESTART_WAIT)
        stats = replies_or_none([self.mailboxes[r].stats() for r in alive], RESTART_WAIT)
        for mailbox in [s for s in stats if s is not None] + [self.polled[r] for r in lost]:
            self.traffic_before["messages"] += mailbox.get("messages_in", 0) + mailbox.get("reads", 0)
            self.traffic_before["bytes"] += mailbox.get("bytes_in", 0) + mailbox.get("bytes_out", 0)
        entries = []
        for r, future in sorted(self.replica_futures.items()):
            if r in alive and future.status in ("finished", "error"):
                tallies = future.result()  # a replica's own error (not a lost peer) stops the run
                entries.append({k: v for k, v in tallies.items() if k != "x"})
            else:
                entries.append({"replica": r, **{k: self.polled[r][k] for k in ("steps", "loss_sum", "recent_loss")}})
        return entries

    def restore_center(self, lost_shards: list[int], entries: list[dict[str, Any]], workers: list[str],
                       leaving: frozenset[str]) -> np.ndarray:
        """EASGD's center to restart from: the surviving shards' slices, and the lost shards
        re-created on ``workers`` from the surviving replicas' average (the point the
        replicas and the center are drawn to); shards on workers ``leaving`` move there."""
        kept = [i for i in range(len(self.center)) if i not in lost_shards]
        fetched = replies_or_none([self.center.handles[i].fetch() for i in kept], RESTART_WAIT)
        lost_shards = lost_shards + [i for i, reply in zip(kept, fetched) if reply is None]
        center = np.empty_like(self.x_start)
        for i, reply in zip(kept, fetched):
            if reply is not None:
                a, b = self.bounds[i]
                center[a:b] = reply[0]
        if lost_shards:
            center_of_replicas = average_of([e for e in entries if "params" in e])
            for i in lost_shards:
                a, b = self.bounds[i]
                center[a:b] = center_of_replicas[a:b]
        placed_anew = sorted(set(lost_shards) | {i for i in kept if self.center.placed[i] in leaving})
        self.center.replace(placed_anew, {i: workers[i % len(workers)] for i in placed_anew}, self._center_of(center))
        return center

    # -- what the watch loop asks -----------------------------------------------------------

    def poll(self) -> Progress:
        self.lost()
        leaving = self.refused_retirements() & {*self.placement, *self.center.placed}
        if leaving:  # move off, so that the next attempt to retire them succeeds
            self.restart(leaving)
        finished = self.replicas_finished()
        stats = self.polled = self.mailbox_stats()
        steps = sum(s["steps"] for s in stats)
        if self.max_steps is not None and steps >= self.max_steps:
            self.stop(f"max_steps ({self.max_steps}) reached")
        reason = self.stop_reason or next((s["stop_reason"] for s in stats if s["stop_reason"]), None)
        event = {"replicas_running": self.running(), "steps_per_replica": [s["steps"] for s in stats]}
        return Progress(steps, sum(s["loss_sum"] for s in stats), sum(s["loss_count"] for s in stats), reason,
                        finished, event)

    def _calls(self, make_calls: Callable[[], list[Any]]) -> list[Any]:
        """The replies of calls to the mailboxes or the center; after a lost one (also while a
        reply is late: :meth:`Coordinator.replies`) the replicas are restarted (:meth:`lost`)
        and the calls made again to the new actors."""
        while True:
            generation = self.generation
            try:
                # mypy cannot infer a lambda whose parameter has a default against Callable[[], None]
                return self.replies(make_calls, check=lambda g=generation: self._same_actors(g))  # type: ignore[misc]
            except _Restarted:
                continue
            except Exception as exc:  # noqa: BLE001 - a lost actor restarts the replicas, anything else re-raised
                self.lost(exc)
                if generation == self.generation:
                    raise

    def _same_actors(self, generation: int) -> None:
        """While a reply is late: restart if an actor was lost; if the replicas were
        restarted (now or meanwhile), the late call's actor is gone."""
        self.lost()
        if generation != self.generation:
            raise _Restarted

    def mailbox_stats(self) -> list[dict[str, Any]]:
        return self._calls(lambda: [m.stats() for m in self.mailboxes])

    def published(self) -> list[np.ndarray]:
        peeked = self._calls(lambda: [m.peek() for m in self.mailboxes])
        return [x if x is not None else self.x_start for x, _ in peeked]

    def center_params(self) -> np.ndarray:
        return np.concatenate([reply[0] for reply in self._calls(lambda: [sh.fetch() for sh in self.center.handles])])

    def current_params(self) -> np.ndarray:
        return REPLICAS[self.method].returned(self, None)[0]

    def checkpoint(self, steps: int) -> None:  # never asked: the peer methods take no checkpoint_every
        raise NotImplementedError

    def request_stop(self, reason: str) -> None:
        self._calls(lambda: [m.request_stop(reason) for m in self.mailboxes])

    # -- the run ----------------------------------------------------------------------------

    def train(self) -> Result:
        self.context.restart_clock()  # training starts: the mailboxes and the center are up
        started = self.started = self.context.started
        self.measure_start_loss()
        self.start_replicas()
        watched = watch(self, 0)
        tallies = wait_all(list(self.replica_futures.values()))
        mailbox_stats = self.mailbox_stats()
        wall = time.perf_counter() - started
        replicas = [{"replica": t["replica"], "x": t["x"], "steps": t["steps"], "recent_loss": t["recent_loss"]}
                    for t in tallies]
        for entry, t in zip(replicas, tallies):
            if self.config.push_sum:
                entry["weight"] = t["weight"]
            if self.eval_set is not None:
                entry.update(self.context.score(entry["x"]))
        x, chosen = REPLICAS[self.method].returned(self, replicas)
        steps = sum(t["steps"] for t in tallies)
        center_stats = wait_all([sh.stats() for sh in self.center.handles])
        stats = PeerStats({
            "method": self.method,
            "wall_seconds": wall,
            "global_steps": steps,
            "epochs": steps / global_steps_per_epoch(self.data.n_samples, len(self.rows), self.options.batch_size),
            "updates_per_second": steps / wall,
            "examples_per_second": sum(t["examples"] for t in tallies) / wall,
            "steps_per_replica": [t["steps"] for t in tallies],
            "exchanges_per_replica": [t["exchanges"] for t in tallies],
            "received_per_replica": [t["received"] for t in tallies],
            # the arrays each replica's messages carried: compact sums and gradients on sparse rows
            "bytes_sent_per_replica": [t["bytes_sent"] for t in tallies],
            "messages_between_replicas": self.traffic_before["messages"] + sum(
                s["messages_in"] + s["reads"] for s in mailbox_stats),
            "bytes_between_replicas": self.traffic_before["bytes"] + sum(
                s["bytes_in"] + s["bytes_out"] for s in mailbox_stats),
            # every exchange touches each center shard once: any shard's count is the total
            "center_exchanges": max((s["version"] for s in center_stats), default=0),
            "center_bytes_in": sum(s["bytes_in"] for s in center_stats),
            "chosen_replica": chosen,
            "replica_restarts": self.restarts,
            **step_timing(tallies),
        })
        return self.result(x, steps, watched, stats, replicas=replicas)

    def close(self) -> None:
        """Wake replicas still waiting for a peer, cancel them and drop the actors."""
        # a mailbox whose worker died too has nothing waiting on it
        replies_or_none([m.abort() for m, f in zip(self.mailboxes, self.mailbox_futures) if f.status != "error"],
                         CLOSE_WAIT)
        self.release([*self.replica_futures.values(), *self.mailbox_futures, *self.center.close()])
        self.mailboxes = []


class _Restarted(Exception):
    """The replicas were restarted while the coordinator waited on a call to an old actor."""
