"""dasklbfgs: DistBelief's Sandblaster L-BFGS and Downpour SGD on Dask, and their peers
(synchronous all-reduce SGD, elastic averaging, gossip, neighbour exchange).

Data lives in sharded Zarr datasets (:class:`ShardedDataset`); everything is scheduled by
the Dask distributed scheduler, an embedded ``LocalCluster`` by default (:func:`connect`).
"""

from dasklbfgs import errors
from dasklbfgs.cluster import connect
from dasklbfgs.data import ShardedDataset, make_dataset
from dasklbfgs.models import MLP, EmbeddingLM, LeastSquares, Logistic, Softmax, SparseAutoencoder
from dasklbfgs.optim import Status
from dasklbfgs.solvers import (
    DownpourOptions, EASGDOptions, GossipOptions, Result, NeighbourOptions, SandblasterOptions, SyncOptions, downpour_sgd,
    easgd, gossip_sgd, minimize, neighbour_sgd, sandblaster_lbfgs, solver_names, sync_sgd,
)

__all__ = [
    "DownpourOptions",
    "EASGDOptions",
    "GossipOptions",
    "NeighbourOptions",
    "Result",
    "SandblasterOptions",
    "Status",
    "SyncOptions",
    "minimize",
    "solver_names",
    "EmbeddingLM",
    "LeastSquares",
    "Logistic",
    "MLP",
    "SparseAutoencoder",
    "downpour_sgd",
    "easgd",
    "gossip_sgd",
    "neighbour_sgd",
    "sync_sgd",
    "ShardedDataset",
    "Softmax",
    "connect",
    "errors",
    "make_dataset",
    "sandblaster_lbfgs",
]
__version__ = "0.1.0"
