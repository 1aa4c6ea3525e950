"""The replica tasks of the peer methods: synchronous SGD, EASGD, gossip, neighbour exchange.

A peer replica is a long-running task like a Downpour replica
(:class:`~dasklbfgs.solvers._replicas.batches.ReplicaTask`): it reads its contiguous block
of rows once, walks the same seeded mini-batches, and applies its own copy of the update
rule to its own copy of the parameters. What differs is whom it talks to after each
mini-batch: see each method's class and docs/algorithms.md §6, §7. Messages go through the
replicas' :class:`PeerMailbox` actors; the replica uses its own mailbox in-process.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs._actors import ActorRef, OnWorkerLoop, bind_local
from dasklbfgs._typing import Dataset
from dasklbfgs._wire import free_answered_calls
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.models.base import Model
from dasklbfgs.models.sums import DENSE_ABOVE, SparseSum, add_sums, as_dense, index_dtype
from dasklbfgs.optim.collective import (
    exchange_weights,
    gossip_peer,
    gossip_pull,
    push_sum_split,
    tree_children,
    tree_parent,
)
from dasklbfgs.optim.updates import make_rule
from dasklbfgs.solvers._replicas.batches import Batch, ReplicaTask, leave_task_slot, non_finite_message
from dasklbfgs.solvers._replicas.wire import ShardLayout, payload_nbytes
from dasklbfgs.solvers.peers.mailbox import Stopped
from dasklbfgs.solvers.peers.options import PeerOptions

__all__ = [
    "EASGDReplica", "GossipReplica", "NeighbourReplica", "PeerConfig", "PeerReplica", "SyncReplica",
    "add_tree_sums", "average_of", "run_peer_replica", "touched_part",
]

PEER_CHECK_SECONDS = 0.1  # while a peer's reply is late, check this often whether the run was aborted


class PeerLost(Exception):
    """A call to a peer's mailbox or a center shard failed: its worker is probably gone."""


@dataclass(frozen=True)
class PeerConfig:
    """What every replica task of a peer run reads: the run's options as the user gave them
    (frozen; an option a replica reads is its declaration plus that read), and what the
    coordinator derived from them for this run."""

    options: PeerOptions
    n_replicas: int
    rule: str
    hyper: tuple[tuple[str, Any], ...]
    total_steps: int = 0           # sync: steps every replica takes (the longest replica's)
    step_cap: int | None = None    # at most this many steps per replica (ceil(max_steps / n_replicas))
    alpha: float = 0.0             # easgd: moving rate (PeerOptions.moving_rate)
    torus_shape: tuple[int, int] | None = None  # neighbours: the torus (PeerOptions.grid)
    push_sum: bool = False         # gossip: replicas carry weights (PeerOptions.weighs_replicas)


class _Peers:
    """The replicas' mailboxes, those on this worker called in-process (:func:`bind_local`)."""

    def __init__(self, handles: list[Any]) -> None:
        self.handles = bind_local(handles)

    def own(self, replica: int) -> Any:
        """This replica's own mailbox instance (its blocking ``take`` runs in this thread)."""
        mailbox = self.handles[replica]
        if not isinstance(mailbox, OnWorkerLoop):
            raise RuntimeError(f"replica {replica} runs on a worker other than its mailbox's")
        return mailbox.instance

    def send(self, k: int, method: str, *args: Any) -> Any:
        """Call ``method`` on peer ``k``'s mailbox; returns what to call ``.result()`` on."""
        return getattr(self.handles[k], method)(*args)


def replies(calls: list[Any], own: Any) -> list[Any]:
    """The replies of calls to peers (all sent before the first wait). A failed call is
    :class:`PeerLost`; the coordinator's abort of the run (``own.aborted``) ends the wait with
    :class:`Stopped` (a call to a dead worker can hang for Dask's 30 s connect timeout)."""
    out = []
    for call in calls:
        while True:
            if own.aborted:
                raise Stopped("the run was aborted")
            try:
                out.append(call.result(timeout=PEER_CHECK_SECONDS))
                break
            except TimeoutError:
                continue
            # a closed comm; from a worker, Dask then raises the actor future's error:
            # "Worker holding Actor was lost" or the future's cancellation
            except (OSError, RuntimeError, CancelledError) as error:
                raise PeerLost(str(error)) from error
    free_answered_calls()  # the parameters sent
    return out


