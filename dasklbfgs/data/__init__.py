"""Sharded Zarr datasets and the recipes that write them.

Imported on first use (:mod:`dasklbfgs._lazy`): :mod:`dasklbfgs.data.location`, which the
command line's storage flags read, does not bring zarr with it.
"""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports

if TYPE_CHECKING:
    from dasklbfgs.data.recipes import RECIPES, make_dataset
    from dasklbfgs.data.sharded import ShardedDataset

__all__ = ["ShardedDataset", "make_dataset", "RECIPES"]

__getattr__, __dir__ = lazy_exports(__name__, {"ShardedDataset": "dasklbfgs.data.sharded",
                                               "make_dataset": "dasklbfgs.data.recipes",
                                               "RECIPES": "dasklbfgs.data.recipes"})
