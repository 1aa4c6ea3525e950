"""Options more than one solver takes, declared once as dataclass mixins.

A solver's options class inherits the groups it uses; where a solver's natural default
differs, it re-declares the field with :func:`dasklbfgs.options.override` (same help text
and checks, another default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dasklbfgs._typing import Dataset, DatasetLike, PathLike
from dasklbfgs.data.location import Location, has_scheme
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.updates import RULES
from dasklbfgs.options import Options, PlannedWork, option

__all__ = ["CheckpointOptions", "HeldOutOptions", "ModelPartitionOptions", "ParamShardOptions", "ReplicaOptions",
           "RunNameOptions", "global_steps_per_epoch", "replica_rows", "with_checkpoint_storage", "without_held_out"]


@dataclass(frozen=True, kw_only=True)
class RunNameOptions(Options):
    """Every solver's: what the user calls the run (the dashboard's run picker, the start event)."""

    name: str | None = option(
        None, "the run's name on the dashboard's Training page (its picker, legends and settings)", "text",
        nullable=True, none_means="the run's id, e.g. sandblaster-1a2b3c4d")


@dataclass(frozen=True, kw_only=True)
class HeldOutOptions(Options):
    eval_every: int | None = option(
        None, "score the held-out data (eval_data, --test) every N iterations (Sandblaster) or global steps "
        "(the replica methods) and at the end", "int", minimum=1, nullable=True,
        none_means="only at the end")
    validation_fraction: float | None = option(
        None, "hold out this fraction of the training rows as the held-out data instead of eval_data (each row by "
        "a seeded draw per shard: the same rows whatever the worker count); the run trains on the others", "float",
        positive=True, below=1.0, nullable=True, none_means="no rows held out: eval_data, if given")
    early_stopping: bool = option(
        False, "stop once the held-out objective (eval_data, scored every eval_every) has not improved by more "
        "than min_improvement for n_iter_no_change scorings in a row; the result then holds the parameters of "
        "its best scoring (status EARLY_STOPPED)", "bool")
    n_iter_no_change: int = option(5, "early_stopping's patience: held-out scorings without an improvement",
                                   "int", minimum=1)
    min_improvement: float = option(0.0, "early_stopping: the least decrease of the held-out objective that "
                                    "counts as an improvement", "float", minimum=0)


def without_held_out(options: Options, eval_data: DatasetLike | None) -> Options:
    """``options`` with ``eval_every`` unset when there is no held-out data (no eval_data and
    no validation_fraction): what the CLI and
    pipelines do with a config that sets it for runs with and without a test set (the API
    itself refuses eval_every without eval_data)."""
    if eval_data is None and getattr(options, "eval_every", None) is not None \
            and getattr(options, "validation_fraction", None) is None:
        return options.replace(eval_every=None)
    return options


@dataclass(frozen=True, kw_only=True)
class ParamShardOptions(Options):
    n_param_shards: int = option(
        2, "parameter-shard actors, each holding a contiguous slice of the parameters (Sandblaster: with "
        "state='sharded'; EASGD: the center)", "int", minimum=1, aliases=("param_shards",))


@dataclass(frozen=True, kw_only=True)
class ModelPartitionOptions(Options):
    model_partitions: int = option(
        1, "partitions of each model replica, each on a worker of its own, exchanging only the activations "
        "that cross a partition boundary (model parallelism; models dasklbfgs.parallel.partition splits)", "int",
        minimum=1)


@dataclass(frozen=True, kw_only=True)
class CheckpointOptions(Options):
    checkpoint_path: PathLike | Location | None = option(
        None, "Zarr checkpoint, written atomically (Sandblaster: the L-BFGS state; Downpour: the parameter "
        "shards and their optimizer state): a local path, or a URL (s3://, gs://, ...) reached with the "
        "training dataset's storage_options when it lives in the same kind of store (a Location carries its own)",
        "path", nullable=True, none_means="no checkpoints", aliases=("checkpoint",))
    checkpoint_every: int | None = option(
        None, "write the checkpoint every N iterations (Sandblaster) or global steps (Downpour), and at the end",
        "int", minimum=1, nullable=True, none_means="only at the end")
    resume: bool = option(False, "continue from the checkpoint at checkpoint_path, if there is one", "bool")

    def check_together(self) -> None:
        super().check_together()
        if self.resume and self.checkpoint_path is None:
            raise ConfigurationError(f"{self.solver}: resume=True needs checkpoint_path",
                                     parameters=("resume", "checkpoint_path"))

    def checkpoint_location(self, data: Dataset) -> Location | None:
        """Where the checkpoint is (None: no checkpoints). A URL given as a string is reached
        with the training dataset's ``storage_options`` when the dataset lives at a URL of the
        same scheme: the same store, which usually takes the same credentials. A checkpoint
        in another store gets its filesystem's defaults (environment credentials), and a
        :class:`~dasklbfgs.data.location.Location` keeps its own options."""
        where = self.checkpoint_path
        if where is None or isinstance(where, Location):
            return where
        data_location = getattr(data, "location", None)  # a ShardedDataset's; another Dataset lends none
        text = str(where)
        if isinstance(data_location, Location) and has_scheme(text) and not data_location.is_local \
                and text.split(":", 1)[0].lower() == data_location.url.split(":", 1)[0]:
            return Location.of(text, data_location.storage_options)
        return Location.of(where)


def with_checkpoint_storage(options: Options, storage_options: dict[str, Any] | None) -> Options:
    """``options`` with a ``checkpoint_path`` given as a URL string made a
    :class:`~dasklbfgs.data.location.Location` reached with ``storage_options``: what the CLI's
    ``--storage-option`` flags and a pipeline's ``storage_options:`` do for the checkpoint
    (a local path, a Location already, or no options: unchanged)."""
    where = getattr(options, "checkpoint_path", None)
    if not storage_options or where is None or isinstance(where, Location) or not has_scheme(str(where)):
        return options
    return options.replace(checkpoint_path=Location.of(str(where), storage_options))


def replica_rows(n_samples: int, n_replicas: int) -> list[tuple[int, int]]:
    """Contiguous, nearly equal row ranges, one per replica (its training subset)."""
    edges = [n_samples * r // n_replicas for r in range(n_replicas + 1)]
    return list(zip(edges[:-1], edges[1:]))


def global_steps_per_epoch(n_samples: int, n_replicas: int, batch_size: int) -> int:
    """Mini-batch steps summed over the replicas (the global step's unit) in one epoch."""
    return sum(math.ceil((b - a) / batch_size) for a, b in replica_rows(n_samples, n_replicas))



@dataclass(frozen=True, kw_only=True)
class ReplicaOptions(HeldOutOptions, RunNameOptions):
    """Downpour's and the peer methods' shared options: replicas, batches, the update rule."""

    n_replicas: int = option(2, "model replicas; replica r trains on the r-th contiguous block of rows", "int",
                             minimum=1, aliases=("replicas",))
    batch_size: int = option(128, "mini-batch rows per replica step", "int", minimum=1)
    learning_rate: float = option(0.1, "rate of the update rule (Adagrad: gamma, usually ~10x the best fixed "
                                  "SGD rate; FTRL: alpha)", "float", positive=True)
    optimizer: str = option("sgd", "update rule (ftrl: FTRL-Proximal; with Downpour it minimises the model's l1)",
                            "choice", choices=tuple(RULES))
    optimizer_options: dict[str, Any] | None = option(
        None, "further hyper-parameters of the update rule, e.g. {beta: 0.9, nesterov: true} for momentum, "
        "{beta: 1.0, l2: 0.0} for ftrl (its l1 is the model's)",
        "mapping", nullable=True, none_means="the rule's defaults")
    epochs: int = option(1, "passes of each replica over its rows", "int", minimum=1)
    max_steps: int | None = option(
        None, "stop once the global step (mini-batch steps summed over replicas) reaches this", "int",
        minimum=1, nullable=True, none_means="no limit")
    seed: int = option(0, "seed of the mini-batch order", "int", minimum=0)
    defer_eval: bool = option(False, "keep the parameters due for held-out scoring and score them after "
                              "training (scoring then takes no CPU from the replicas)", "bool")
    poll_interval: float = option(0.05, "seconds between the coordinator's progress polls", "float",
                                  positive=True)

    def planned_work(self, n_samples: int) -> PlannedWork:
        """The global steps the epochs take (or ``max_steps``, if fewer), and one epoch's."""
        per_epoch = global_steps_per_epoch(n_samples, self.n_replicas, self.batch_size)
        planned = self.epochs * per_epoch
        return PlannedWork(planned if self.max_steps is None else min(self.max_steps, planned), per_epoch, False)

    def check_together(self) -> None:
        super().check_together()
        if self.optimizer == "ftrl" and self.optimizer_options is not None and "l1" in self.optimizer_options:
            raise ConfigurationError(
                f"{self.solver}: FTRL takes its l1 from the model, where it is the objective's and spares the "
                f"intercepts: give l1 to the model (e.g. Logistic(..., l1={self.optimizer_options['l1']!r})) instead "
                "of optimizer_options")
