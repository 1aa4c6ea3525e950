"""Downpour SGD: parameter-shard actors and asynchronous replicas (docs/algorithms.md §3)."""

from dasklbfgs.solvers.downpour.coordinator import downpour_sgd
from dasklbfgs.solvers.downpour.shard import ParameterShard
from dasklbfgs.solvers.downpour.wire import param_bounds

__all__ = ["ParameterShard", "downpour_sgd", "param_bounds"]
