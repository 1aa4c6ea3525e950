"""Downpour SGD (parameter-shard actors, asynchronous replicas) and its peers: synchronous
all-reduce SGD, elastic averaging, gossip and neighbour exchange."""

from dasklbfgs.downpour.coordinator import downpour_sgd, param_bounds
from dasklbfgs.downpour.peers import easgd, gossip_sgd, neighbour_sgd, sync_sgd
from dasklbfgs.downpour.shard import ParameterShard

__all__ = ["ParameterShard", "downpour_sgd", "easgd", "gossip_sgd", "neighbour_sgd", "param_bounds", "sync_sgd"]