def add_tree_sums(parts: list[tuple[float, Any, int]]) -> tuple[float, Any, int]:
    """Sync SGD's ``(loss_sum, sums, n)`` of a replica and its subtrees added in the order
    given: compact if every part is (:func:`~dasklbfgs.models.sums.add_sum_parts`), with
    the bits of adding their dense forms, so sparse rows travel small and step the same."""
    loss_sum, sums = add_sums(*[(loss, part_sums) for loss, part_sums, _ in parts])
    return loss_sum, sums, sum(n for _, _, n in parts)


def touched_part(gradient: np.ndarray, layout: ShardLayout, rows: np.ndarray) -> np.ndarray | SparseSum:
    """``gradient`` as a :class:`SparseSum` of the row table's ``rows`` and every coordinate
    outside the table, where a gradient that is zero in the other rows (see
    :meth:`~dasklbfgs.models.base.Model.row_table_for`) has all its non-zeros; dense when
    that is most of it (the compact form would be larger)."""
    index = np.concatenate([layout.row_index(rows), *(np.arange(a, b) for a, b in layout.dense_ranges)])
    if len(index) > DENSE_ABOVE * gradient.size:
        return gradient
    index.sort()
    return SparseSum(gradient.size, index.astype(index_dtype(gradient.size)), gradient[index])


NO_SURVIVOR = "every replica was lost with its worker: no state is left to restart from"


def average_of(survivors: list[dict[str, Any]]) -> np.ndarray:
    """The average of the surviving replicas' parameters (push-sum: of their estimates)."""
    if not survivors:
        raise WorkerLostError(NO_SURVIVOR)
    return np.mean([e["params"] / e.get("weight", 1.0) for e in survivors], axis=0)


def _accepted(reply: Any) -> bool:
    """Whether an aborted run's send was taken: not if its reply is not in or failed."""
    if not reply.done():
        return False
    try:
        return reply.result() is not False
    except (OSError, RuntimeError, CancelledError):  # a lost peer's
        return False


def _settle(pending: list[tuple[Any, Any]], own: Any) -> list[Any]:
    """Wait for the replies to sends; return the shares refused by peers that had finished.
    Once the run is aborted, a reply not in yet (a lost peer's) counts as a refusal: the
    sender keeps its share, and the restart renormalizes the weights anyway."""
    if own.aborted:
        return [kept for reply, kept in pending if kept is not None and not _accepted(reply)]
    answers = replies([reply for reply, _ in pending], own)
    return [kept for answer, (_, kept) in zip(answers, pending) if answer is False and kept is not None]


