"""The peer methods' coordinator (:mod:`dasklbfgs.solvers.peers`): it places each replica
with its :class:`PeerMailbox` on a named worker (EASGD's center on parameter shards),
launches the replica tasks and runs the shared watch loop (:mod:`dasklbfgs.solvers._replicas`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import Client, Future
from scipy.optimize import OptimizeResult

from dasklbfgs.cluster import resolve_client
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.models.base import Model
from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.optim.updates import make_rule
from dasklbfgs.solvers._replicas.local_actors import wait_all
from dasklbfgs.solvers._replicas.run_checks import ReplicaRun, check_param_shards, check_replica_run
from dasklbfgs.solvers._replicas.watch import Coordinator, Progress, step_timing, watch
from dasklbfgs.solvers.downpour.shard import ParameterShard
from dasklbfgs.solvers.downpour.wire import param_bounds
from dasklbfgs.solvers.peers.mailbox import PeerMailbox
from dasklbfgs.solvers.peers.options import EASGDOptions, GossipOptions, NeighbourOptions, SyncOptions
from dasklbfgs.solvers.peers.replica import REPLICAS, PeerConfig, run_peer_replica

__all__ = ["peer_config", "run_peers"]

PeerOptions = SyncOptions | EASGDOptions | GossipOptions | NeighbourOptions

WORKER_WAIT = 60.0  # seconds to wait for a first worker on a cluster that has none yet


def run_peers(model: Model, data: Any, options: PeerOptions, *, client: Client | None = None, x0: Any = None,
              callback: Callable[[OptimizeResult], Any] | None = None, eval_data: Any = None) -> OptimizeResult:
    """Train ``model`` with the peer method ``options.solver`` (the registered ``run``)."""
    checked = check_replica_run(model, data, options, eval_data)
    rule = make_rule(options.optimizer, learning_rate=options.learning_rate, **(options.optimizer_options or {}))
    x_start = model.init_params(None) if x0 is None else model.check_params(x0, "x0")
    config = peer_config(options, checked, rule)
    n_center_shards = 0
    if isinstance(options, EASGDOptions):  # the center lives on parameter shards
        n_center_shards = check_param_shards(model, options.n_param_shards)
    with resolve_client(client) as active:
        run = _PeerRun(active, model, checked, config, x_start, n_center_shards, options)
        try:
            return run.train(callback)
        finally:
            run.close()


def peer_config(options: PeerOptions, checked: ReplicaRun, rule: Any) -> PeerConfig:
    """What every replica task of the run needs to know, from the checked options."""
    n_replicas, batch_size = len(checked.rows), options.batch_size
    return PeerConfig(
        method=options.solver, n_replicas=n_replicas, batch_size=batch_size, epochs=options.epochs,
        seed=options.seed, rule=rule.name, hyper=tuple(sorted(rule.hyper.items())),
        total_steps=options.epochs * max(math.ceil((b - a) / batch_size) for a, b in checked.rows),
        step_cap=None if options.max_steps is None else math.ceil(options.max_steps / n_replicas),
        **options.replica_fields(n_replicas),
    )


class _PeerRun(Coordinator):
    """The mailboxes, the center (EASGD) and the replica tasks of one run."""

    def __init__(self, client: Client, model: Model, checked: ReplicaRun, config: PeerConfig, x_start: np.ndarray,
                 n_center_shards: int, options: PeerOptions) -> None:
        super().__init__(client, model, checked, options)
        self.config, self.x_start = config, x_start
        # a replica must run where its mailbox lives: place both on a named worker
        client.wait_for_workers(1, timeout=WORKER_WAIT)
        self.workers = self.live_workers()
        self.placement = [self.workers[r % len(self.workers)] for r in range(config.n_replicas)]
        self.mailbox_futures: list[Future] = [
            self.actor(PeerMailbox, r, key=f"peer-mailbox-{self.token}-{r}", worker=w)
            for r, w in enumerate(self.placement)
        ]
        self.mailboxes = [f.result() for f in self.mailbox_futures]
        self.bounds = param_bounds(model.n_params, n_center_shards) if n_center_shards else []
        self.center_futures: list[Future] = [
            self.actor(ParameterShard, i, a, b, x_start[a:b], "sgd", {"learning_rate": 1.0},
                       key=f"easgd-center-{self.token}-{i}", worker=self.workers[i % len(self.workers)])
            for i, (a, b) in enumerate(self.bounds)
        ]
        self.center = [f.result() for f in self.center_futures]

    # -- what the watch loop asks -----------------------------------------------------------

    def lost(self, error: BaseException | None = None) -> None:
        """Stop with WorkerLostError if a mailbox or center shard was lost (after ``error``
        from a call to one, waiting for the scheduler to say so)."""
        if error is not None and not self.actor_failed(self.mailbox_futures + self.center_futures, error):
            raise error
        if any(f.status == "error" for f in self.mailbox_futures + self.center_futures):
            raise WorkerLostError(
                f"a worker holding {self.method} replicas' mailboxes or center shards died; "
                f"{self.method} keeps no checkpoints to restart from, so the run stops "
                "(Downpour survives worker loss: see downpour_sgd's checkpoint_every)"
            )

    def poll(self) -> Progress:
        self.lost()
        finished = self.replicas_finished()
        stats = self.mailbox_stats()
        steps = sum(s["steps"] for s in stats)
        if self.max_steps is not None and steps >= self.max_steps:
            self.stop(f"max_steps ({self.max_steps}) reached")
        reason = self.stop_reason or next((s["stop_reason"] for s in stats if s["stop_reason"]), None)
        event = {"replicas_running": self.running(), "steps_per_replica": [s["steps"] for s in stats]}
        return Progress(steps, sum(s["loss_sum"] for s in stats), sum(s["loss_count"] for s in stats), reason,
                        finished, event)

    def _calls(self, make_calls: Callable[[], list[Any]]) -> list[Any]:
        """The replies of calls to the mailboxes or the center; a lost one is WorkerLostError
        (also while a reply is late: :meth:`Coordinator.replies`)."""
        try:
            return self.replies(make_calls)
        except Exception as exc:  # noqa: BLE001 - a lost actor is WorkerLostError, anything else re-raised
            self.lost(exc)
            raise

    def mailbox_stats(self) -> list[dict[str, Any]]:
        return self._calls(lambda: [m.stats() for m in self.mailboxes])

    def published(self) -> list[np.ndarray]:
        return [x if x is not None else self.x_start for x, _ in self._calls(lambda: [m.peek() for m in self.mailboxes])]

    def center_params(self) -> np.ndarray:
        return np.concatenate([reply[0] for reply in self._calls(lambda: [sh.fetch() for sh in self.center])])

    def current_params(self) -> np.ndarray:
        return REPLICAS[self.method].returned(self, None)[0]

    def checkpoint(self, steps: int) -> None:  # never asked: the peer methods take no checkpoint_every
        raise NotImplementedError

    def request_stop(self, reason: str) -> None:
        self._calls(lambda: [m.request_stop(reason) for m in self.mailboxes])

    # -- the run ----------------------------------------------------------------------------

    def train(self, callback: Callable[[OptimizeResult], Any] | None) -> OptimizeResult:
        started = time.perf_counter()
        for r, worker in enumerate(self.placement):
            # a replica uses its own mailbox in-process: it must run where the mailbox lives
            self.launch(r, run_peer_replica, worker, allow_other_workers=False, config=self.config,
                        mailboxes=self.mailboxes, x0=self.x_start, center=self.center or None,
                        bounds=self.bounds or None)
        watched = watch(self, self.options, started=started, start_steps=0, checkpoint_every=None, callback=callback)
        tallies = wait_all(list(self.replica_futures.values()))
        mailbox_stats = self.mailbox_stats()
        wall = time.perf_counter() - started
        replicas = [{"replica": t["replica"], "x": t["x"], "steps": t["steps"], "recent_loss": t["recent_loss"]}
                    for t in tallies]
        for entry, t in zip(replicas, tallies):
            if self.config.push_sum:
                entry["weight"] = t["weight"]
            if self.eval_set is not None:
                entry.update(held_out_metrics(self.model, entry["x"], self.eval_set))
        x, chosen = REPLICAS[self.method].returned(self, replicas)
        steps = sum(t["steps"] for t in tallies)
        center_stats = wait_all([sh.stats() for sh in self.center])
        stats = {
            "method": self.method,
            "wall_seconds": wall,
            "global_steps": steps,
            "updates_per_second": steps / wall,
            "examples_per_second": sum(t["examples"] for t in tallies) / wall,
            "steps_per_replica": [t["steps"] for t in tallies],
            "exchanges_per_replica": [t["exchanges"] for t in tallies],
            "received_per_replica": [t["received"] for t in tallies],
            "messages_between_replicas": sum(s["messages_in"] + s["reads"] for s in mailbox_stats),
            "bytes_between_replicas": sum(s["bytes_in"] + s["bytes_out"] for s in mailbox_stats),
            # every exchange touches each center shard once: any shard's count is the total
            "center_exchanges": max((s["version"] for s in center_stats), default=0),
            "center_bytes_in": sum(s["bytes_in"] for s in center_stats),
            "chosen_replica": chosen,
            **step_timing(tallies),
        }
        return self.result(x, steps, wall, watched, stats, replicas=replicas)

    def close(self) -> None:
        """Wake replicas still waiting for a peer, cancel them and drop the actors."""
        for mailbox, future in zip(self.mailboxes, self.mailbox_futures):
            if future.status != "error":
                with contextlib.suppress(Exception):  # its worker died too; nothing waits there
                    mailbox.abort().result()
        self.release([*self.replica_futures.values(), *self.mailbox_futures, *self.center_futures])
        self.mailboxes, self.center = [], []
