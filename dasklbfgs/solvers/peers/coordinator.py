"""Synchronous and decentralized data parallelism: the alternatives to Downpour's servers.

Four methods from the papers that argue with DistBelief's parameter server (docs/algorithms.md
§6, §7), one family with :func:`~dasklbfgs.downpour.downpour_sgd`: the same replicas on
the same rows and batches, the same update rules, the same result object, history and
metrics events (so the dashboard's Training page shows them), and the same coordinator
watch loop (:mod:`dasklbfgs.solvers._replicas.watch`).

- :func:`sync_sgd` -- all-reduce SGD: every step the replicas' gradients are added up a
  tree of replicas on the workers and the same large-batch update is applied everywhere.
- :func:`easgd` -- elastic averaging SGD (asynchronous): local steps, and every ``tau``
  steps an elastic exchange with a center variable held by parameter-shard actors.
- :func:`gossip_sgd` -- no central state; every step a replica mixes with a random peer
  (pull), or sends it half of its push-sum weight.
- :func:`neighbour_sgd` -- replicas on a ring or 2-D torus send their gradients to their
  neighbours and apply the ones they receive; the best replica is returned.

Each replica owns a :class:`PeerMailbox` actor on its worker; messages between replicas
go through mailboxes, never through the client.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import Client, Future
from scipy.optimize import OptimizeResult

from dasklbfgs.cluster import resolve_client
from dasklbfgs.models.base import Model
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.solvers.peers.options import EASGDOptions, GossipOptions, NeighbourOptions, SyncOptions
from dasklbfgs.solvers.peers.mailbox import PeerMailbox
from dasklbfgs.solvers.peers.replica import PeerConfig, run_peer_replica
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers._replicas.run_checks import ReplicaRun, check_param_shards, check_replica_run
from dasklbfgs.solvers.downpour.shard import ParameterShard
from dasklbfgs.solvers._replicas.watch import Progress, step_timing, watch
from dasklbfgs.solvers.downpour.wire import param_bounds
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.monitor.events import MetricsStream
from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.optim.updates import make_rule

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


class _PeerRun:
    """The mailboxes, the center (EASGD) and the replica tasks of one run."""

    def __init__(self, client: Client, model: Model, checked: ReplicaRun, config: PeerConfig, x_start: np.ndarray,
                 n_center_shards: int, options: PeerOptions) -> None:
        self.client, self.model, self.config, self.x_start = client, model, config, x_start
        self.rows, self.eval_set, self.options = checked.rows, checked.eval_set, options
        self.data, self.max_steps = checked.dataset, options.max_steps
        self.token = uuid.uuid4().hex[:8]
        # a replica must run where its mailbox lives: place both on a named worker
        client.wait_for_workers(1, timeout=WORKER_WAIT)
        self.workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        self.placement = [self.workers[r % len(self.workers)] for r in range(config.n_replicas)]
        self.mailbox_futures: list[Future] = [
            client.submit(PeerMailbox, r, actor=True, key=f"peer-mailbox-{self.token}-{r}", workers=[w],
                          pure=False)
            for r, w in enumerate(self.placement)
        ]
        self.mailboxes = [f.result() for f in self.mailbox_futures]
        self.bounds = param_bounds(model.n_params, n_center_shards) if n_center_shards else []
        self.center_futures: list[Future] = [
            client.submit(ParameterShard, i, a, b, x_start[a:b], "sgd", {"learning_rate": 1.0}, actor=True,
                          key=f"easgd-center-{self.token}-{i}", pure=False,
                          workers=[self.workers[i % len(self.workers)]])
            for i, (a, b) in enumerate(self.bounds)
        ]
        self.center = [f.result() for f in self.center_futures]
        self.replica_futures: list[Future] = []
        self.metrics = MetricsStream(client, config.method)
        self.stop_reason: str | None = None

    # -- what the watch loop asks -----------------------------------------------------------

    def _lost(self) -> None:
        lost = [i for i, f in enumerate(self.mailbox_futures + self.center_futures) if f.status == "error"]
        if lost:
            raise WorkerLostError(
                f"a worker holding {self.config.method} replicas' mailboxes or center shards died; "
                f"{self.config.method} keeps no checkpoints to restart from, so the run stops "
                "(Downpour survives worker loss: see downpour_sgd's checkpoint_every)"
            )

    def poll(self) -> Progress:
        self._lost()
        finished = all(f.done() for f in self.replica_futures)
        for f in self.replica_futures:
            if f.status == "error":
                self.stop("a replica failed")
                self._lost()
                f.result()
        stats = [c.result() for c in [m.stats() for m in self.mailboxes]]
        steps = sum(s["steps"] for s in stats)
        if self.max_steps is not None and steps >= self.max_steps:
            self.stop(f"max_steps ({self.max_steps}) reached")
        reason = self.stop_reason or next((s["stop_reason"] for s in stats if s["stop_reason"]), None)
        running = sum(not f.done() for f in self.replica_futures)
        return Progress(steps, sum(s["loss_sum"] for s in stats), sum(s["loss_count"] for s in stats), reason,
                        finished, {"replicas_running": running, "steps_per_replica": [s["steps"] for s in stats]})

    def published(self) -> list[np.ndarray]:
        replies = [c.result() for c in [m.peek() for m in self.mailboxes]]
        return [x if x is not None else self.x_start for x, _ in replies]

    def current_params(self) -> np.ndarray:
        method = self.config.method
        if method == "easgd":
            return np.concatenate([c.result()[0] for c in [sh.fetch() for sh in self.center]])
        if method == "sync":
            return self.published()[0]
        if method == "gossip":
            return np.mean(self.published(), axis=0)
        # neighbours, during the run: the replica with the lowest recent training loss (one
        # scoring, like the other methods); at the end every replica is scored
        recent = [c.result()["recent_loss"] for c in [m.stats() for m in self.mailboxes]]
        return self._best(self.published(), recent)[0]

    @staticmethod
    def _best(candidates: list[np.ndarray], scores: list[float]) -> tuple[np.ndarray, int]:
        """The candidate with the lowest score (a replica that took no step scores nan)."""
        best = int(np.argmin([score if np.isfinite(score) else np.inf for score in scores]))
        return candidates[best], best

    def checkpoint(self, steps: int) -> None:  # never asked: the peer methods take no checkpoint_every
        raise NotImplementedError

    def stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        try:
            for c in [m.request_stop(reason) for m in self.mailboxes]:
                c.result()
        except Exception:
            self._lost()  # a mailbox's worker died: say so (WorkerLostError), else re-raise
            raise

    # -- the run ----------------------------------------------------------------------------

    def train(self, callback: Callable[[OptimizeResult], Any] | None) -> OptimizeResult:
        started = time.perf_counter()
        for r, worker in enumerate(self.placement):
            self.replica_futures.append(self.client.submit(
                run_peer_replica, r, model=self.model, data=self.data, rows=self.rows[r], config=self.config,
                mailboxes=self.mailboxes, x0=self.x_start, center=self.center or None,
                bounds=self.bounds or None, key=f"{self.config.method}-replica-{self.token}-{r}",
                # a replica uses its own mailbox in-process: it must run where the mailbox lives
                workers=None if worker is None else [worker], allow_other_workers=False, pure=False,
            ))
        history, status, message = watch(self, self.options, started=started, start_steps=0,
                                         checkpoint_every=None, callback=callback)
        tallies = [f.result() for f in self.replica_futures]
        mailbox_stats = [c.result() for c in [m.stats() for m in self.mailboxes]]
        wall = time.perf_counter() - started
        replicas = [{"replica": t["replica"], "x": t["x"], "steps": t["steps"], "recent_loss": t["recent_loss"]}
                    for t in tallies]
        if self.config.push_sum:
            for entry, t in zip(replicas, tallies):
                entry["weight"] = t["weight"]
        if self.eval_set is not None:
            for entry in replicas:
                entry.update(held_out_metrics(self.model, entry["x"], self.eval_set))
        x, chosen = self._final_params(tallies, replicas)
        steps = sum(t["steps"] for t in tallies)
        final: dict[str, Any] = {"time": wall, "step": steps}
        if self.eval_set is not None:
            final.update(held_out_metrics(self.model, x, self.eval_set))
            history.append(final)
        center_stats = [c.result() for c in [sh.stats() for sh in self.center]]
        stats = {
            "method": self.config.method,
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
        self.metrics.send(**final, finished=True)
        return Result(
            x=x, nit=steps, status=status, success=status == Status.CONVERGED, message=message, history=history,
            stats=stats, final=final, run_id=self.metrics.run, replicas=replicas, solver=self.config.method,
        )

    def _final_params(self, tallies: list[dict[str, Any]], replicas: list[dict[str, Any]]
                      ) -> tuple[np.ndarray, int | None]:
        method = self.config.method
        if method == "easgd":
            return self.current_params(), None
        if method == "sync":  # every replica holds the same parameters: none is chosen
            return tallies[0]["x"], None
        if method == "gossip":  # push-sum: the weighted average is the unbiased one
            weights = [t["weight"] for t in tallies] if self.config.push_sum else None
            return np.average([t["x"] for t in tallies], axis=0, weights=weights), None
        # neighbours: the best held-out objective, else the lowest recent training loss
        scores = [r.get("eval_objective", r["recent_loss"]) for r in replicas]
        x, best = self._best([t["x"] for t in tallies], scores)
        return x, best

    def close(self) -> None:
        """Wake replicas still waiting for a peer, cancel them and drop the actors."""
        for mailbox, future in zip(self.mailboxes, self.mailbox_futures):
            if future.status == "error":
                continue
            try:
                mailbox.abort().result()
            except Exception:  # noqa: BLE001 - its worker died too; nothing waits there
                pass
        for f in self.replica_futures:
            f.cancel()
        for f in self.mailbox_futures + self.center_futures:
            f.release()
        self.mailboxes, self.center = [], []