class PeerReplica(ReplicaTask):
    """The loop every peer method shares: load the rows, wait at the barrier, walk the
    mini-batches, stop when asked, publish and report, and finish with push-sum's settlement.

    Subclasses implement :meth:`step`; :data:`REPLICAS` maps each method's name to its class.
    ``center`` and ``bounds`` (the center's shards and their slices) are EASGD's; the other
    methods take them, so that one call builds any method's replica, and ignore them.
    ``resume`` is the state a restarted replica goes on from (:meth:`resumed`): its
    parameters, update rule state, push-sum weight and counters, and the step it reached.
    """

    # A stop request ends the loop between steps. Sync replicas leave it to the root, which
    # reads it inside a step and sends it down the tree, so that all stop at the same step.
    stoppable = True
    publishes = False  # whether the parameters are published after each step (for pulls and scoring)

    def __init__(self, replica: int, *, model: Model, data: Dataset, rows: tuple[int, int], config: PeerConfig,
                 mailboxes: list[Any], x0: np.ndarray, center: list[Any] | None = None,
                 bounds: list[tuple[int, int]] | None = None, resume: dict[str, Any] | None = None) -> None:
        self.peers = _Peers(mailboxes)
        self.own = self.peers.own(replica)
        super().__init__(replica, model, data, rows, config)
        self.rule = make_rule(config.rule, **dict(config.hyper))
        self.params = np.array(x0, dtype=np.float64)
        self.state = self.rule.init(self.params)
        self.weight = 1.0                                 # push-sum (1 for the other methods)
        self.pending: list[tuple[Any, Any]] = []          # (reply, share kept if refused), collected next step
        self.exchanges = self.received = 0
        self.bytes_sent = 0                               # arrays this replica's messages carried
        self.loss_sum, self.recent_loss = 0.0, math.nan
        self.seconds_before = 0.0                         # in the training loop before a restart
        self.loop_started: float | None = None
        self.n_steps = self.planned_steps()
        if config.step_cap is not None:
            self.n_steps = min(self.n_steps, config.step_cap)
        self.report_at = 0.0
        if resume is not None:
            self.go_on_from(resume)

    def go_on_from(self, resume: dict[str, Any]) -> None:
        """Take the state and counters a restart hands this replica (see :meth:`resumed`)."""
        self.params = np.array(resume["params"], dtype=np.float64)
        self.state = resume["rule_state"] if resume.get("rule_state") is not None else self.rule.init(self.params)
        self.weight = resume.get("weight", 1.0)
        self.steps, self.examples = resume["steps"], resume.get("examples", 0)
        self.loss_sum, self.recent_loss = resume.get("loss_sum", 0.0), resume.get("recent_loss", math.nan)
        self.exchanges, self.received = resume.get("exchanges", 0), resume.get("received", 0)
        self.bytes_sent = resume.get("bytes_sent", 0)
        self.seconds_before = resume.get("seconds_in_loop", 0.0)
        self.seconds_computing = resume.get("seconds_computing", 0.0)
        self.own.report(self.steps, self.loss_sum, self.steps, self.recent_loss)

    @classmethod
    def resumed(cls, entries: list[dict[str, Any]], center: np.ndarray | None) -> list[dict[str, Any]]:
        """The states the replicas restart from after a loss. ``entries`` are the survivors'
        final tallies (with ``params``) and, for a replica lost with its worker, the counters
        last polled from its mailbox (no ``params``): it gets :meth:`stand_in`'s state and
        resumes its mini-batches at the step it had reported."""
        survivors = [e for e in entries if "params" in e]
        return [e if "params" in e else {**e, **cls.stand_in(survivors, center)} for e in entries]

    @staticmethod
    def stand_in(survivors: list[dict[str, Any]], center: np.ndarray | None) -> dict[str, Any]:
        """A lost replica's new state: the average of the survivors' parameters (a fresh
        update rule state)."""
        return {"params": average_of(survivors), "rule_state": None, "weight": 1.0}

    def planned_steps(self) -> int:
        return self.batches.total

    def send(self, k: int, method: str, *args: Any) -> Any:
        """Call ``method`` on peer ``k``'s mailbox, the arrays sent counted in ``bytes_sent``;
        returns what to call ``.result()`` on."""
        self.bytes_sent += payload_nbytes(args)
        return self.peers.send(k, method, *args)

    def rule_step(self, gradient: np.ndarray) -> np.ndarray:
        """The update rule's step for ``gradient`` (advances the rule's state)."""
        delta, self.state = self.rule.update(gradient, self.state)
        return delta

    def estimate(self) -> np.ndarray:
        """The replica's parameters: push-sum's numerator over its weight."""
        return self.params / self.weight if self.config.push_sum else self.params

    def add_shares(self, shares: list[tuple[np.ndarray, float]]) -> None:
        for share, w in shares:
            self.params += share
            self.weight += w

    def barrier(self) -> None:
        """Wait until every replica has loaded its rows (up the tree, then down), so that no
        replica trains, sends or waits on a peer while another still reads its data. There is
        no timeout: a replica that fails while loading stops the run through the coordinator."""
        children, parent = tree_children(self.replica, self.config.n_replicas), tree_parent(self.replica)
        try:
            for child in children:
                self.own.take(("ready", child), None)
            if parent is not None:
                replies([self.send(parent, "put", ("ready", self.replica), True)], self.own)
                self.own.take(("go",), None)
            replies([self.send(child, "put", ("go",), True) for child in children], self.own)
        except Stopped as stopped:
            self.stop, self.n_steps = str(stopped), 0

    def stopped(self) -> bool:
        if self.own.aborted or (self.stoppable and self.own.stop_reason is not None):
            self.stop = self.own.stop_reason or "the run was aborted"
            return True
        return False

    def batch_of(self, step: int) -> tuple[int, Batch]:
        """``(epoch, batch)`` of ``step``."""
        if step < self.batches.total:
            epoch, index = self.batches[step]
            return epoch, self.batch(index)
        # sync only: this replica ran out of batches; it adds nothing to the sums
        return -1, self.batch(np.zeros(0, dtype=np.intp))

    def step(self, step: int, epoch: int, batch: Batch) -> float | None:
        """Train on one mini-batch and talk to the peers; the loss, or None to stop (see ``stop``)."""
        raise NotImplementedError

    @staticmethod
    def returned(run: Any, replicas: list[dict[str, Any]] | None) -> tuple[np.ndarray, int | None]:
        """For the coordinator ``run``: the parameters the method returns and the replica
        chosen (None: no single one), from the replicas' final entries (``x``, ``weight``,
        held-out metrics), or while they train (``replicas`` None) from the run's actors."""
        raise NotImplementedError

    def record(self, step: int, loss: float, n_examples: int) -> None:
        self.steps += 1
        self.examples += n_examples
        self.loss_sum += loss
        self.recent_loss = loss if self.steps == 1 else 0.9 * self.recent_loss + 0.1 * loss
        now = time.monotonic()
        if now >= self.report_at or step + 1 == self.n_steps:
            self.own.report(self.steps, self.loss_sum, self.steps, self.recent_loss)
            self.report_at = now + 0.02

    def settle(self) -> None:
        """Refuse shares from now on, then take back the refused ones and add those that came:
        push-sum's totals are conserved however the replicas' last steps interleave."""
        arrived = self.own.finish()
        self.received += len(arrived)
        try:
            refused = _settle(self.pending, self.own)
        except (Stopped, PeerLost):  # aborted meanwhile: no reply is waited for any more
            self.wait_for_abort()
            refused = _settle(self.pending, self.own)
        self.add_shares(arrived + refused)

    def train(self) -> None:
        """The training loop, from the step the replica reached (0, or where a restart resumed it)."""
        self.loop_started = time.perf_counter()
        for step in range(self.steps, self.n_steps):
            if self.stopped():
                break
            epoch, batch = self.batch_of(step)
            loss = self.step(step, epoch, batch)
            if loss is None:
                break
            if self.publishes:
                self.own.publish(self.estimate(), step)  # for pulls and scoring
            self.record(step, loss, batch.size)

    def wait_for_abort(self) -> None:
        """After a failed call to a peer: wait for the coordinator to abort the run (it then
        restarts the replicas from the states they return) and stop."""
        if not self.own.wait_aborted(self.config.options.wait_timeout):
            raise WorkerLostError(f"replica {self.replica}: a call to a peer failed and the run was not restarted "
                                  f"within {self.config.options.wait_timeout:.0f} s; a peer's worker is probably gone")
        self.stop = "the run was aborted"

    def run(self) -> dict[str, Any]:
        """Train until the steps are done, the run stops or is aborted (a peer was lost); the
        replica's tallies, final parameters and the state a restart goes on from."""
        try:
            self.barrier()
            self.train()
        except Stopped as stopped:
            self.stop = str(stopped)
        except PeerLost:
            self.wait_for_abort()
        self.settle()
        now = time.perf_counter()
        seconds_in_loop = self.seconds_before + now - (now if self.loop_started is None else self.loop_started)
        if self.stop is not None:
            self.own.request_stop_now(self.stop)
        x = self.estimate()
        self.own.publish(x, self.steps)
        self.own.report(self.steps, self.loss_sum, self.steps, self.recent_loss)
        return self.tallies(seconds_in_loop, exchanges=self.exchanges, received=self.received,
                            bytes_sent=self.bytes_sent, x=x,
                            weight=self.weight, recent_loss=self.recent_loss, params=self.params,
                            rule_state=self.state, loss_sum=self.loss_sum, aborted=self.own.aborted)


