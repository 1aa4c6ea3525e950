"""Downpour SGD: parameter-shard actors and asynchronous replicas (docs/algorithms.md §3)."""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports
from dasklbfgs.solvers.downpour.options import DownpourOptions
from dasklbfgs.solvers.registry import PlannedBy, Solver, register, solver_function
from dasklbfgs.solvers.stats import DownpourStats

if TYPE_CHECKING:
    from dasklbfgs.solvers._replicas.parameter_shard import ParameterShard
    from dasklbfgs.solvers._replicas.wire import param_bounds

__all__ = ["DownpourOptions", "ParameterShard", "downpour_sgd", "param_bounds"]

# The actors and the coordinator (Dask) load with a run, not with the package.
__getattr__, __dir__ = lazy_exports(__name__, {"ParameterShard": "dasklbfgs.solvers._replicas.parameter_shard",
                                               "param_bounds": "dasklbfgs.solvers._replicas.wire"})

SUMMARY = """Train ``model`` on ``data`` with Downpour SGD on Dask actors.

    ``n_param_shards`` ParameterShard actors own contiguous slices of the parameters and
    apply the update rule (Adagrad by default; ``optimizer="ftrl"``, FTRL-Proximal, also
    minimises the model's ``l1`` term) themselves; ``n_replicas`` replica tasks,
    each on its own contiguous block of rows, fetch every ``n_fetch`` steps, compute a
    mini-batch gradient and push every ``n_push`` steps, never waiting for each other. A
    lost parameter shard is re-created from the latest checkpoint. With
    ``model_partitions=K`` each replica is K partition tasks on K workers, in lockstep,
    each fetching and pushing only its own shards (docs/algorithms.md §4). Returns a
    :class:`~dasklbfgs.solvers.result.Result` (``x``, ``fun``, ``nit`` = global steps,
    ``status``, ``success``, ``message``, ``history``, ``stats``: updates/s, examples/s,
    staleness, bytes moved, pushes per shard, steps per replica)."""

SOLVER = register(Solver("downpour", DownpourOptions,
                         PlannedBy("dasklbfgs.solvers.downpour.coordinator", "plan_downpour"), SUMMARY, DownpourStats,
                         l1_optimizers=("ftrl",)))
downpour_sgd = solver_function("downpour_sgd", "downpour", DownpourOptions, SUMMARY)
