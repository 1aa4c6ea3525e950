"""Downpour on partitioned replicas: ``downpour_sgd(..., model_partitions=K)`` (docs/algorithms.md §4).

Each model replica is K partition tasks on K distinct workers, one per partition of a
:class:`~dasklbfgs.parallel.base.PartitionedModel`. All K run the Downpour loop of
:class:`~dasklbfgs.solvers.downpour.replica.DownpourReplica` over the same mini-batches (the
same replica index, so the same :class:`~dasklbfgs.solvers._replicas.batches.Batches`), and
each fetches and pushes only its own parameters: the parameter shards hold the
*partitioned* vector, cut at the partitions' boundaries (:func:`partition_bounds`), so every
shard belongs to one partition. Every step the partitions exchange activations and error
sums through their partition program; the arrays travel worker to worker into the
destination partition's :class:`~dasklbfgs.solvers._replicas.mailbox.PeerMailbox` (one per
partition task, used in-process by its owner), under ``(step, exchange key, source)``.

Lockstep: before computing a step the partitions agree whether to stop (one tiny
all-gather of "stop?" flags), since a shard's stop reason (``max_steps``, a stop request)
may reach one partition's shards a push before another's; a restarted replica's partitions
agree on one resume step (the smallest their shards counted). Every wait has a timeout and
its error names the partition and the message it waited for.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dasklbfgs._actors import OnWorkerLoop, bind_local
from dasklbfgs._typing import Dataset
from dasklbfgs._wire import aligned, free_answered_calls
from dasklbfgs.errors import PartitionError, WorkerLostError
from dasklbfgs.models.base import Model
from dasklbfgs.parallel.actor import EXCHANGE_TIMEOUT_SECONDS
from dasklbfgs.parallel.base import PartitionedModel
from dasklbfgs.parallel.exchanges import Exchange, advance, all_gather, all_sum, payload_bytes
from dasklbfgs.solvers._replicas.batches import leave_task_slot
from dasklbfgs.solvers._replicas.wire import param_bounds
from dasklbfgs.solvers.downpour.replica import DownpourReplica, ReplicaConfig, _ShardsLost

__all__ = ["EXCHANGE_TIMEOUT_SECONDS", "MailboxExchanges", "PartitionReplica", "PartitionView", "decay_by_array",
           "partition_bounds", "run_partition"]


def partition_bounds(partitioned: PartitionedModel, n_param_shards: int
                     ) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """The shards' slices of the partitioned vector (:func:`param_bounds` cut also at every
    partition's boundary, so no shard straddles two partitions) and, per partition, the
    indices of the shards that hold its parameters."""
    edges = {edge for bound in param_bounds(partitioned.model.n_params, n_param_shards) for edge in bound}
    edges.update(edge for s in partitioned.param_slices for edge in (s.start, s.stop))
    ordered = sorted(edges)
    bounds = list(zip(ordered[:-1], ordered[1:]))
    owners = [[i for i, (a, b) in enumerate(bounds) if s.start <= a and b <= s.stop] for s in partitioned.param_slices]
    return bounds, owners


def decay_by_array(model: Model) -> dict[str, float]:
    """The model's penalty as one weight-decay coefficient per named array of its layout,
    when it is ``(1/2) sum_j c_j theta_j^2`` with ``c`` constant on each array (the
    partitionable models' weight decay), so that each partition builds its own part
    (:meth:`~dasklbfgs.parallel.base.PartitionedModel.own_coefficients`) without the whole
    vector; :class:`PartitionError` for any other penalty. Checked here, in the client, on the
    whole vector."""
    ones = np.ones(model.n_params)
    value, coefficients = model.penalty(ones)
    twice_value, twice_grad = model.penalty(2.0 * ones)
    by_array = {name: (block.min(), block.max()) for name, block in model.layout.views(coefficients).items()}
    if not (np.allclose(twice_grad, 2.0 * coefficients) and math.isclose(value, 0.5 * coefficients.sum())
            and math.isclose(twice_value, 4.0 * value) and all(low == high for low, high in by_array.values())):
        raise PartitionError(f"{model!r} has a penalty that is not a weight decay: its partitions cannot "
                             "compute their parts of it on their own parameters")
    return {name: float(low) for name, (low, _) in by_array.items() if low != 0.0}


class MailboxExchanges:
    """Partition ``partition``'s side of its replica's exchanges: its own mailbox (the
    instance, in this process) and every partition's mailbox handle (this one's included).

    :meth:`run` drives a partition program: on each :class:`Exchange` it puts each array into
    the destination's mailbox under ``(step, key, this partition)`` and takes the ones it
    expects from its own. ``step`` (set by the replica) keeps the steps' messages apart. The
    bytes and messages sent are counted in its own mailbox, where the coordinator reads them
    while the run goes on (the dashboard's bytes per partition).
    """

    def __init__(self, replica: int, partition: int, mailboxes: list[Any], timeout: float) -> None:
        self.replica, self.partition, self.timeout = replica, partition, timeout
        self.peers = bind_local(mailboxes)
        own = self.peers[partition]
        if not isinstance(own, OnWorkerLoop):
            raise RuntimeError(f"partition {partition} of replica {replica} runs on a worker other than its mailbox's")
        self.own = own.instance
        self.step = -1

    @property
    def bytes_sent(self) -> int:
        """Bytes this partition has sent its peers (as its mailbox counts them)."""
        return self.own.bytes_sent

    @property
    def messages_sent(self) -> int:
        """Messages this partition has sent its peers (as its mailbox counts them)."""
        return self.own.messages_sent

    def run(self, program: Any) -> Any:
        """Drive ``program`` (a generator of exchanges) to its result at the current step."""
        reply: dict[int, np.ndarray] | None = None
        while True:
            exchange, value = advance(program, reply)
            if exchange is None:
                return value
            reply = self.exchange(exchange)

    def exchange(self, exchange: Exchange) -> dict[int, np.ndarray]:
        """Send ``exchange``'s arrays to their partitions, then take the ones it expects."""
        calls = {q: self.peers[q].put((self.step, exchange.key, self.partition), array)
                 for q, array in exchange.send.items()}
        for q, call in calls.items():
            try:
                call.result(timeout=self.timeout)
            except Exception as exc:  # a dead peer: a closed comm, a lost actor, or no answer
                raise WorkerLostError(f"partition {self.partition} of replica {self.replica} could not deliver "
                                      f"{exchange.key!r} of step {self.step} to partition {q} "
                                      f"({type(exc).__name__}: {exc}); its worker is probably gone") from exc
        free_answered_calls()  # the arrays sent
        self.own.count_sent(payload_bytes(exchange), len(exchange.send))
        return {q: aligned(self.take(exchange.key, q)) for q in exchange.receive_from}

    def take(self, key: str, source: int) -> Any:
        try:
            return self.own.take((self.step, key, source), self.timeout, stoppable=False)
        except WorkerLostError:
            raise WorkerLostError(
                f"partition {self.partition} of replica {self.replica} waited {self.timeout:.0f} s for {key!r} of "
                f"step {self.step} from partition {source}; that partition's worker is probably gone") from None


class PartitionView:
    """What the Downpour loop trains in partition ``p`` of a replica: its slice of the
    partitioned vector (``n_params``) and an ``objective`` that runs the partition program,
    exchanging through ``exchanges``: (mean loss + penalty, this block's gradient / n +
    its penalty gradient), the loss the same on every partition.

    The penalty (a weight decay, ``decay``: :func:`decay_by_array`) is elementwise: each
    partition takes its part on its slice;
    the value is summed over the partitions. A partition whose gradient block is not finite
    adds nan to that sum, so that every partition sees a non-finite loss at the same step
    and all stop there."""

    def __init__(self, partitioned: PartitionedModel, p: int, exchanges: MailboxExchanges,
                 decay: dict[str, float]) -> None:
        self.partitioned, self.p, self.exchanges = partitioned, p, exchanges
        own = partitioned.param_slices[p]
        self.n_params = own.stop - own.start
        self.decay = partitioned.own_coefficients(p, decay) if decay else None  # None: no penalty

    def objective(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None, *,
                  n: float | None = None) -> tuple[float, np.ndarray]:
        if n is None:
            n = X.shape[0] if w is None else float(np.sum(w, dtype=np.float64))
        loss_sum, penalty, grad = self.exchanges.run(self._program(params, X, y, w))
        grad /= n  # in place: the program's own array (a model too big for one worker has no room to spare)
        if self.decay is not None:
            grad += self.decay * params
        return loss_sum / n + penalty, grad

    def _program(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None) -> Any:
        loss_sum, grad = yield from self.partitioned.program(self.p, params, X, y, w)
        own = 0.0 if self.decay is None else 0.5 * float(np.dot(self.decay * params, params))
        if not np.all(np.isfinite(grad)):
            own = math.nan
        penalty = yield from all_sum("penalty", self.p, self.partitioned.k, own)
        return loss_sum, penalty, grad


class PartitionReplica(DownpourReplica):
    """Partition ``partition`` of a Downpour replica: the replica's loop on this partition's
    parameters, fetched from and pushed to this partition's shards (``shards``: their
    indices) only, in lockstep with the replica's other partitions."""

    def __init__(self, replica: int, *, partitioned: PartitionedModel, partition: int, shards: list[int],
                 mailboxes: list[Any], timeout: float, data: Dataset, rows: tuple[int, int],
                 bounds: list[tuple[int, int]], config: ReplicaConfig, directory: Any,
                 decay: dict[str, float]) -> None:
        self.partition, self.k, self.shard_indices = partition, partitioned.k, shards
        self.exchanges = MailboxExchanges(replica, partition, [ref.handle() for ref in mailboxes], timeout)
        offset = partitioned.param_slices[partition].start  # own shards' bounds within this partition's slice
        own_bounds = [(bounds[i][0] - offset, bounds[i][1] - offset) for i in shards]
        view = PartitionView(partitioned, partition, self.exchanges, decay)
        super().__init__(replica, model=view, data=data, rows=rows, bounds=own_bounds, config=config,  # type: ignore[arg-type]
                         directory=directory)

    def own_shards(self, shards: list[Any]) -> list[Any]:
        return [shards[i] for i in self.shard_indices]

    def resume_step(self, first_epoch: int) -> int:
        """The smallest of the partitions' resume steps: a push some partitions' shards applied
        and others' did not (a checkpoint taken between them) is done again by all."""
        own = super().resume_step(first_epoch)
        self.exchanges.step = -1
        steps = self.exchanges.run(all_gather("resume", self.partition, self.k, np.array([float(own)])))
        return int(steps.min())

    def stopping(self, step: int) -> bool:
        """Whether any partition of the replica has a reason to stop (all then stop here)."""
        self.exchanges.step = step
        flags = self.exchanges.run(all_gather("stop", self.partition, self.k, np.array([float(bool(self.stop))])))
        if flags.any() and not self.stop:
            self.stop = f"partition {int(np.flatnonzero(flags)[0])} of replica {self.replica} stopped"
        return bool(flags.any())

    def fetch(self, step: int) -> str | None:
        """Fetch, taking the re-created shards if one of them was lost meanwhile: a partition
        that skipped this step would leave its peers waiting for its messages."""
        while True:
            try:
                return super().fetch(step)
            except _ShardsLost:
                self.take_replacements()
                self.reconnects += 1

    def push(self, step: int) -> bool:
        """Push; a stop reason in the reply is acted on at the next step's agreement (:meth:`stopping`)."""
        super().push(step)
        return False

    def tallies(self, seconds_in_loop: float, **extra: Any) -> dict[str, Any]:
        return super().tallies(seconds_in_loop, partition=self.partition, bytes_sent=self.exchanges.bytes_sent,
                               messages_sent=self.exchanges.messages_sent, **extra)


def run_partition(replica: int, *, model: Model, data: Dataset, rows: tuple[int, int], bounds: list[tuple[int, int]],
                  config: ReplicaConfig, directory: Any, partitioned: PartitionedModel, partition: int,
                  shards: list[int], mailboxes: list[Any], decay: dict[str, float],
                  timeout: float = EXCHANGE_TIMEOUT_SECONDS, first_epoch: int = 0) -> dict[str, Any]:
    """Partition ``partition`` of replica ``replica`` (``model`` is ``partitioned.model``): train
    until the epochs are done or the partitions agree to stop; its tallies."""
    leave_task_slot()
    trainer = PartitionReplica(replica, partitioned=partitioned, partition=partition, shards=shards,
                               mailboxes=mailboxes, timeout=timeout, data=data, rows=rows, bounds=bounds,
                               config=config, directory=directory, decay=decay)
    return trainer.run(trainer.resume_step(first_epoch))
