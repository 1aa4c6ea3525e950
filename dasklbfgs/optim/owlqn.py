"""OWL-QN: L-BFGS for ``f(x) + sum_j w_j |x_j|`` (Andrew and Gao 2007; docs/algorithms.md §8),
and within bounds ``lower <= x <= upper`` (projected quasi-Newton, §12).

``f`` is smooth (``evaluate(x) -> (f, g)``, as for :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize`);
``w_j >= 0`` are per-coordinate L1 weights (zero on intercepts). The method keeps L-BFGS's
two-loop recursion, basis and stopping rules and changes four things, all element-wise:

- the *pseudo-gradient* ``v`` (the minimum-norm subgradient of the objective) replaces ``g``
  in the direction and in the gradient-norm test;
- the direction ``p = -H v`` is zeroed where its sign disagrees with ``-v`` (penalised
  coordinates only);
- each trial point is projected onto the orthant of the current iterate (or, at zero, the
  orthant ``-v`` points into): coordinates that would cross zero stop at exactly zero;
- the line search backtracks until Armijo's condition holds on the full objective, with the
  pseudo-gradient's linear prediction ``v . (x_trial - x)``.

The curvature pairs use the smooth gradient: ``y = g_new - g``. Bounds add a box to the
orthant: a coordinate on a bound whose ``-v`` points out of the box has ``v = 0`` (the
projected gradient), the direction does not leave the box from a bound, and each trial point
is clipped into it (:class:`~dasklbfgs.optim.constraints.Constraints` does this work).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.basis import LocalBasis, keep_pair
from dasklbfgs.optim.constraints import Constraints, box
from dasklbfgs.optim.lbfgs import (
    Evaluate,
    LBFGSOptions,
    LBFGSState,
    LocalVectors,
    evaluate_start,
    lbfgs_minimize,
    quasi_newton_iteration,
    run_iterations,
    start_run,
)
from dasklbfgs.optim.linesearch import backtracking_armijo
from dasklbfgs.optim.two_loop import two_loop_coefficients
from dasklbfgs.optim.vectors import max_abs

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

__all__ = ["l1_weights", "owlqn_minimize", "pseudo_gradient"]


def l1_weights(l1: Any, n: int, penalised: Any = None) -> np.ndarray:
    """Per-coordinate L1 weights: ``l1`` (a number or ``n`` numbers) where ``penalised`` (a
    boolean mask, an index array or a slice; ``None``: every coordinate), zero elsewhere."""
    weights = np.array(l1, dtype=np.float64)
    if weights.shape not in ((), (n,)):
        raise ConfigurationError(f"l1 must be a number or {n} numbers (one per coordinate), got shape {weights.shape}")
    weights = np.broadcast_to(weights, (n,)).copy()
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        bad = float(weights[~(np.isfinite(weights) & (weights >= 0))][0])
        raise ConfigurationError(f"l1 must be non-negative and finite, got {bad!r}; use 0 for no L1 penalty")
    if penalised is not None:
        mask = np.zeros(n, dtype=bool)
        mask[penalised] = True
        weights[~mask] = 0.0
    return weights


def pseudo_gradient(x: np.ndarray, g: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The minimum-norm subgradient of ``f + sum w |x|`` (:meth:`Constraints.pseudo_gradient`
    without a box)."""
    return Constraints(weights).pseudo_gradient(x, g)


class OrthantSpace(LocalVectors):
    """The OWL-QN vectors in this process, with the questions :func:`run_iterations` asks.

    ``state.g`` is the smooth gradient; the basis holds the pseudo-gradient as its
    gradient vector, so the two-loop recursion gives ``-H v``. ``constraints`` are the L1
    weights and the box (:class:`~dasklbfgs.optim.constraints.Constraints`).
    """

    def __init__(self, evaluate: Evaluate, state: LBFGSState, constraints: Constraints) -> None:
        self.evaluate, self.state, self.constraints = evaluate, state, constraints
        self.basis: LocalBasis = state.basis  # type: ignore[assignment]
        self.pg = constraints.pseudo_gradient(self._x, self._g)
        self._p = np.zeros(0)
        self._orthant: np.ndarray | None = None
        self._trials: dict[float, tuple[np.ndarray, float, np.ndarray]] = {}

    def set_direction(self, delta: np.ndarray) -> float:
        """Point along ``sum delta_l b_l``, aligned with ``-v`` and the box; returns ``v . p``."""
        p = self.basis.combine(delta)
        self.constraints.align(self._x, p, self.pg)
        self._p = p
        self._orthant = self.constraints.orthant(self._x, self.pg)
        self._trials = {}
        return float(self.pg @ p)

    def trial(self, alpha: float) -> tuple[float, float]:
        """The full objective at the projected trial point and ``v . (x_trial - x)``."""
        x_trial = self._x + alpha * self._p
        self.constraints.project_trial(x_trial, self._orthant)
        f_trial, g_trial = self.evaluate(x_trial)
        objective = float(f_trial) + self.constraints.l1_term(x_trial)
        self._trials[alpha] = (x_trial, objective, g_trial)
        return objective, float(self.pg @ (x_trial - self._x))

    def accept(self, alpha: float) -> float:
        """Move to the trial point at ``alpha``; the pair uses the smooth gradients."""
        x_new, objective, g_new = self._trials[alpha]
        s, y = x_new - self._x, g_new - self._g
        keep = keep_pair(float(s @ y), -float(self.pg @ s))  # pg where the step began
        self.pg = self.constraints.pseudo_gradient(x_new, g_new)
        self.basis.advance((s, y) if keep else None, self.pg)
        self.state.x, self.state.g = x_new, g_new
        return objective

    def gmax(self) -> float:
        return max_abs(self.pg)

    def x(self) -> np.ndarray:
        return self._x.copy()

    def g(self) -> np.ndarray:
        """The pseudo-gradient (zero at a minimum, where the smooth gradient is not)."""
        return self.pg.copy()


