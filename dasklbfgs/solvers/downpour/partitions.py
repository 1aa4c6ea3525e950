"""Downpour on partitioned replicas: ``downpour_sgd(..., model_partitions=K)`` (docs/algorithms.md §4).

Each model replica is K partition tasks on K distinct workers, one per partition of a
:class:`~dasklbfgs.parallel.base.PartitionedModel`. All K run the Downpour loop of
:class:`~dasklbfgs.solvers.downpour.replica.DownpourReplica` over the same mini-batches (the
same replica index, so the same :class:`~dasklbfgs.solvers._replicas.batches.Batches`), and
each fetches and pushes only its own parameters: the parameter shards hold the
*partitioned* vector, cut at the partitions' boundaries (:func:`partition_bounds`), so every
shard belongs to one partition. Every step the partitions exchange activations and error
sums through their partition program, by the transport Sandblaster's partitions use: each
partition task has a :class:`~dasklbfgs.parallel.actor.PartitionActor` on its worker, which
sends the arrays worker to worker to the destination partition's actor, under the step and
the exchange's key (:class:`~dasklbfgs.parallel.actor.TaskExchanges`).

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

from dasklbfgs._actors import ActorRef
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import PartitionError
from dasklbfgs.models.base import Model
from dasklbfgs.parallel.actor import TaskExchanges
from dasklbfgs.parallel.base import PartitionedModel, layout_of
from dasklbfgs.parallel.exchanges import Step, all_gather, all_sum
from dasklbfgs.solvers._replicas.batches import leave_task_slot
from dasklbfgs.solvers._replicas.wire import param_bounds
from dasklbfgs.solvers.downpour.replica import DownpourReplica, ReplicaConfig, _ShardsLost

__all__ = ["PartitionReplica", "PartitionView", "decay_by_array", "partition_bounds", "run_partition"]


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
    by_array = {name: (block.min(), block.max()) for name, block in layout_of(model).views(coefficients).items()}
    if not (np.allclose(twice_grad, 2.0 * coefficients) and math.isclose(value, 0.5 * coefficients.sum())
            and math.isclose(twice_value, 4.0 * value) and all(low == high for low, high in by_array.values())):
        raise PartitionError(f"{model!r} has a penalty that is not a weight decay: its partitions cannot "
                             "compute their parts of it on their own parameters")
    return {name: float(low) for name, (low, _) in by_array.items() if low != 0.0}


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

    def __init__(self, partitioned: PartitionedModel, p: int, exchanges: TaskExchanges,
                 decay: dict[str, float]) -> None:
        self.partitioned, self.p, self.exchanges = partitioned, p, exchanges
        own = partitioned.param_slices[p]
        self.n_params = own.stop - own.start
        self.decay = partitioned.own_coefficients(p, decay) if decay else None  # None: no penalty

    def objective(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None, *,
                  n: float | None = None, offset: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        assert offset is None, "the partitioned models are neural: Model.check_data refuses data with offsets"
        if n is None:
            n = X.shape[0] if w is None else float(np.sum(w, dtype=np.float64))
        loss_sum, penalty, grad = self.exchanges.run(self._program(params, X, y, w))
        grad /= n  # in place: the program's own array (a model too big for one worker has no room to spare)
        if self.decay is not None:
            grad += self.decay * params
        return loss_sum / n + penalty, grad

    def _program(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None
                 ) -> Step[tuple[float, float, np.ndarray]]:
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
                 partition_actor: ActorRef, data: Dataset, rows: tuple[int, int], bounds: list[tuple[int, int]],
                 config: ReplicaConfig, directory: Any, decay: dict[str, float]) -> None:
        self.partition, self.k, self.shard_indices = partition, partitioned.k, shards
        self.exchanges = TaskExchanges(partition_actor)
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
        self.exchanges.job = "resume"
        steps = self.exchanges.run(all_gather("resume", self.partition, self.k, np.array([float(own)])))
        return int(steps.min())

    def stopping(self, step: int) -> bool:
        """Whether any partition of the replica has a reason to stop (all then stop here)."""
        self.exchanges.job = f"step {step}"
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
        sent = self.exchanges.partition
        return super().tallies(seconds_in_loop, partition=self.partition, bytes_sent=sent.bytes_sent,
                               messages_sent=sent.messages_sent, **extra)


def run_partition(replica: int, *, model: Model, data: Dataset, rows: tuple[int, int], bounds: list[tuple[int, int]],
                  config: ReplicaConfig, directory: Any, partitioned: PartitionedModel, partition: int,
                  shards: list[int], partition_actor: ActorRef, decay: dict[str, float], first_epoch: int = 0
                  ) -> dict[str, Any]:
    """Partition ``partition`` of replica ``replica`` (``model`` is ``partitioned.model``),
    exchanging through its ``partition_actor`` (on this task's worker): train until the epochs are
    done or the partitions agree to stop; its tallies."""
    leave_task_slot()
    trainer = PartitionReplica(replica, partitioned=partitioned, partition=partition, shards=shards,
                               partition_actor=partition_actor, data=data, rows=rows, bounds=bounds,
                               config=config, directory=directory, decay=decay)
    return trainer.run(trainer.resume_step(first_epoch))