class SyncReplica(PeerReplica):
    """Synchronous SGD: every replica takes the same large-batch step (:meth:`all_reduce`)."""

    stoppable = False

    def planned_steps(self) -> int:
        return self.config.total_steps  # the longest replica's: every replica takes part in each step

    @property
    def publishes(self) -> bool:  # type: ignore[override]
        return self.replica == 0

    @staticmethod
    def returned(run: Any, replicas: list[dict[str, Any]] | None) -> tuple[np.ndarray, int | None]:
        # every replica holds the same parameters: none is chosen
        return (run.published()[0] if replicas is None else replicas[0]["x"]), None

    @classmethod
    def resumed(cls, entries: list[dict[str, Any]], center: np.ndarray | None) -> list[dict[str, Any]]:
        """Every replica restarts from the survivor furthest along: when the run was aborted
        some had applied the last step's gradient and some not yet; those that had are at the
        state every replica reaches after that step, so all stay identical."""
        survivors = [e for e in entries if "params" in e]
        if not survivors:
            raise WorkerLostError(NO_SURVIVOR)
        ahead = max(survivors, key=lambda e: e["steps"])
        return [{**e, "params": ahead["params"], "rule_state": ahead["rule_state"], "steps": ahead["steps"]}
                for e in entries]

    def step(self, step: int, epoch: int, batch: Batch) -> float | None:
        try:
            loss, gradient = self.all_reduce(step, batch)
        except Stopped as stopped:
            self.stop = str(stopped)
            return None
        if isinstance(loss, str):
            self.stop = loss
            return None
        # all_reduce returns (reason, None) or (loss, gradient): not a str, so an array (mypy does not
        # relate the two)
        self.params += self.rule_step(gradient)  # type: ignore[arg-type]
        return loss

    def row_sums(self, batch: Batch) -> tuple[float, np.ndarray | SparseSum]:
        """This replica's loss and row sums over ``batch``, compact when the model gives them
        so (a linear model's on sparse rows); out of rows, the sum over none."""
        if not batch.size:
            return 0.0, SparseSum.zero(self.model.n_sums)
        return self.timed(self.model.portion_loss_grad_sum, self.params, batch.X, batch.y, batch.w, batch.offset)

    def objective_of(self, summed: tuple[float, Any, int]) -> tuple[float, np.ndarray]:
        """The large batch's objective and gradient from its added ``(loss_sum, sums, n)``."""
        loss_sum, sums, n = summed
        return self.model.objective_from_sums(self.params, loss_sum, as_dense(sums), n)

    def all_reduce(self, step: int, batch: Batch) -> tuple[Any, np.ndarray | None]:
        """One synchronous step's large-batch objective and gradient, the same on every replica.

        Row sums (not means) travel up the tree, so replicas with unequal batches (the last
        batch of an epoch, a replica out of rows) weigh exactly as in one large batch. The
        root sends the added sums down (or why the run stops), and every replica forms the
        objective from them: the replicas hold the same parameters, so they get the same
        bits, and the sums stay compact on sparse rows where the gradient (with an l2
        penalty) would not. Returns ``(reason, None)`` when the root stops the run.
        """
        own, children = self.own, tree_children(self.replica, self.config.n_replicas)
        parts = [(*self.row_sums(batch), batch.size)]
        wait = self.config.options.wait_timeout
        parts += [own.take(("up", step, child), wait, stoppable=False) for child in children]
        summed = add_tree_sums(parts)
        parent, objective = tree_parent(self.replica), None
        if parent is not None:
            replies([self.send(parent, "put", ("up", step, self.replica), summed)], own)
            down = own.take(("down", step), self.config.options.wait_timeout, stoppable=False)
        elif own.stop_reason is not None:
            down = own.stop_reason
        else:
            objective = self.objective_of(summed)
            loss, gradient = objective
            finite = math.isfinite(loss) and np.all(np.isfinite(gradient))
            down = summed if finite else non_finite_message(self.replica, loss, step, -1, synchronous=True)
        replies([self.send(child, "put", ("down", step), down) for child in children], own)
        if isinstance(down, str):
            return down, None
        return objective if objective is not None else self.objective_of(down)


