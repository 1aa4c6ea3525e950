"""The options of Sandblaster's procedures: how the mega-batch is computed (:class:`MegaBatchOptions`),
with L-BFGS's limits (:class:`SandblasterOptions`) or Newton's (:class:`NewtonSolverOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.lbfgs import LBFGSOptions
from dasklbfgs.optim.newton import NewtonOptions
from dasklbfgs.options import Options, PlannedWork, option, override
from dasklbfgs.solvers.common_options import (
    CheckpointOptions,
    HeldOutOptions,
    ModelPartitionOptions,
    ParamShardOptions,
    RunNameOptions,
)
from dasklbfgs.solvers.sandblaster.portions import DEFAULT_PORTIONS

__all__ = ["MegaBatchOptions", "NewtonSolverOptions", "SandblasterOptions"]


@dataclass(frozen=True, kw_only=True)
class MegaBatchOptions(Options):
    """How a Sandblaster procedure's evaluations are computed: the portions, their backups and
    the cached shards (L-BFGS's and Newton's alike)."""

    portion_rows: int | None = option(
        None, "rows per portion, the unit of work of one task", "int", minimum=1, nullable=True,
        none_means=f"the data cut into about {DEFAULT_PORTIONS} portions of at most a shard (streaming: one "
        "per shard), whatever the cluster, so the bits are too")
    backup_tasks: bool = option(True, "copy the outstanding portions of straggling workers to idle ones and "
                                "take the first result", "bool")
    backup_slack: float = option(1.5, "a worker is a straggler when it progresses this many times slower than "
                                 "the fastest finished one", "float", minimum=1)
    cache: bool | str = option("auto", "keep shards in worker memory (True), stream them from Zarr every "
                               "evaluation (False), or cache when they fit in half the workers' memory "
                               "('auto')", "bool_or_auto")


@dataclass(frozen=True, kw_only=True)
class SandblasterOptions(MegaBatchOptions, ModelPartitionOptions, CheckpointOptions, ParamShardOptions,
                         HeldOutOptions, RunNameOptions, LBFGSOptions):
    solver: ClassVar[str] = "sandblaster"

    # Every iteration is a pass over the whole dataset on the cluster: a run that has not
    # converged after 100 says so (success=False) rather than running on for scipy's 15000.
    maxiter: int = override(LBFGSOptions, "maxiter", default=100)
    eval_every: int | None = override(HeldOutOptions, "eval_every", default=1)
    checkpoint_every: int | None = override(CheckpointOptions, "checkpoint_every", default=1)
    # None here (the default with state='sharded'), where ParamShardOptions declares an int: the
    # mixin only declares the option, read through the solvers' own options classes
    n_param_shards: int | None = override(  # type: ignore[assignment]
        ParamShardOptions, "n_param_shards", default=None, nullable=True,
        none_means=f"{ParamShardOptions.default('n_param_shards')} with state='sharded'")
    standardize: bool = option(False, "optimise in standardised feature coordinates (linear models; the "
                               "objective and its minimiser are unchanged)", "bool")
    state: str = option("local", "where the L-BFGS vectors live: in the coordinator ('local') or in slices "
                        "on n_param_shards actors ('sharded'; the coordinator keeps only scalars)", "choice",
                        choices=("local", "sharded"))

    online_passes: int = option(0, "passes of Adagrad over the shards before L-BFGS starts: each shard's rows "
                                "from the same point, the results averaged, L-BFGS (or OWL-QN) from there "
                                "(0: none)", "int", minimum=0)
    online_learning_rate: float = option(0.05, "Adagrad's learning rate in the online passes", "float",
                                         positive=True)

    def check_together(self) -> None:
        super().check_together()
        if self.online_passes and self.model_partitions > 1:
            raise ConfigurationError(
                f"sandblaster option online_passes steps the whole model on each shard's worker; with "
                f"model_partitions={self.model_partitions} no worker holds it (online_passes={self.online_passes})",
                parameters=("online_passes", "model_partitions"),
            )
        if self.state == "local" and self.n_param_shards is not None:
            raise ConfigurationError(
                f"sandblaster option n_param_shards applies to state='sharded' (L-BFGS vectors on parameter-shard "
                f"actors), got n_param_shards={self.n_param_shards} with state='local'",
                parameters=("n_param_shards", "state"),
            )

    def planned_work(self, n_samples: int) -> PlannedWork:
        """``maxiter``: a limit, which a converging run stops short of."""
        return PlannedWork(self.maxiter, None, True)

    @property
    def param_shards(self) -> int:
        """How many parameter shards hold the L-BFGS vectors with ``state='sharded'``."""
        return ParamShardOptions.default("n_param_shards") if self.n_param_shards is None else self.n_param_shards


@dataclass(frozen=True, kw_only=True)
class NewtonSolverOptions(MegaBatchOptions, HeldOutOptions, RunNameOptions, NewtonOptions):
    """Sandblaster's Newton procedure: Newton's limits, and the evaluations as L-BFGS's."""

    solver: ClassVar[str] = "newton"

    eval_every: int | None = override(HeldOutOptions, "eval_every", default=1)

    def planned_work(self, n_samples: int) -> PlannedWork:
        """``maxiter``: a limit, which a converging run stops well short of."""
        return PlannedWork(self.maxiter, None, True)
