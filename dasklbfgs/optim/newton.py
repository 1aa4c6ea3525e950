"""Newton's method: the exact Hessian's step, a backtracking line search, damping where the
Hessian is not positive definite, and a proximal step for an L1 term and bounds
(docs/algorithms.md §14).

Pure numpy: ``evaluate(x) -> (f, g, H)`` is the only contact with the outside world, so the
Sandblaster coordinator plugs in the workers' sums of the rows' gradients and Hessians
(:mod:`dasklbfgs.solvers.sandblaster.newton`) and tests plug in a function.

Each iteration solves the quadratic model at ``x``:

- without an L1 term or bounds, ``H p = -g`` by Cholesky, the matrix scaled to a unit
  diagonal first; where it is singular (collinear columns and no penalty) the step is the
  least-squares one, through the eigenvalues above ``n eps`` of the largest (statsmodels'
  pseudo-inverse); where it is indefinite the negative eigenvalues count by their size;
- with them (glmnet's and glum's proximal Newton), ``min_u g.(u - x) + (u - x).H(u - x) / 2
  + sum_j l1_j |u_j|`` over the box, by cyclic coordinate descent from ``u = x``
  (:func:`quadratic_step`), then ``p = u - x``.

The step is taken whole when it decreases the objective ``F = f + sum_j l1_j |x_j|`` by at
least ``1e-4`` of what its first-order model predicts (``g.p + l1(x + p) - l1(x)``), halved
until it does; a trial where ``F`` is not finite is a step too long. When
``max_line_search`` halvings fail, the Hessian is damped (``H + mu I``, Levenberg-Marquardt,
``mu`` growing by DAMPING) and the step tried again, and only then does the run end
LINE_SEARCH_FAILED. Every trial evaluates ``f``, ``g`` and ``H`` at once: an accepted step
(nearly every one) needs no second pass over the data for its Hessian.

Near the optimum a step predicts a decrease ``F``'s rounding hides (below NEAR): it is taken
whole when ``F`` stays within its rounding (SLACK), a refinement step: the last digits of an
ill-conditioned problem come from the exactly recomputed gradient, not from ``F`` (iterative
refinement). After REFINEMENTS of them in a row the run has converged (MSG_ROUNDING). Stopping is
L-BFGS's (:func:`~dasklbfgs.optim.lbfgs.run_iterations`): ``max |v| <= gtol`` (``v`` the
gradient, projected on the bounds and taken as the L1 term's least subgradient:
:meth:`Constraints.pseudo_gradient`), a relative decrease of ``F`` within ``ftol`` (by default
0: until ``F`` stops decreasing), ``maxiter`` iterations, ``maxfun`` evaluations; and a step
that predicts no decrease, or one within ``ftol`` of ``F``, ends the run as converged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from dasklbfgs.errors import NonFiniteObjectiveError
from dasklbfgs.optim.constraints import Constraints
from dasklbfgs.optim.lbfgs import MSG_PREDICTED, LBFGSOptions, Status, check_limits, run_iterations
from dasklbfgs.optim.vectors import max_abs
from dasklbfgs.options import Options, override

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

__all__ = ["NewtonOptions", "NewtonState", "dependent_coordinates", "newton_minimize", "newton_step", "optimality",
           "quadratic_step"]

#: ``evaluate(x) -> (f, g, H)``: the objective, its gradient and its Hessian at ``x``
EvaluateWithHessian = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]

SUFFICIENT_DECREASE = 1e-4
#: A step predicting a decrease below this (relative to ``max(|F|, 1)``) is in Newton's
#: region of quadratic convergence, where ``F``'s rounding may hide what it gains: taken
#: whole when it lowers the gradient's norm (iterative refinement: the last digits of an
#: ill-conditioned problem come from the exactly recomputed gradient, not from ``F``).
NEAR = 1e-10
#: Refinement steps taken in a row, at most: iterative refinement gains its digits in one or two
#: (the gradient at its rounding's floor no longer tells one step from the next)
REFINEMENTS = 3
MSG_ROUNDING = "CONVERGENCE: F NO LONGER RESOLVES THE STEPS (REFINEMENT STEPS TAKEN)"
#: The damping ``mu`` of the retries after a line search's halvings fail, relative to the
#: Hessian's largest diagonal entry: the step turns from Newton's towards the gradient's.
#: Newton's step is halved up to ``max_line_search`` times, each damped one a share of that.
DAMPING = (1e-4, 1e-2, 1.0)
#: Coordinate descent's sweeps of the quadratic model, and the change that ends them
#: (relative to the step's largest component).
SWEEPS = 200
SWEEP_TOLERANCE = 1e-12
#: Rounds of coordinate descent and Newton's step on the face it finds, at most.
FACE_ROUNDS = 5
EPS = float(np.finfo(np.float64).eps)
#: How far ``F`` may move and still be within its rounding (relative to ``max(|F|, 1)``): an
#: objective summed over many rows rounds far above machine epsilon.
SLACK = 1e4 * EPS


@dataclass(frozen=True, kw_only=True)
class NewtonOptions(Options):
    """Newton's limits: L-BFGS's options where they mean the same, with Newton's defaults (a
    handful of iterations, each a pass over the data, reach the last digits)."""

    solver: ClassVar[str] = "newton"

    gtol: float = override(LBFGSOptions, "gtol", default=1e-8)
    # 0: until the objective stops decreasing (a step within its rounding is still taken)
    ftol: float = override(LBFGSOptions, "ftol", default=0.0)
    maxiter: int = override(LBFGSOptions, "maxiter", default=50)
    maxfun: int = override(LBFGSOptions, "maxfun", default=200)
    max_line_search: int = override(LBFGSOptions, "max_line_search", default=20)


@dataclass
class NewtonState:
    """Where a Newton run is: the iterate, its objective ``f`` (the L1 term included), the
    smooth part's gradient and Hessian, and the counters and history L-BFGS keeps."""

    x: np.ndarray
    f: float
    g: np.ndarray
    H: np.ndarray
    nit: int = 0
    nfev: int = 0
    previous_f: float = math.nan
    last_step: float = 0.0
    damping: float = 0.0  # the last accepted step's mu (0: Newton's own)
    refinements: int = 0  # refinement steps taken in a row (steps that left F within its rounding)
    history: list[dict[str, Any]] = field(default_factory=list)


