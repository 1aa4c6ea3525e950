"""Downpour SGD's options: the shared replica options plus the paper's fetch/push cadence,
the parameter shards' update rule and how parameters travel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.options import option, override
from dasklbfgs.solvers.common_options import CheckpointOptions, ModelPartitionOptions, ParamShardOptions, ReplicaOptions

__all__ = ["DownpourOptions"]


#: Rules whose state the replicas do not have: no local step by default (local_learning_rate).
ADAPTIVE_RULES = ("adagrad", "ftrl")


@dataclass(frozen=True, kw_only=True)
class DownpourOptions(ReplicaOptions, ParamShardOptions, CheckpointOptions, ModelPartitionOptions):
    solver: ClassVar[str] = "downpour"

    optimizer: str = override(ReplicaOptions, "optimizer", default="adagrad")
    n_fetch: int = option(1, "fetch the parameters from the shards every N steps", "int", minimum=1)
    n_push: int = option(1, "push the accrued gradient to the shards every N steps", "int", minimum=1)
    local_learning_rate: float | None = option(
        None, "rate of the replica's local step on its own copy between fetches", "float", minimum=0,
        nullable=True, none_means="learning_rate for sgd and momentum, 0 (no local step) for adagrad and ftrl")
    warmstart_steps: int = option(0, "train one replica alone for this many steps before releasing the others",
                                  "int", minimum=0)
    wire_dtype: str = option("float64", "dtype of parameters and gradients in transit (float32 halves the "
                             "bytes; shards keep float64)", "choice", choices=("float64", "float32"))
    sparse: bool | None = option(
        None, "push and fetch only the rows of the model's row table that batches touch (word embeddings; "
        "a linear model's feature rows on sparse data without l2)",
        "optional_bool", nullable=True,
        none_means="on when the model has a row table on the data and the update rule allows it exactly")
    overlap: bool = option(False, "keep each push in flight while computing the next gradient (hides the "
                           "round trip, adds one step of staleness; dense transfer only)", "bool")

    def local_rate(self) -> float:
        """The rate of a replica's local step: ``local_learning_rate``, else ``learning_rate``
        for sgd and momentum, 0 (no local step) for the adaptive rules, whose state the
        replicas do not have."""
        if self.local_learning_rate is not None:
            return float(self.local_learning_rate)
        return 0.0 if self.optimizer in ADAPTIVE_RULES else float(self.learning_rate)

    def check_together(self) -> None:
        super().check_together()
        if self.checkpoint_every is not None and self.checkpoint_path is None:
            raise ConfigurationError("downpour: checkpoint_every needs checkpoint_path",
                                     parameters=("checkpoint_every", "checkpoint_path"))
        if self.overlap and self.sparse:
            raise ConfigurationError(
                "downpour: overlap=True needs dense transfer: a row-sparse fetch must arrive before the batch "
                "that reads its rows; pass sparse=False", parameters=("overlap", "sparse")
            )
        if self.model_partitions > 1 and (self.overlap or self.sparse):
            raise ConfigurationError(
                f"downpour: model_partitions={self.model_partitions} runs each partition's pushes in lockstep with "
                f"its peers' and moves whole slices; pass {'overlap=False' if self.overlap else 'sparse=False'} "
                "(or model_partitions=1)", parameters=("model_partitions", "overlap", "sparse")
            )
