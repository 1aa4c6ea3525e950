"""The replica loop of the peer methods: synchronous SGD, EASGD, gossip, neighbour exchange.

A peer replica is a long-running task like a Downpour replica (:mod:`.replica`): it reads
its contiguous block of rows once, walks the same seeded mini-batches, and applies its own
copy of the update rule to its own copy of the parameters. What differs is whom it talks
to after each mini-batch (ALGORITHMS.md §6, §7):

- ``sync``: gradients' row sums go up a binary tree of replicas, the root turns the total
  into the large-batch gradient and sends it down; every replica takes the same step.
- ``easgd``: every ``tau`` steps an elastic exchange with the center, held by parameter
  shards (:meth:`ParameterShard.elastic`).
- ``gossip``: mix with a random peer's published parameters (pull), or send half of a
  push-sum numerator and weight to one (push-sum).
- ``neighbours``: send the gradient to the ring or torus neighbours; apply the gradients
  received as extra steps, each weighted (:func:`.collective.exchange_weights`).

Messages go through the replicas' :class:`PeerMailbox` actors; the replica uses its own
mailbox in-process.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.optim.collective import (
    exchange_weights, gossip_peer, gossip_pull, push_sum_split, tree_children, tree_parent,
)
from dasklbfgs.solvers.peers.mailbox import Stopped
from dasklbfgs.solvers._replicas.batches import Batches, leave_task_slot, non_finite_message
from dasklbfgs.optim.updates import make_rule
from dasklbfgs.models.base import Model

__all__ = ["PeerConfig", "run_peer_replica"]

METHODS = ("sync", "easgd", "gossip", "neighbours")


@dataclass(frozen=True)
class PeerConfig:
    method: str
    n_replicas: int
    batch_size: int
    epochs: int
    seed: int
    rule: str
    hyper: tuple[tuple[str, Any], ...]
    total_steps: int = 0           # sync: steps every replica takes (the longest replica's)
    step_cap: int | None = None    # at most this many steps per replica (ceil(max_steps / n_replicas))
    tau: int = 1                   # easgd: steps between elastic exchanges
    alpha: float = 0.0             # easgd: moving rate
    push_sum: bool = False         # gossip
    topology: str = "ring"         # neighbours
    torus_shape: tuple[int, int] | None = None
    wait_timeout: float = 120.0


class _Peers:
    """The replicas' mailboxes: in-process calls for those on this worker, actor calls for the rest."""

    def __init__(self, handles: list[Any]) -> None:
        from distributed import get_worker

        actors = get_worker().state.actors
        self.handles = handles
        self.local = [actors.get(h.key) for h in handles]

    def own(self, replica: int) -> Any:
        mailbox = self.local[replica]
        if mailbox is None:
            raise RuntimeError(f"replica {replica} runs on a worker other than its mailbox's")
        return mailbox

    def send(self, k: int, method: str, *args: Any) -> Any:
        """Call ``method`` on peer ``k``'s mailbox; returns what to call ``.result()`` on."""
        if self.local[k] is not None:
            return _Done(getattr(self.local[k], f"{method}_now")(*args))
        return getattr(self.handles[k], method)(*args)

    def read(self, k: int) -> tuple[np.ndarray | None, int]:
        if self.local[k] is not None:
            return self.local[k].read_now()
        return self.handles[k].read().result()