class _Space:
    """What :func:`run_iterations` reads of a run: the optimality measure, ``x`` and the gradient."""

    def __init__(self, state: NewtonState, constraints: Constraints | None) -> None:
        self.state, self.constraints = state, constraints

    def gmax(self) -> float:
        return optimality(self.state.x, self.state.g, self.constraints)

    def x(self) -> np.ndarray:
        return self.state.x.copy()

    def g(self) -> np.ndarray:
        return self.state.g.copy()


def newton_minimize(evaluate: EvaluateWithHessian, x0: np.ndarray, options: NewtonOptions | None = None, *,
                    constraints: Constraints | None = None,
                    on_iteration: Callable[[NewtonState], str | None] | None = None,
                    callback: Callable[[OptimizeResult], Any] | None = None) -> tuple[OptimizeResult, NewtonState]:
    """Minimise ``f(x) + sum_j l1_j |x_j|`` over ``lower <= x <= upper`` (``constraints``; None:
    ``f`` unconstrained) from ``x0`` (clipped into the box) by Newton's method (module docstring).

    Returns scipy's ``OptimizeResult`` (``x, fun, jac, nit, nfev, njev, status, success,
    message, history``, as :func:`~dasklbfgs.optim.lbfgs.lbfgs_minimize`'s; ``fun`` includes
    the L1 term, ``jac`` is the smooth part's gradient) and the final state (its ``H``: the
    Hessian at ``x``). ``on_iteration`` and ``callback`` as L-BFGS's.
    """
    opts = options or NewtonOptions()
    started = time.perf_counter()
    x = np.array(x0, dtype=np.float64)
    if constraints is not None:
        constraints.project(x)
    f, g, H = evaluate(x)
    if not (math.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
        raise NonFiniteObjectiveError(f"the objective at x0 is not finite (f = {f}); check the data scale and x0")
    l1 = 0.0 if constraints is None else constraints.l1_term(x)
    state = NewtonState(x=x, f=float(f) + l1, g=g, H=H, nfev=1)
    space = _Space(state, constraints)

    def iterate(space: _Space, state: NewtonState, opts: NewtonOptions) -> tuple[Status, str] | None:
        return _iteration(evaluate, state, opts, constraints)

    return run_iterations(space, state, opts, iterate, callback=callback, on_iteration=on_iteration,
                          started=started)


def _iteration(evaluate: EvaluateWithHessian, state: NewtonState, opts: NewtonOptions,
               constraints: Constraints | None) -> tuple[Status, str] | None:
    """One Newton iteration in place, or how the run ends."""
    if (limit := check_limits(state, opts)) is not None:
        return limit
    scale = max(float(np.max(np.abs(np.diag(state.H)), initial=0.0)), EPS)
    size = max(abs(state.f), 1.0)
    damped_halvings = max(1, opts.max_line_search // (len(DAMPING) + 1))  # per damping level
    l1_now = 0.0 if constraints is None else constraints.l1_term(state.x)
    saw_non_finite = descent = False
    for mu in (0.0, *(scale * d for d in DAMPING)):
        p = newton_step(state.H, state.g, state.x, constraints, mu)
        predicted = float(state.g @ p) + (0.0 if constraints is None else constraints.l1_term(state.x + p) - l1_now)
        if not predicted < 0:  # no descent in this model (NaN included): a damped one
            saw_non_finite |= not math.isfinite(predicted)
            continue
        descent = True
        if -predicted <= opts.ftol * size:
            return Status.CONVERGED, MSG_PREDICTED
        near = -predicted <= NEAR * size
        alpha = 1.0
        for _ in range(opts.max_line_search if mu == 0.0 else damped_halvings):
            x_trial = state.x + alpha * p
            f, g, H = evaluate(x_trial)
            state.nfev += 1
            total = float(f) + (0.0 if constraints is None else constraints.l1_term(x_trial))
            finite = math.isfinite(total) and bool(np.all(np.isfinite(g))) and bool(np.all(np.isfinite(H)))
            saw_non_finite |= not finite
            if finite:
                decreased = total <= state.f + SUFFICIENT_DECREASE * alpha * predicted
                # Near the optimum F's rounding hides what a step gains: a whole step that leaves F
                # within its rounding is a refinement, taken REFINEMENTS times in a row at most
                flat = near and alpha == 1.0 and total <= state.f + SLACK * size
                if decreased or flat:
                    refining = near and not total < state.f - SLACK * size  # F did not move beyond its rounding
                    if refining and state.refinements >= REFINEMENTS:
                        return Status.CONVERGED, MSG_ROUNDING
                    state.previous_f = math.nan if refining else state.f  # (nan: no decrease test for this step)
                    state.refinements = state.refinements + 1 if refining else 0
                    state.f, state.x, state.g, state.H = total, x_trial, g, H
                    state.nit += 1
                    state.last_step, state.damping = alpha * float(np.linalg.norm(p)), mu
                    return None
            if state.nfev >= opts.maxfun:
                return check_limits(state, opts)
            alpha *= 0.5
    if not descent and not saw_non_finite:  # the model, however damped, sees no descent: a zero (sub)gradient
        return Status.CONVERGED, MSG_PREDICTED
    if saw_non_finite:
        return Status.NON_FINITE, ("ABNORMAL: the objective, its gradient or its Hessian became non-finite along "
                                   "every damped Newton step; x is the last finite iterate")
    return Status.LINE_SEARCH_FAILED, "ABNORMAL_TERMINATION_IN_LNSRCH: no damped Newton step decreased the objective"


def optimality(x: np.ndarray, g: np.ndarray, constraints: Constraints | None) -> float:
    """The largest component of the gradient ``g`` at ``x``, projected on the bounds and taken as
    the L1 term's least subgradient (:meth:`Constraints.pseudo_gradient`): 0 at a minimum."""
    return max_abs(g if constraints is None else constraints.pseudo_gradient(x, g))


def newton_step(H: np.ndarray, g: np.ndarray, x: np.ndarray, constraints: Constraints | None,
                mu: float = 0.0) -> np.ndarray:
    """The step ``p`` that minimises the quadratic model ``g.p + p.(H + mu I)p / 2`` (plus the L1
    term at ``x + p`` and the box, when ``constraints`` has them) (module docstring)."""
    if constraints is not None:
        return quadratic_step(H, g, x, constraints, mu)
    return _solve(H, -g, mu)


def _solve(H: np.ndarray, b: np.ndarray, mu: float = 0.0) -> np.ndarray:
    """``(H + mu I)^-1 b`` with ``H`` scaled to a unit diagonal first (:func:`_solve_scaled`); a
    coordinate whose diagonal is 0 (a parameter no row moves and no penalty holds) gets 0."""
    diagonal = np.abs(np.diag(H) + mu)
    live = diagonal > 0
    unit = np.zeros_like(diagonal)
    unit[live] = 1.0 / np.sqrt(diagonal[live])
    A = H[np.ix_(live, live)] * unit[live][:, None] * unit[live][None, :]
    A[np.diag_indices_from(A)] += mu * unit[live] ** 2
    p = np.zeros_like(b)
    p[live] = _solve_scaled(A, b[live] * unit[live]) * unit[live]
    return p


def _solve_scaled(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A^-1 b`` for a symmetric ``A`` with a unit diagonal: by Cholesky where it is positive
    definite and well conditioned, else through its eigenvalues (those within ``n eps`` of the
    largest left out, negative ones by their size)."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve, eigh

    n = A.shape[0]
    if n == 0:
        return b.copy()
    try:
        factor = cho_factor(A, lower=False, check_finite=False)
        pivots = np.abs(np.diag(factor[0]))
        if pivots.min() ** 2 > n * EPS * pivots.max() ** 2:
            return np.asarray(cho_solve(factor, b, check_finite=False))
    except LinAlgError:
        pass
    if not np.all(np.isfinite(A)):
        return np.full_like(b, np.nan)
    values, vectors = eigh(A, check_finite=False)
    size = np.abs(values)
    kept = size > n * EPS * size.max()
    return np.asarray(vectors[:, kept] @ ((vectors[:, kept].T @ b) / size[kept]))


def _positive_definite(H: np.ndarray) -> np.ndarray:
    """``H`` where it is positive definite; otherwise ``V |Lambda| V^T`` with its eigenvalues
    taken by their size and lifted to ``n eps`` of the largest (the matrix the unconstrained
    step's eigenvalue path inverts)."""
    from scipy.linalg import LinAlgError, cho_factor, eigh

    try:
        cho_factor(H, lower=False, check_finite=False)
        return H
    except LinAlgError:
        pass
    if not np.all(np.isfinite(H)):
        return H
    values, vectors = eigh(H, check_finite=False)
    size = np.abs(values)
    size = np.maximum(size, H.shape[0] * EPS * size.max())
    modified = (vectors * size) @ vectors.T
    return (modified + modified.T) / 2


def quadratic_step(H: np.ndarray, g: np.ndarray, x: np.ndarray, constraints: Constraints,
                   mu: float = 0.0) -> np.ndarray:
    """``u - x`` for the ``u`` that minimises the quadratic model ``q(u) = g.(u - x) +
    (u - x).A(u - x) / 2 + sum_j l1_j |u_j|`` over the box, ``A`` being ``H + mu I`` made
    positive definite (:func:`_positive_definite`). Without an L1 term the unconstrained
    minimiser, where it lies in the box. Otherwise cyclic coordinate descent from ``u = x``
    (each coordinate's exact minimiser, soft-thresholded and clipped; glmnet's active set)
    finds the face (the coordinates at zero or on a bound), and Newton's step on that face,
    a solve of the free coordinates' system, gives the minimiser to the solve's accuracy,
    which coordinate descent alone reaches slowly on an ill-conditioned ``A``; the face's
    step is kept where its signs and bounds hold and it lowers ``q``, then checked by a sweep."""
    n = x.size
    A = _positive_definite(H)
    if mu:
        A = A + mu * np.eye(n)
    l1 = np.zeros(n) if constraints.weights is None else constraints.weights
    lower = np.full(n, -np.inf) if constraints.lower is None else constraints.lower
    upper = np.full(n, np.inf) if constraints.upper is None else constraints.upper
    if constraints.weights is None:
        p = _solve(A, -g)
        if np.all(x + p >= lower) and np.all(x + p <= upper):
            return p
    u = _coordinate_descent(A, g, x, x.copy(), l1, lower, upper)
    for _ in range(FACE_ROUNDS):
        faced = _on_the_face(A, g, x, u, l1, lower, upper)
        swept = _coordinate_descent(A, g, x, faced.copy(), l1, lower, upper)
        if np.array_equal(swept, faced) or _model_value(A, g, x, swept, l1) >= _model_value(A, g, x, u, l1):
            return (faced if _model_value(A, g, x, faced, l1) <= _model_value(A, g, x, u, l1) else u) - x
        u = swept  # the sweep left the face (a held coordinate moved): that face next
    return u - x


def _model_value(A: np.ndarray, g: np.ndarray, x: np.ndarray, u: np.ndarray, l1: np.ndarray) -> float:
    step = u - x
    return float(g @ step + step @ A @ step / 2 + l1 @ np.abs(u))


def _on_the_face(A: np.ndarray, g: np.ndarray, x: np.ndarray, u: np.ndarray, l1: np.ndarray, lower: np.ndarray,
                 upper: np.ndarray) -> np.ndarray:
    """The minimiser of the quadratic model on the face of ``u`` (its coordinates at zero where
    penalised, or on a bound, held there; the others' signs kept), by an active-set search:
    solve the free coordinates' system; where that point leaves the face, go as far towards
    it as the face allows, hold the coordinates that reach zero or a bound, and solve again.
    The model falls along the way (it is convex on the face, the solve its minimiser)."""
    u = u.copy()
    held = ((l1 > 0) & (u == 0)) | (u <= lower) | (u >= upper)
    for _ in range(u.size + 1):
        free = np.flatnonzero(~held)
        if free.size == 0:
            return u
        signs = np.sign(u[free])
        fixed = np.flatnonzero(held)
        rhs = -(g[free] + A[np.ix_(free, fixed)] @ (u[fixed] - x[fixed]) + l1[free] * signs)
        target = x[free] + _solve(A[np.ix_(free, free)], rhs)
        if not np.all(np.isfinite(target)):
            return u
        here = u[free]
        # how far towards the target each free coordinate may go: to zero (penalised, with a sign) or a bound
        reach = np.ones(free.size)
        change = target - here
        crossing = (l1[free] > 0) & (signs != 0) & (np.sign(target) != signs)
        reach[crossing] = here[crossing] / (here[crossing] - target[crossing])
        low, high = lower[free], upper[free]
        below, above = target < low, target > high
        reach[below] = np.minimum(reach[below], (low[below] - here[below]) / change[below])
        reach[above] = np.minimum(reach[above], (high[above] - here[above]) / change[above])
        t = float(np.clip(reach.min(), 0.0, 1.0))
        if t >= 1.0:
            u[free] = target
            return u
        stops = free[reach <= t]
        u[free] = here + t * change
        for j in stops:  # exactly on zero or the bound it reached
            u[j] = lower[j] if u[j] <= lower[j] else upper[j] if u[j] >= upper[j] else 0.0
        held[stops] = True
    return u


def _coordinate_descent(A: np.ndarray, g: np.ndarray, x: np.ndarray, u: np.ndarray, l1: np.ndarray,
                        lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Cyclic coordinate descent on the quadratic model from ``u`` (in place; returned),
    sweeping the coordinates off zero until they settle (moves within SWEEP_TOLERANCE of the
    step's size), then every coordinate to confirm. A coordinate with no curvature stays."""
    curvature = np.diag(A)
    moved = A @ (u - x)  # A (u - x), kept as u moves
    everything = np.flatnonzero(curvature > 0)
    coordinates = everything
    for _ in range(SWEEPS):
        largest = 0.0
        for j in coordinates:
            a = curvature[j]
            centre = u[j] - (g[j] + moved[j]) / a
            new = math.copysign(max(abs(centre) - l1[j] / a, 0.0), centre)
            new = min(max(new, lower[j]), upper[j])
            delta = new - u[j]
            if delta != 0.0:
                u[j] = new
                moved += delta * A[j]  # (A is symmetric: its row is its column, contiguous)
                largest = max(largest, abs(delta))
        settled = largest <= SWEEP_TOLERANCE * float(np.max(np.abs(u - x), initial=0.0))
        if settled and coordinates is everything:
            break
        coordinates = everything if settled else everything[(u[everything] != 0) | (x[everything] != 0)]
    return u


def dependent_coordinates(H: np.ndarray) -> np.ndarray:
    """The coordinates a symmetric ``H`` cannot tell apart from the others, sorted: those with a
    zero diagonal, and, with ``H`` scaled to a unit diagonal (by its entries' sizes), those a
    pivoted QR leaves past its numerical rank (pivots within ``n eps`` of the first)."""
    from scipy.linalg import qr

    diagonal = np.abs(np.diag(H))
    live = np.flatnonzero(diagonal > 0)
    dead = np.flatnonzero(diagonal == 0)
    if live.size == 0:
        return dead
    unit = 1.0 / np.sqrt(diagonal[live])
    R, pivots = qr(H[np.ix_(live, live)] * unit[:, None] * unit[None, :], mode="r", pivoting=True,
                   check_finite=False)
    size = np.abs(np.diag(R))
    rank = int(np.count_nonzero(size > live.size * EPS * size[0]))
    return np.sort(np.concatenate([dead, live[pivots[rank:]]]))
