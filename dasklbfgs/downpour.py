"""Downpour SGD and its peers (the public names; the implementations are
:mod:`dasklbfgs.solvers.downpour` and :mod:`dasklbfgs.solvers.peers`)."""

from dasklbfgs.solvers.downpour import ParameterShard, downpour_sgd, param_bounds
from dasklbfgs.solvers.peers import easgd, gossip_sgd, neighbour_sgd, sync_sgd

__all__ = ["ParameterShard", "downpour_sgd", "easgd", "gossip_sgd", "neighbour_sgd", "param_bounds", "sync_sgd"]
