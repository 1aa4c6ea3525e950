"""Sandblaster L-BFGS: a coordinator over Dask futures computing mega-batch gradients
(docs/algorithms.md §1, §2)."""

from dasklbfgs.solvers.sandblaster.coordinator import sandblaster_lbfgs
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator

__all__ = ["MegaBatchEvaluator", "sandblaster_lbfgs"]
