"""Sandblaster L-BFGS (the public name; the implementation is :mod:`dasklbfgs.solvers.sandblaster`)."""

from dasklbfgs.solvers.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs

__all__ = ["MegaBatchEvaluator", "sandblaster_lbfgs"]
