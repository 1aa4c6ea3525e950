"""Synchronous and decentralized data parallelism: the alternatives to Downpour's servers.

Four methods from the papers that argue with DistBelief's parameter server (ALGORITHMS.md
§6, §7), one family with :func:`~dasklbfgs.downpour.downpour_sgd`: the same replicas on
the same rows and batches, the same update rules, the same result object, history and
metrics events (so the dashboard's Training page shows them), and the same coordinator
watch loop (:mod:`.watch`).

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

from dasklbfgs._checks import check_int
from dasklbfgs.cluster import resolve_client
from dasklbfgs.optim.collective import TOPOLOGIES
from dasklbfgs.optim.collective import torus_shape as torus_grid
from dasklbfgs.solvers.peers.mailbox import PeerMailbox
from dasklbfgs.solvers.peers.replica import PeerConfig, run_peer_replica
from dasklbfgs.solvers._replicas.run_checks import check_replica_run
from dasklbfgs.solvers.downpour.shard import ParameterShard
from dasklbfgs.solvers._replicas.watch import Progress, step_timing, watch
from dasklbfgs.solvers.downpour.wire import param_bounds
from dasklbfgs.errors import ConfigurationError, WorkerLostError
from dasklbfgs.monitor.events import MetricsStream
from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.optim.updates import make_rule

__all__ = ["sync_sgd", "easgd", "gossip_sgd", "neighbour_sgd", "PEER_METHODS", "run_peer_method"]

WORKER_WAIT = 60.0  # seconds to wait for a first worker on a cluster that has none yet

_COMMON_DOC = """
    Parameters shared by the peer methods
    -------------------------------------
    model, data
        A model from :mod:`dasklbfgs.models`; a :class:`ShardedDataset` or its path.
    client
        Dask client (default: the active one, else an embedded cluster closed on return).
    n_replicas
        Model replicas; replica r trains on the r-th contiguous block of rows, with the
        same seeded mini-batches as a Downpour replica.
    batch_size, epochs, max_steps
        Mini-batch rows per replica; passes over each replica's rows; stop once the global
        step (mini-batch steps summed over replicas) reaches ``max_steps``. Each replica
        also stops by itself after ``ceil(max_steps / n_replicas)`` steps, so the run
        never overshoots by more than ``n_replicas - 1`` steps.
    learning_rate, optimizer, optimizer_options
        Each replica's own update rule (``"sgd"``, ``"momentum"`` or ``"adagrad"``), built
        by :func:`dasklbfgs.optim.updates.make_rule`; e.g. ``optimizer="momentum",
        optimizer_options={"beta": 0.9, "nesterov": True}``.
    x0, seed
        Starting parameters (default: the model's initialisation) and the batch-order seed.
    eval_data, eval_every, defer_eval
        Held-out dataset scored every ``eval_every`` global steps and at the end; with
        ``defer_eval`` the parameters are kept and scored after training, taking no CPU
        from the replicas (see :func:`downpour_sgd`).
    callback
        Called with each history entry; ``StopIteration`` stops the run.

    Returns an ``OptimizeResult`` like :func:`downpour_sgd`'s: ``x``, ``nit``, ``status``,
    ``message``, ``history``, ``stats`` (updates/s, examples/s, messages and bytes
    between replicas, steps per replica) and ``replicas``: each replica's final
    parameters, steps and, with ``eval_data``, held-out metrics.
"""


def sync_sgd(model: Any, data: Any, *, client: Client | None = None, n_replicas: int = 2, batch_size: int = 128,
             learning_rate: float = 0.1, optimizer: str = "sgd", optimizer_options: dict[str, Any] | None = None,
             epochs: int = 1, max_steps: int | None = None, x0: np.ndarray | None = None, seed: int = 0,
             eval_data: Any = None, eval_every: int | None = None, defer_eval: bool = False,
             callback: Callable[[OptimizeResult], Any] | None = None, poll_interval: float = 0.05,
             wait_timeout: float = 120.0) -> OptimizeResult:
    """Synchronous all-reduce SGD (Jin et al.; ALGORITHMS.md §6).

    Every step each replica computes the row sums of its mini-batch; the sums are added up
    a binary tree of replicas (children send to parents through their mailboxes), the root
    turns the total into the mean objective and gradient of the union of the batches, and
    sends that gradient back down. Every replica applies the same update, so the run
    equals single-process SGD on batches of ``n_replicas * batch_size`` rows. Replicas
    with fewer rows add empty batches once theirs run out. A replica that waits longer
    than ``wait_timeout`` seconds for a peer raises :class:`WorkerLostError`.
    """
    return _train("sync", model, data, locals())


def easgd(model: Any, data: Any, *, client: Client | None = None, n_replicas: int = 2, batch_size: int = 128,
          tau: int = 10, alpha: float | None = None, rho: float | None = None, n_param_shards: int = 1,
          learning_rate: float = 0.1, optimizer: str = "sgd", optimizer_options: dict[str, Any] | None = None,
          epochs: int = 1, max_steps: int | None = None, x0: np.ndarray | None = None, seed: int = 0,
          eval_data: Any = None, eval_every: int | None = None, defer_eval: bool = False,
          callback: Callable[[OptimizeResult], Any] | None = None, poll_interval: float = 0.05) -> OptimizeResult:
    """Elastic averaging SGD, asynchronous form (Zhang et al.; ALGORITHMS.md §6).

    Replicas take local steps with their own rule (SGD, or Nesterov momentum via
    ``optimizer="momentum", optimizer_options={"nesterov": True}``). Every ``tau`` steps a
    replica sends its parameters to the center, held by ``n_param_shards`` parameter-shard
    actors; each shard computes ``d = alpha (x_i - x~)`` and adds it to its slice of the
    center in one atomic call, and the replica subtracts ``d``. ``alpha`` is the moving
    rate; give it, or the elastic coupling ``rho`` (``alpha = learning_rate * rho``), or
    neither for the paper's choice ``alpha = 0.9 / n_replicas``. The center is returned.
    """
    return _train("easgd", model, data, locals())


def gossip_sgd(model: Any, data: Any, *, client: Client | None = None, n_replicas: int = 2, batch_size: int = 128,
               push_sum: bool = False, learning_rate: float = 0.1, optimizer: str = "sgd",
               optimizer_options: dict[str, Any] | None = None, epochs: int = 1, max_steps: int | None = None,
               x0: np.ndarray | None = None, seed: int = 0, eval_data: Any = None, eval_every: int | None = None, defer_eval: bool = False,
               callback: Callable[[OptimizeResult], Any] | None = None, poll_interval: float = 0.05) -> OptimizeResult:
    """Gossiping SGD (Jin et al.; ALGORITHMS.md §6): no central state.

    Pull (default): every step a replica reads the parameters a random peer last
    published and moves to ``(x_i + x_k) / 2`` plus its own step. ``push_sum=True``: a
    replica keeps a numerator and a weight and trains at numerator / weight; every step it
    adds its step times its weight to the numerator (so numerator / weight moves by one
    step of the rule), adds the shares it received, keeps half of both and sends the other
    half to a random peer. Mixing never changes the totals, so the weighted average stays
    unbiased. The replicas' average is returned.
    """
    return _train("gossip", model, data, locals())


def neighbour_sgd(model: Any, data: Any, *, client: Client | None = None, n_replicas: int = 4,
                  batch_size: int = 128, topology: str = "ring", torus_shape: tuple[int, int] | None = None,
                  learning_rate: float = 0.1, optimizer: str = "sgd",
                  optimizer_options: dict[str, Any] | None = None, epochs: int = 1, max_steps: int | None = None,
                  x0: np.ndarray | None = None, seed: int = 0, eval_data: Any = None, eval_every: int | None = None, defer_eval: bool = False,
                  callback: Callable[[OptimizeResult], Any] | None = None,
                  poll_interval: float = 0.05) -> OptimizeResult:
    """Nearest-neighbour gradient exchange (Viviani et al.; ALGORITHMS.md §7).

    Replicas sit on a ``"ring"`` (2 neighbours) or a 2-D ``"torus"`` (4 neighbours;
    ``torus_shape=(rows, cols)``, default the most nearly square grid of at least 2 x 2).
    After each mini-batch a replica applies its gradient and sends it to its neighbours;
    gradients received are applied as extra steps between its own batches. Each step is
    weighted by lazy Metropolis weights (own gradient 2/3 and each neighbour's 1/6 on a
    ring): applying the neighbours' raw gradients is unstable, since the mode where
    neighbours err in opposite directions grows every step
    (:func:`dasklbfgs.optim.collective.exchange_weights`). There is no barrier and
    replicas are not kept equal. The replica with the lowest held-out
    objective is returned (without ``eval_data``: the lowest recent training loss), and
    all replicas are reported in ``replicas``.
    """
    return _train("neighbours", model, data, locals())


for _method in (sync_sgd, easgd, gossip_sgd, neighbour_sgd):
    _method.__doc__ = (_method.__doc__ or "") + _COMMON_DOC

#: The peer methods by the names the CLI and pipelines use, with their own options.
PEER_METHODS: dict[str, tuple[Callable[..., OptimizeResult], tuple[str, ...]]] = {
    "sync": (sync_sgd, ()),
    "easgd": (easgd, ("tau", "alpha", "rho", "n_param_shards")),
    "gossip": (gossip_sgd, ("push_sum",)),
    "neighbours": (neighbour_sgd, ("topology", "torus_shape")),
}


def run_peer_method(name: str, model: Any, data: Any, **options: Any) -> OptimizeResult:
    """Run peer method ``name`` with the options it takes from ``options``; options that
    are ``None`` or belong to other methods are left out (the CLI and pipelines pass all)."""
    method, own = PEER_METHODS[name]
    common = ("client", "n_replicas", "batch_size", "learning_rate", "optimizer", "optimizer_options", "epochs",
              "max_steps", "x0", "seed", "eval_data", "eval_every", "defer_eval", "callback", "poll_interval")
    if name == "sync":
        own = (*own, "wait_timeout")
    return method(model, data, **{k: v for k, v in options.items() if (k in common or k in own) and v is not None})


def _train(method: str, model: Any, data: Any, options: dict[str, Any]) -> OptimizeResult:
    """Check the arguments, start the mailboxes (and EASGD's center), run, clean up."""
    checked = check_replica_run(model, data, n_replicas=options["n_replicas"], batch_size=options["batch_size"],
                                epochs=options["epochs"], max_steps=options["max_steps"],
                                eval_data=options["eval_data"], eval_every=options["eval_every"],
                                defer_eval=options["defer_eval"])
    n_replicas = len(checked.rows)
    rule = make_rule(options["optimizer"], learning_rate=options["learning_rate"],
                     **dict(options["optimizer_options"] or {}))
    x_start = model.init_params(None) if options["x0"] is None else model.check_params(options["x0"], "x0")
    config = PeerConfig(
        method=method, n_replicas=n_replicas, batch_size=checked.batch_size, epochs=checked.epochs,
        seed=options["seed"], rule=rule.name, hyper=tuple(sorted(rule.hyper.items())),
        total_steps=checked.epochs * max(math.ceil((b - a) / checked.batch_size) for a, b in checked.rows),
        step_cap=None if checked.max_steps is None else math.ceil(checked.max_steps / n_replicas),
        **_method_options(method, n_replicas, options, rule),
    )
    n_center_shards = 0
    if method == "easgd":
        n_center_shards = check_int(options["n_param_shards"], "n_param_shards")
        if n_center_shards > model.n_params:
            raise ConfigurationError(
                f"n_param_shards ({n_center_shards}) is larger than the model's {model.n_params} parameters"
            )
    with resolve_client(options["client"]) as active:
        run = _PeerRun(active, model, checked, config, x_start, n_center_shards)
        try:
            return run.train(callback=options["callback"], poll_interval=options["poll_interval"],
                             defer_eval=options["defer_eval"])
        finally:
            run.close()


def _method_options(method: str, n_replicas: int, options: dict[str, Any], rule: Any) -> dict[str, Any]:
    """The method's own parameters, checked, as :class:`PeerConfig` fields."""
    if method == "sync":
        timeout = options["wait_timeout"]
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ConfigurationError(f"wait_timeout must be a positive number of seconds, got {timeout!r}")
        return {"wait_timeout": float(timeout)}
    if method == "easgd":
        tau = check_int(options["tau"], "tau")
        alpha, rho = options["alpha"], options["rho"]
        if alpha is not None and rho is not None:
            raise ConfigurationError(f"give alpha ({alpha!r}) or rho ({rho!r}), not both: alpha = learning_rate * rho")
        if rho is not None:
            if not (isinstance(rho, (int, float)) and rho >= 0):
                raise ConfigurationError(f"rho must be a non-negative number, got {rho!r}")
            alpha = rule.hyper["learning_rate"] * rho
            if not alpha < 1:
                raise ConfigurationError(
                    f"rho ({rho!r}) times learning_rate ({rule.hyper['learning_rate']!r}) gives the moving rate "
                    f"alpha = {alpha!r}, which must be below 1: lower rho"
                )
        elif alpha is None:
            alpha = 0.9 / n_replicas
        if not (isinstance(alpha, (int, float)) and 0 <= alpha < 1):
            raise ConfigurationError(f"alpha (the moving rate) must be in [0, 1), got {alpha!r}")
        return {"tau": tau, "alpha": float(alpha)}
    if method == "gossip":
        if not isinstance(options["push_sum"], bool):
            raise ConfigurationError(f"push_sum must be True or False, got {options['push_sum']!r}")
        return {"push_sum": options["push_sum"]}
    topology, shape = options["topology"], options["torus_shape"]
    if topology not in TOPOLOGIES:
        raise ConfigurationError(f"topology must be one of {TOPOLOGIES!r}, got {topology!r}")
    if shape is not None and topology != "torus":
        raise ConfigurationError(f"torus_shape {shape!r} is only for topology='torus', not {topology!r}")
    if topology == "torus":
        shape = torus_grid(n_replicas, shape)
    return {"topology": topology, "torus_shape": shape}


class _PeerRun:
    """The mailboxes, the center (EASGD) and the replica tasks of one run."""

    def __init__(self, client: Client, model: Any, checked: Any, config: PeerConfig, x_start: np.ndarray,
                 n_center_shards: int) -> None:
        self.client, self.model, self.config, self.x_start = client, model, config, x_start
        self.rows, self.eval_set, self.eval_every = checked.rows, checked.eval_set, checked.eval_every
        self.data, self.max_steps = checked.dataset, checked.max_steps
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

    def train(self, *, callback: Callable[[OptimizeResult], Any] | None, poll_interval: float,
              defer_eval: bool = False) -> OptimizeResult:
        started = time.perf_counter()
        for r, worker in enumerate(self.placement):
            self.replica_futures.append(self.client.submit(
                run_peer_replica, r, model=self.model, data=self.data, rows=self.rows[r], config=self.config,
                mailboxes=self.mailboxes, x0=self.x_start, center=self.center or None,
                bounds=self.bounds or None, key=f"{self.config.method}-replica-{self.token}-{r}",
                # a replica uses its own mailbox in-process: it must run where the mailbox lives
                workers=None if worker is None else [worker], allow_other_workers=False, pure=False,
            ))
        history, status, message = watch(self, started=started, start_steps=0, eval_every=self.eval_every,
                                         checkpoint_every=None, callback=callback, poll_interval=poll_interval,
                                         defer_eval=defer_eval)
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
        return OptimizeResult(
            x=x, nit=steps, status=status, success=status == 0, message=message, history=history,
            stats=stats, final=final, run_id=self.metrics.run, replicas=replicas,
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
