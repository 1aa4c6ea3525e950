"""dasklbfgs: DistBelief's Sandblaster L-BFGS and Downpour SGD on Dask, and their peers
(synchronous all-reduce SGD, elastic averaging, gossip, neighbour exchange).

Data lives in sharded Zarr datasets (:class:`ShardedDataset`); everything is scheduled by
the Dask distributed scheduler, an embedded ``LocalCluster`` by default (:func:`connect`).

The names below are imported on first use (:mod:`dasklbfgs._lazy`): ``import dasklbfgs``
is light, for the ``dasklbfgs`` command and for the workers that import it to run our tasks.
"""

from typing import TYPE_CHECKING

from dasklbfgs import errors
from dasklbfgs._lazy import lazy_exports
from dasklbfgs._version import __version__ as __version__

if TYPE_CHECKING:
    from dasklbfgs.cluster import connect
    from dasklbfgs.data import ShardedDataset, make_dataset
    from dasklbfgs.models import MLP, EmbeddingLM, LeastSquares, LocalAutoencoder, Logistic, Softmax, SparseAutoencoder
    from dasklbfgs.optim import Status
    from dasklbfgs.scoring import evaluate, inference, predict
    from dasklbfgs.selection import cross_validated_path, regularization_path
    from dasklbfgs.solvers import (
        DownpourOptions,
        EASGDOptions,
        GossipOptions,
        NeighbourOptions,
        NewtonSolverOptions,
        Result,
        SandblasterOptions,
        SyncOptions,
        downpour_sgd,
        easgd,
        gossip_sgd,
        minimize,
        neighbour_sgd,
        sandblaster_lbfgs,
        sandblaster_newton,
        solver_names,
        sync_sgd,
    )
    from dasklbfgs.solvers.sandblaster.cached import cached

__all__ = [
    # solvers and their options
    "minimize", "solver_names", "Result", "Status",
    "sandblaster_lbfgs", "sandblaster_newton", "downpour_sgd", "sync_sgd", "easgd", "gossip_sgd", "neighbour_sgd",
    "SandblasterOptions", "NewtonSolverOptions", "DownpourOptions", "SyncOptions", "EASGDOptions", "GossipOptions",
    "NeighbourOptions",
    # models, data, cluster
    "LeastSquares", "Logistic", "Softmax", "MLP", "SparseAutoencoder", "LocalAutoencoder", "EmbeddingLM",
    "ShardedDataset", "make_dataset", "connect", "errors",
    # scoring
    "evaluate", "predict", "inference",
    # many fits on the same rows
    "cached", "regularization_path", "cross_validated_path",
]

_SOLVER_NAMES = ("minimize", "solver_names", "Result", "sandblaster_lbfgs", "sandblaster_newton", "downpour_sgd",
                 "sync_sgd", "easgd", "gossip_sgd", "neighbour_sgd", "SandblasterOptions", "NewtonSolverOptions",
                 "DownpourOptions", "SyncOptions",
                 "EASGDOptions", "GossipOptions", "NeighbourOptions")
_MODEL_NAMES = ("LeastSquares", "Logistic", "Softmax", "MLP", "SparseAutoencoder", "LocalAutoencoder", "EmbeddingLM")

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(_SOLVER_NAMES, "dasklbfgs.solvers"),
    **dict.fromkeys(_MODEL_NAMES, "dasklbfgs.models"),
    "Status": "dasklbfgs.optim",
    "ShardedDataset": "dasklbfgs.data",
    "evaluate": "dasklbfgs.scoring",
    "predict": "dasklbfgs.scoring",
    "inference": "dasklbfgs.scoring",
    "cached": "dasklbfgs.solvers.sandblaster.cached",
    "regularization_path": "dasklbfgs.selection",
    "cross_validated_path": "dasklbfgs.selection",
    "make_dataset": "dasklbfgs.data",
    # through the solvers, which register what an embedded cluster starts with (the portion
    # service on its workers: dasklbfgs.cluster.prepare_embedded_clusters)
    "connect": "dasklbfgs.solvers",
})
