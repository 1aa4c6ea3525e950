"""Downpour SGD: parameter-shard actors and asynchronous model replicas."""

from dasklbfgs.downpour.coordinator import downpour_sgd, param_bounds
from dasklbfgs.downpour.shard import ParameterShard

__all__ = ["ParameterShard", "downpour_sgd", "param_bounds"]