def owlqn_minimize(
    evaluate: Evaluate,
    x0: np.ndarray,
    l1: Any,
    options: LBFGSOptions | None = None,
    *,
    penalised: Any = None,
    callback: Callable[[OptimizeResult], Any] | None = None,
    state: LBFGSState | None = None,
    on_iteration: Callable[[LBFGSState], str | None] | None = None,
    space: Any = None,
    lower: Any = None,
    upper: Any = None,
) -> tuple[OptimizeResult, LBFGSState]:
    """Minimise ``f(x) + sum_j w_j |x_j|`` from ``x0`` (or continue from ``state``) with OWL-QN,
    within ``lower <= x <= upper`` when bounds are given.

    Parameters
    ----------
    evaluate
        ``x -> (f(x), grad f(x))`` of the smooth part.
    x0
        Starting point (ignored when ``state`` is given).
    l1
        The L1 weight: a number, or one per coordinate (:func:`l1_weights`).
    options
        :class:`~dasklbfgs.optim.lbfgs.LBFGSOptions`: the same memory, limits and tolerances.
    penalised
        Which coordinates carry the L1 term (a boolean mask, indices or a slice); default all.
    callback, state, on_iteration
        As for :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize`.
    lower, upper
        Bounds (a number, or one per coordinate; None, -inf and inf: none), checked by
        :func:`~dasklbfgs.optim.constraints.box`; ``x0`` is clipped into them.
    space
        Where the vectors live, when not in this process (``evaluate`` and ``x0`` are then
        unused): as for :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize`, a space holding the
        same weights whose ``size`` is the number of coordinates, ``start()`` returns the full
        objective, ``set_direction`` returns ``v . p`` after the alignment and ``trial``
        returns the full objective and ``v . (x_trial - x)`` (the sharded Sandblaster state,
        :class:`~dasklbfgs.solvers.sandblaster.sharded_space.ShardedSpace`).

    Returns
    -------
    (OptimizeResult, LBFGSState)
        ``fun`` is the full objective (L1 term included) and ``jac`` the pseudo-gradient;
        ``state.g`` is the smooth gradient. Coordinates that the L1 term sets to zero are
        exactly ``0.0``.

    Notes
    -----
    Stopping is L-BFGS's with the pseudo-gradient (projected onto the box: zero on a bound
    it pushes against) in place of the gradient: ``max|v| <= gtol``;
    the relative decrease of the full objective ``<= ftol``; ``maxiter``; ``maxfun``; a
    failed backtracking search (retried once along ``-v``) gives status 2, a non-finite
    objective on it status 3. Without any positive weight or bound this *is* L-BFGS: the
    call is :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize` itself, so the iterates are the same bits.
    """
    opts = options or LBFGSOptions()
    n = space.size if space is not None else (state.x if state is not None and state.x is not None
                                              else np.asarray(x0)).size
    constraints = constraints_of(l1, n, penalised, lower, upper)
    if constraints is None:
        return lbfgs_minimize(evaluate, x0, opts, callback=callback, state=state, on_iteration=on_iteration,
                              space=space)
    if space is not None:
        space, state = start_run(evaluate, x0, opts, state, space)
        return run_iterations(space, state, opts, _iterate, callback=callback, on_iteration=on_iteration)
    if state is None:
        x, f, g = evaluate_start(evaluate, constraints.project(np.array(x0, dtype=np.float64)))
        state = LBFGSState(x=x, f=f + constraints.l1_term(x), g=g, basis=LocalBasis(x.size, opts.history), nfev=1)
    space = OrthantSpace(evaluate, state, constraints)
    space.basis.set_gradient(space.pg)
    return run_iterations(space, state, opts, _iterate, callback=callback, on_iteration=on_iteration)


def constraints_of(l1: Any, n: int, penalised: Any = None, lower: Any = None, upper: Any = None
                   ) -> Constraints | None:
    """The :class:`Constraints` of ``n`` coordinates with these L1 weights (None or all 0: no
    L1 term) and bounds; None when there is neither an L1 term nor a bound (plain L-BFGS)."""
    weights = None if l1 is None else l1_weights(l1, n, penalised)
    if weights is not None and not np.any(weights > 0):
        weights = None
    low, high = box(lower, upper, n)
    if weights is None and low is None and high is None:
        return None
    return Constraints(weights, low, high)


def _orthant_direction(space: Any) -> tuple[float, float]:
    """``-H v`` sign-aligned with ``-v`` (``-v`` when that is no descent or no pair is stored)."""
    basis = space.basis
    slope = space.set_direction(two_loop_coefficients(basis.gram(), basis.k))
    if slope < 0 and basis.k > 0:
        return slope, 1.0
    basis.drop_pairs()
    slope = space.set_direction(two_loop_coefficients(basis.gram(), 0))
    return slope, 1.0 / math.sqrt(-slope)  # a first step of length 1 along -v


def _armijo_search(phi: Callable[[float], tuple[float, float]], f0: float, slope: float, alpha1: float,
                   budget: int) -> Any:
    return backtracking_armijo(phi, f0, alpha1=alpha1, max_evals=budget)


_iterate = partial(quasi_newton_iteration, direction=_orthant_direction, search=_armijo_search)
