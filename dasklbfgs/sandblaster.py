"""Sandblaster's procedures, L-BFGS and Newton's method (the public names; the implementation
is :mod:`dasklbfgs.solvers.sandblaster`)."""

from dasklbfgs.solvers.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs, sandblaster_newton

__all__ = ["MegaBatchEvaluator", "sandblaster_lbfgs", "sandblaster_newton"]
