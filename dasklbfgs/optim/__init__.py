"""Pure-numpy optimization: L-BFGS (two-loop on a Gram matrix), strong Wolfe line search."""

from dasklbfgs.optim.basis import GramMatrix, LocalBasis
from dasklbfgs.optim.lbfgs import LBFGSOptions, LBFGSState, Status, lbfgs_minimize
from dasklbfgs.optim.linesearch import LineSearchResult, strong_wolfe
from dasklbfgs.optim.two_loop import two_loop_coefficients

__all__ = [
    "LBFGSOptions",
    "LBFGSState",
    "LineSearchResult",
    "GramMatrix",
    "LocalBasis",
    "Status",
    "lbfgs_minimize",
    "strong_wolfe",
    "two_loop_coefficients",
]