class LocalStepReplica(PeerReplica):
    """The asynchronous methods: a gradient at the replica's own parameters, then an exchange."""

    def step(self, step: int, epoch: int, batch: Batch) -> float | None:
        computed = self.gradient(self.estimate(), batch, epoch)
        if computed is None:
            replies([self.send(k, "request_stop", self.stop) for k in range(self.config.n_replicas)], self.own)
            return None
        loss, gradient = computed
        self.add_shares(_settle(self.pending, self.own))  # last step's sends: refused push-sum shares come back
        self.pending = []
        self.update(step, gradient, batch)
        return loss

    def update(self, step: int, gradient: np.ndarray, batch: Batch) -> None:
        """Apply ``gradient`` (of ``batch``) and exchange with the peers."""
        raise NotImplementedError


class EASGDReplica(LocalStepReplica):
    """EASGD: every ``tau`` steps an elastic exchange with the center held by the shards."""

    def __init__(self, replica: int, *, center: list[Any] | None = None,
                 bounds: list[tuple[int, int]] | None = None, **kwargs: Any) -> None:
        super().__init__(replica, **kwargs)
        self.center, self.bounds = center, bounds

    @staticmethod
    def returned(run: Any, replicas: list[dict[str, Any]] | None) -> tuple[np.ndarray, int | None]:
        return run.center_params(), None

    @staticmethod
    def stand_in(survivors: list[dict[str, Any]], center: np.ndarray | None) -> dict[str, Any]:
        """A lost replica restarts at the center, the point the replicas are drawn to."""
        return {"params": np.array(center), "rule_state": None, "weight": 1.0}

    def update(self, step: int, gradient: np.ndarray, batch: Batch) -> None:
        if step % self.config.options.tau == 0 and self.center is not None and self.bounds is not None:
            calls = [sh.elastic(self.params[a:b], self.config.alpha) for sh, (a, b) in zip(self.center, self.bounds)]
            self.params -= np.concatenate(replies(calls, self.own))
            self.bytes_sent += self.params.nbytes  # its slices, one to each center shard
            self.exchanges += 1
        self.params += self.rule_step(gradient)


