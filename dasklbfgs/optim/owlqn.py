"""OWL-QN: L-BFGS for ``f(x) + sum_j w_j |x_j|`` (Andrew and Gao 2007; docs/algorithms.md §8).

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

The curvature pairs use the smooth gradient: ``y = g_new - g``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.basis import LocalBasis, keep_pair
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

__all__ = ["align_direction", "l1_weights", "orthant_of", "owlqn_minimize", "project_to_orthant", "pseudo_gradient"]


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
    """The minimum-norm subgradient of ``f + sum w |x|``: ``g + w sign(x)`` off zero; at zero
    ``g + w`` or ``g - w`` when that still points downhill, else 0 (zero is optimal there)."""
    v = np.sign(x)  # streamed over whole vectors (no gathers at the zeros: most of a sparse solution)
    v *= weights
    v += g
    right, left = g + weights, g - weights
    np.copyto(v, np.where(right < 0, right, np.where(left > 0, left, 0.0)), where=x == 0)
    return v


def l1_term(x: np.ndarray, weights: np.ndarray) -> float:
    return float(weights @ np.abs(x))


def align_direction(p: np.ndarray, pg: np.ndarray, penalised: np.ndarray) -> None:
    """Zero, in place, the penalised components of ``p`` that do not point along ``-pg``."""
    np.copyto(p, 0.0, where=penalised & (p * pg >= 0))


def orthant_of(x: np.ndarray, pg: np.ndarray) -> np.ndarray:
    """The orthant a step from ``x`` stays in: ``sign(x)``, or ``sign(-pg)`` where ``x = 0``."""
    return np.where(x != 0, np.sign(x), -np.sign(pg))


def project_to_orthant(x: np.ndarray, orthant: np.ndarray, penalised: np.ndarray) -> None:
    """Zero, in place, the penalised components of ``x`` that left ``orthant``."""
    np.copyto(x, 0.0, where=penalised & (np.sign(x) != orthant))


class OrthantSpace(LocalVectors):
    """The OWL-QN vectors in this process, with the questions :func:`run_iterations` asks.

    ``state.g`` is the smooth gradient; the basis holds the pseudo-gradient as its
    gradient vector, so the two-loop recursion gives ``-H v``.
    """

    def __init__(self, evaluate: Evaluate, state: LBFGSState, weights: np.ndarray) -> None:
        self.evaluate, self.state, self.weights = evaluate, state, weights
        self.basis: LocalBasis = state.basis  # type: ignore[assignment]
        self.penalised = weights > 0
        self.pg = pseudo_gradient(self._x, self._g, weights)
        self._p = np.zeros(0)
        self._orthant = np.zeros(0)
        self._trials: dict[float, tuple[np.ndarray, float, np.ndarray]] = {}

    def set_direction(self, delta: np.ndarray) -> float:
        """Point along ``sum delta_l b_l``, sign-aligned with ``-v``; returns ``v . p``."""
        p = self.basis.combine(delta)
        align_direction(p, self.pg, self.penalised)
        self._p = p
        self._orthant = orthant_of(self._x, self.pg)
        self._trials = {}
        return float(self.pg @ p)

    def trial(self, alpha: float) -> tuple[float, float]:
        """The full objective at the projected trial point and ``v . (x_trial - x)``."""
        x_trial = self._x + alpha * self._p
        project_to_orthant(x_trial, self._orthant, self.penalised)
        f_trial, g_trial = self.evaluate(x_trial)
        objective = float(f_trial) + l1_term(x_trial, self.weights)
        self._trials[alpha] = (x_trial, objective, g_trial)
        return objective, float(self.pg @ (x_trial - self._x))

    def accept(self, alpha: float) -> float:
        """Move to the trial point at ``alpha``; the pair uses the smooth gradients."""
        x_new, objective, g_new = self._trials[alpha]
        s, y = x_new - self._x, g_new - self._g
        if keep_pair(float(s @ y), -float(self.pg @ s)):
            self.basis.push_pair(s, y)
        self.pg = pseudo_gradient(x_new, g_new, self.weights)
        self.basis.set_gradient(self.pg)
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
) -> tuple[OptimizeResult, LBFGSState]:
    """Minimise ``f(x) + sum_j w_j |x_j|`` from ``x0`` (or continue from ``state``) with OWL-QN.

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
    Stopping is L-BFGS's with the pseudo-gradient in place of the gradient: ``max|v| <= gtol``;
    the relative decrease of the full objective ``<= ftol``; ``maxiter``; ``maxfun``; a
    failed backtracking search (retried once along ``-v``) gives status 2, a non-finite
    objective on it status 3. Without any positive weight this *is* L-BFGS: the call is
    :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize` itself, so the iterates are the same bits.
    """
    opts = options or LBFGSOptions()
    n = space.size if space is not None else (state.x if state is not None and state.x is not None
                                              else np.asarray(x0)).size
    weights = l1_weights(l1, n, penalised)
    if not np.any(weights > 0):
        return lbfgs_minimize(evaluate, x0, opts, callback=callback, state=state, on_iteration=on_iteration,
                              space=space)
    if space is not None:
        space, state = start_run(evaluate, x0, opts, state, space)
        return run_iterations(space, state, opts, _iterate, callback=callback, on_iteration=on_iteration)
    if state is None:
        x, f, g = evaluate_start(evaluate, x0)
        state = LBFGSState(x=x, f=f + l1_term(x, weights), g=g, basis=LocalBasis(x.size, opts.history), nfev=1)
    space = OrthantSpace(evaluate, state, weights)
    space.basis.set_gradient(space.pg)
    return run_iterations(space, state, opts, _iterate, callback=callback, on_iteration=on_iteration)


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
