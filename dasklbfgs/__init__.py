"""dasklbfgs: DistBelief's Sandblaster L-BFGS and Downpour SGD on Dask.

Data lives in sharded Zarr datasets (:class:`ShardedDataset`); everything is scheduled by
the Dask distributed scheduler, an embedded ``LocalCluster`` by default (:func:`connect`).
"""

from dasklbfgs import errors
from dasklbfgs.cluster import connect
from dasklbfgs.data import ShardedDataset, make_dataset

__all__ = ["ShardedDataset", "connect", "errors", "make_dataset"]
__version__ = "0.1.0"
