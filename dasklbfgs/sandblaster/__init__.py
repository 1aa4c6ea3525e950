"""Sandblaster L-BFGS: a coordinator over Dask futures computing mega-batch gradients."""

from dasklbfgs.sandblaster.coordinator import sandblaster_lbfgs
from dasklbfgs.sandblaster.evaluator import MegaBatchEvaluator

__all__ = ["MegaBatchEvaluator", "sandblaster_lbfgs"]
