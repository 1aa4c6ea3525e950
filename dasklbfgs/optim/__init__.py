"""Pure-numpy optimization: L-BFGS (two-loop on a Gram matrix), strong Wolfe line search,
and OWL-QN for L1 penalties."""

from dasklbfgs.optim.basis import GramMatrix, LocalBasis
from dasklbfgs.optim.lbfgs import LBFGSOptions, LBFGSState, Status, lbfgs_minimize
from dasklbfgs.optim.linesearch import LineSearchResult, backtracking_armijo, strong_wolfe
from dasklbfgs.optim.owlqn import owlqn_minimize, pseudo_gradient
from dasklbfgs.optim.two_loop import two_loop_coefficients

__all__ = [
    "LBFGSOptions",
    "LBFGSState",
    "LineSearchResult",
    "GramMatrix",
    "LocalBasis",
    "Status",
    "backtracking_armijo",
    "lbfgs_minimize",
    "owlqn_minimize",
    "pseudo_gradient",
    "strong_wolfe",
    "two_loop_coefficients",
]