class _Done:
    """The reply of an in-process call, shaped like an actor call's future."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def _wait(pending: list[Any]) -> list[Any]:
    return [p.result() for p in pending]


def _settle(pending: list[tuple[Any, Any]]) -> list[Any]:
    """Wait for the replies to sends; return the shares refused by peers that had finished."""
    return [kept for reply, kept in pending if reply.result() is False and kept is not None]


def _barrier(replica: int, peers: _Peers, own: Any, n_replicas: int) -> None:
    """Wait until every replica has loaded its rows (up the tree, then down), so that no
    replica trains, sends or waits on a peer while another still reads its data. There is
    no timeout: a replica that fails while loading stops the run through the coordinator."""
    for child in tree_children(replica, n_replicas):
        own.take(("ready", child), None)
    parent = tree_parent(replica)
    if parent is not None:
        _wait([peers.send(parent, "put", ("ready", replica), True)])
        own.take(("go",), None)
    _wait([peers.send(child, "put", ("go",), True) for child in tree_children(replica, n_replicas)])


def run_peer_replica(replica: int, *, model: Model, data: Any, rows: tuple[int, int], config: PeerConfig,
                     mailboxes: list[Any], x0: np.ndarray, center: list[Any] | None = None,
                     bounds: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """Train one replica of ``config.method``; return its tallies and final parameters."""
    leave_task_slot()
    peers = _Peers(mailboxes)
    own = peers.own(replica)
    X, y = data.load_rows(*rows)
    batches = Batches(X.shape[0], config, replica)
    rule = make_rule(config.rule, **dict(config.hyper))
    params = np.array(x0, dtype=np.float64)
    state = rule.init(params)
    rng = np.random.default_rng([config.seed, replica, 7919])
    R = config.n_replicas
    own_weight, near = (exchange_weights(replica, R, config.topology, config.torus_shape)
                        if config.method == "neighbours" else (1.0, {}))
    weight = 1.0                                 # push-sum
    pending: list[tuple[Any, Any]] = []          # (reply, share kept if refused), collected next step
    steps = examples = exchanges = received = 0
    loss_sum, recent_loss, stop = 0.0, math.nan, None
    n_steps = config.total_steps if config.method == "sync" else batches.total
    if config.step_cap is not None:
        n_steps = min(n_steps, config.step_cap)
    report_at = 0.0

    def step_rule(gradient: np.ndarray) -> np.ndarray:
        nonlocal state
        delta, state = rule.update(gradient, state)
        return delta

    clock = {"computing": 0.0}
    try:
        if R > 1:
            _barrier(replica, peers, own, R)
    except Stopped as stopped:
        stop, n_steps = str(stopped), 0
    loop_started = time.perf_counter()
    for step in range(n_steps):
        if own.aborted or (config.method != "sync" and own.stop_reason is not None):
            stop = own.stop_reason or "the run was aborted"
            break
        if step < batches.total:
            epoch, index = batches[step]
            Xb, yb = X[index], y[index]
        else:  # sync only: this replica ran out of batches; it adds nothing to the sums
            epoch, index = -1, np.zeros(0, dtype=np.intp)
            Xb, yb = X[:0], y[:0]

        if config.method == "sync":
            try:
                loss, gradient = _all_reduce(replica, step, model, params, Xb, yb, peers, own, config, clock)
            except Stopped as stopped:
                stop = str(stopped)
                break
            if isinstance(loss, str):
                stop = loss
                break
            params += step_rule(gradient)
        else:
            x_eval = params / weight if config.push_sum else params
            started = time.perf_counter()
            loss, gradient = model.objective(x_eval, Xb, yb)
            clock["computing"] += time.perf_counter() - started
            if not (math.isfinite(loss) and np.all(np.isfinite(gradient))):
                stop = non_finite_message(replica, loss, steps, epoch)
                _wait([peers.send(k, "request_stop", stop) for k in range(R)])
                break
            for share, w in _settle(pending):
                params += share
                weight += w
            pending = []
            if config.method == "easgd":
                if step % config.tau == 0 and center is not None and bounds is not None:
                    calls = [sh.elastic(params[a:b], config.alpha) for sh, (a, b) in zip(center, bounds)]
                    params -= np.concatenate(_wait(calls))
                    exchanges += 1
                params += step_rule(gradient)
            elif config.method == "gossip":
                if config.push_sum:
                    # the step is scaled by the weight, so that numerator / weight moves by
                    # exactly one step of the rule whatever weight random pushes left here
                    params += weight * step_rule(gradient)
                    for share, w in own.drain_shares():
                        params += share
                        weight += w
                        received += 1
                    if R > 1:
                        share, weight = push_sum_split(params, weight)
                        reply = peers.send(gossip_peer(rng, replica, R), "share", share, weight)
                        pending.append((reply, (share, weight)))
                        exchanges += 1
                else:
                    delta = step_rule(gradient)
                    if R > 1:
                        peer, _ = peers.read(gossip_peer(rng, replica, R))
                        if peer is not None:
                            params[:] = gossip_pull(params, peer)
                            exchanges += 1
                    params += delta
            else:  # neighbours: weighted steps, see collective.exchange_weights
                params += step_rule(own_weight * gradient)
                pending = [(peers.send(k, "deliver", replica, gradient), None) for k in near]
                exchanges += len(near)
                for sender, g in own.drain():
                    params += step_rule(near[sender] * g)
                    received += 1
        if config.method in ("gossip", "neighbours") or (config.method == "sync" and replica == 0):
            own.publish(params / weight if config.push_sum else params, step)  # for pulls and scoring
        steps += 1
        examples += index.size
        loss_sum += loss
        recent_loss = loss if steps == 1 else 0.9 * recent_loss + 0.1 * loss
        now = time.monotonic()
        if now >= report_at or step + 1 == n_steps:
            own.report(steps, loss_sum, steps, recent_loss)
            report_at = now + 0.02
    # Refuse shares from now on, then take back the refused ones and add those that came:
    # push-sum's totals are conserved however the replicas' last steps interleave.
    arrived = own.finish()
    received += len(arrived)
    for share, w in arrived + _settle(pending):
        params += share
        weight += w
    seconds_in_loop = time.perf_counter() - loop_started
    if stop is not None:
        own.request_stop_now(stop)
    x = params / weight if config.push_sum else params
    own.publish(x, steps)
    own.report(steps, loss_sum, steps, recent_loss)
    return {"replica": replica, "steps": steps, "examples": examples, "exchanges": exchanges,
            "received": received, "stopped_by": stop, "x": x, "weight": weight,
            "recent_loss": recent_loss, "seconds_in_loop": seconds_in_loop,
            "seconds_computing": clock["computing"]}


def _all_reduce(replica: int, step: int, model: Model, params: np.ndarray, Xb: np.ndarray, yb: np.ndarray,
                peers: _Peers, own: Any, config: PeerConfig, clock: dict[str, float]) -> tuple[Any, np.ndarray]:
    """One synchronous step's large-batch objective and gradient, the same on every replica.

    Row sums (not means) travel up the tree, so replicas with unequal batches (the last
    batch of an epoch, a replica out of rows) weigh exactly as in one large batch.
    Returns ``(reason, None)`` when the root stops the run.
    """
    if Xb.shape[0]:
        started = time.perf_counter()
        loss_sum, sums = model.loss_grad_sum(params, Xb, yb)
        clock["computing"] += time.perf_counter() - started
    else:
        loss_sum, sums = 0.0, np.zeros(model.n_sums)
    n = Xb.shape[0]
    for child in tree_children(replica, config.n_replicas):
        child_loss, child_sums, child_n = own.take(("up", step, child), config.wait_timeout, stoppable=False)
        loss_sum, sums, n = loss_sum + child_loss, sums + child_sums, n + child_n
    parent = tree_parent(replica)
    if parent is not None:
        _wait([peers.send(parent, "put", ("up", step, replica), (loss_sum, sums, n))])
        down = own.take(("down", step), config.wait_timeout, stoppable=False)
    elif own.stop_reason is not None:
        down = (own.stop_reason, None)
    else:
        loss, gradient = model.objective_from_sums(params, loss_sum, sums, n)
        if not (math.isfinite(loss) and np.all(np.isfinite(gradient))):
            down = (non_finite_message(replica, loss, step, -1, synchronous=True), None)
        else:
            down = (loss, gradient)
    _wait([peers.send(child, "put", ("down", step), down) for child in tree_children(replica, config.n_replicas)])
    return down