class GossipReplica(LocalStepReplica):
    """Gossip: pull a random peer's parameters and mix, or push half a push-sum share to one."""

    publishes = True

    def __init__(self, replica: int, **kwargs: Any) -> None:
        super().__init__(replica, **kwargs)
        # a restarted replica draws new peers: its stream goes on from the step it resumed at
        self.rng = np.random.default_rng([self.config.options.seed, replica, 7919]
                                         + ([self.steps] if self.steps else []))

    @staticmethod
    def returned(run: Any, replicas: list[dict[str, Any]] | None) -> tuple[np.ndarray, int | None]:
        if replicas is None:
            return np.mean(run.published(), axis=0), None
        # push-sum: the weighted average is the unbiased one
        weights = [r["weight"] for r in replicas] if run.config.push_sum else None
        return np.average([r["x"] for r in replicas], axis=0, weights=weights), None

    @classmethod
    def resumed(cls, entries: list[dict[str, Any]], center: np.ndarray | None) -> list[dict[str, Any]]:
        """Push-sum: every replica restarts at its estimate with weight 1, so that the weights
        sum to ``n_replicas`` again (shares in flight to a lost replica are gone)."""
        return [{**e, "params": e["params"] / e.get("weight", 1.0), "weight": 1.0}
                for e in super().resumed(entries, center)]

    def update(self, step: int, gradient: np.ndarray, batch: Batch) -> None:
        # parameters differ in every coordinate: shares and pulls travel dense
        if self.config.push_sum:
            self.push_sum(gradient)
        else:
            self.pull(gradient)

    def push_sum(self, gradient: np.ndarray) -> None:
        # the step is scaled by the weight, so that numerator / weight moves by
        # exactly one step of the rule whatever weight random pushes left here
        self.params += self.weight * self.rule_step(gradient)
        shares = self.own.drain("_shares")
        self.add_shares(shares)
        self.received += len(shares)
        R = self.config.n_replicas
        if R > 1:
            share, self.weight = push_sum_split(self.params, self.weight)
            reply = self.send(gossip_peer(self.rng, self.replica, R), "share", share, self.weight)
            self.pending.append((reply, (share, self.weight)))
            self.exchanges += 1

    def pull(self, gradient: np.ndarray) -> None:
        delta = self.rule_step(gradient)
        R = self.config.n_replicas
        if R > 1:
            [(peer, _)] = replies([self.send(gossip_peer(self.rng, self.replica, R), "read")], self.own)
            if peer is not None:
                self.params[:] = gossip_pull(self.params, peer)
                self.exchanges += 1
        self.params += delta


