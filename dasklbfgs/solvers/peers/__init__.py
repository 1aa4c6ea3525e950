"""The synchronous and decentralized alternatives to Downpour's parameter servers:
all-reduce SGD, elastic averaging, gossip and neighbour exchange (docs/algorithms.md §6, §7)."""

from dasklbfgs.solvers.peers.coordinator import easgd, gossip_sgd, neighbour_sgd, sync_sgd

__all__ = ["easgd", "gossip_sgd", "neighbour_sgd", "sync_sgd"]
