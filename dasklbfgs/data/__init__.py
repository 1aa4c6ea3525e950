"""Sharded Zarr datasets and the recipes that write them."""

from dasklbfgs.data.recipes import RECIPES, make_dataset
from dasklbfgs.data.sharded import ShardedDataset

__all__ = ["ShardedDataset", "make_dataset", "RECIPES"]