class NeighbourReplica(LocalStepReplica):
    """Neighbour exchange: weighted steps, see :func:`.collective.exchange_weights`."""

    publishes = True

    def __init__(self, replica: int, *, data: Dataset, **kwargs: Any) -> None:
        super().__init__(replica, data=data, **kwargs)
        config = self.config
        self.own_weight, self.near = exchange_weights(replica, config.n_replicas, config.options.topology,
                                                      config.torus_shape)
        # the rows a batch's gradient can be non-zero in (None: every coordinate), as Downpour's pushes
        table = self.model.row_table_for(data)
        self.layout = None if table is None else ShardLayout(0, self.model.n_params, table)

    @staticmethod
    def returned(run: Any, replicas: list[dict[str, Any]] | None) -> tuple[np.ndarray, int | None]:
        """The replica with the best held-out objective, else the lowest recent training
        loss; while training always the latter (so that one replica is scored, like the
        other methods). A replica that took no step scores nan and is never chosen."""
        if replicas is None:
            xs, scores = run.published(), [s["recent_loss"] for s in run.mailbox_stats()]
        else:
            xs, scores = [r["x"] for r in replicas], [r.get("eval_objective", r["recent_loss"]) for r in replicas]
        best = int(np.argmin([score if np.isfinite(score) else np.inf for score in scores]))
        return xs[best], best

    def update(self, step: int, gradient: np.ndarray, batch: Batch) -> None:
        self.params += self.rule_step(self.own_weight * gradient)
        if self.near:
            message = self.message(gradient, batch)
            self.pending = [(self.send(k, "deliver", self.replica, message), None) for k in self.near]
            self.exchanges += len(self.near)
        for sender, g in self.own.drain():
            self.params += self.rule_step(self.near[sender] * as_dense(g))
            self.received += 1

    def message(self, gradient: np.ndarray, batch: Batch) -> np.ndarray | SparseSum:
        """The gradient as it travels: compact when it is zero outside the rows ``batch``
        touched (densified on receipt: the same numbers), else as it is."""
        if self.layout is None:
            return gradient
        return touched_part(gradient, self.layout, self.model.touched_rows(batch.X))


REPLICAS: dict[str, type[PeerReplica]] = {
    "sync": SyncReplica, "easgd": EASGDReplica, "gossip": GossipReplica, "neighbours": NeighbourReplica,
}
METHODS = tuple(REPLICAS)


def run_peer_replica(replica: int, *, model: Model, data: Dataset, rows: tuple[int, int], config: PeerConfig,
                     mailboxes: list[ActorRef], x0: np.ndarray, center: list[ActorRef] | None = None,
                     bounds: list[tuple[int, int]] | None = None,
                     resume: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train one replica of ``config.options.solver`` (from ``resume`` after a restart); return its
    tallies, final parameters and state."""
    leave_task_slot()
    trainer = REPLICAS[config.options.solver](replica, model=model, data=data, rows=rows, config=config,
                                      mailboxes=[ref.handle() for ref in mailboxes], x0=x0,
                                      center=None if center is None else [ref.handle() for ref in center],
                                      bounds=bounds, resume=resume)
    return trainer.run()
