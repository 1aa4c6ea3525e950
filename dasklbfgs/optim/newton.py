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
whole when it lowers the gradient's norm, and when it lowers neither that nor ``F`` the run
has converged (MSG_ROUNDING): the refinement of an ill-conditioned problem's last digits
comes from the exactly recomputed gradient, not from ``F``. Stopping is
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

__all__ = ["NewtonOptions", "NewtonState", "dependent_coordinates", "newton_minimize", "newton_step", "quadratic_step"]

#: ``evaluate(x) -> (f, g, H)``: the objective, its gradient and its Hessian at ``x``
EvaluateWithHessian = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]

SUFFICIENT_DECREASE = 1e-4
#: A step predicting a decrease below this (relative to ``max(|F|, 1)``) is in Newton's
#: region of quadratic convergence, where ``F``'s rounding may hide what it gains: taken
#: whole when it lowers the gradient's norm (iterative refinement: the last digits of an
#: ill-conditioned problem come from the exactly recomputed gradient, not from ``F``).
NEAR = 1e-10
MSG_ROUNDING = "CONVERGENCE: NEITHER F NOR ITS GRADIENT IMPROVES BEYOND THEIR ROUNDING"
#: The damping ``mu`` of the retries after a failed line search, relative to the Hessian's
#: largest diagonal entry: the step turns from Newton's towards the gradient's.
DAMPING = (1e-6, 1e-3, 1.0)
#: Coordinate descent's sweeps of the quadratic model, and the change that ends them
#: (relative to the step's largest component).
SWEEPS = 500
SWEEP_TOLERANCE = 1e-12
EPS = float(np.finfo(np.float64).eps)


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
    history: list[dict[str, Any]] = field(default_factory=list)


class _Space:
    """What :func:`run_iterations` reads of a run: the optimality measure, ``x`` and the gradient."""

    def __init__(self, state: NewtonState, constraints: Constraints | None) -> None:
        self.state, self.constraints = state, constraints

    def gmax(self) -> float:
        state, constraints = self.state, self.constraints
        return max_abs(state.g if constraints is None else constraints.pseudo_gradient(state.x, state.g))

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
    measure = _Space(state, constraints).gmax()
    saw_non_finite = False
    for mu in (0.0, *(scale * d for d in DAMPING)):
        p = newton_step(state.H, state.g, state.x, constraints, mu)
        l1_now = 0.0 if constraints is None else constraints.l1_term(state.x)
        predicted = float(state.g @ p) + (0.0 if constraints is None else constraints.l1_term(state.x + p) - l1_now)
        if not predicted < 0:  # no descent in this model: a damped one, unless the gradient is (numerically) zero
            if mu == scale * DAMPING[-1]:
                return Status.CONVERGED, MSG_PREDICTED
            continue
        if -predicted <= opts.ftol * max(abs(state.f), 1.0):
            return Status.CONVERGED, MSG_PREDICTED
        near = -predicted <= NEAR * max(abs(state.f), 1.0)
        alpha = 1.0
        for _ in range(opts.max_line_search):
            x_trial = state.x + alpha * p
            f, g, H = evaluate(x_trial)
            state.nfev += 1
            total = float(f) + (0.0 if constraints is None else constraints.l1_term(x_trial))
            finite = math.isfinite(total) and bool(np.all(np.isfinite(g)))
            saw_non_finite |= not finite
            decreased = finite and total <= state.f + SUFFICIENT_DECREASE * alpha * predicted
            # Near the optimum F no longer resolves the steps: a whole step is judged by its gradient
            whole_near = finite and near and alpha == 1.0
            refined = whole_near and _Space(NewtonState(x=x_trial, f=total, g=g, H=H), constraints).gmax() < measure
            if decreased or refined:
                state.previous_f = state.f if decreased else math.nan  # (nan: no decrease test for this step)
                state.f, state.x, state.g, state.H = total, x_trial, g, H
                state.nit += 1
                state.last_step, state.damping = alpha * float(np.linalg.norm(p)), mu
                return None
            if whole_near:  # neither F nor the gradient improves beyond their rounding
                return Status.CONVERGED, MSG_ROUNDING
            if state.nfev >= opts.maxfun:
                return check_limits(state, opts)
            alpha *= 0.5
    if saw_non_finite:
        return Status.NON_FINITE, ("ABNORMAL: the objective became non-finite along every damped Newton step; x is "
                                   "the last finite iterate")
    return Status.LINE_SEARCH_FAILED, "ABNORMAL_TERMINATION_IN_LNSRCH: no damped Newton step decreased the objective"


def newton_step(H: np.ndarray, g: np.ndarray, x: np.ndarray, constraints: Constraints | None,
                mu: float = 0.0) -> np.ndarray:
    """The step ``p`` that minimises the quadratic model ``g.p + p.(H + mu I)p / 2`` (plus the L1
    term at ``x + p`` and the box, when ``constraints`` has them) (module docstring)."""
    if constraints is not None:
        return quadratic_step(H, g, x, constraints, mu)
    diagonal = np.abs(np.diag(H) + mu)
    live = diagonal > 0  # a parameter no row moves and no penalty holds keeps its value
    unit = np.zeros_like(diagonal)
    unit[live] = 1.0 / np.sqrt(diagonal[live])
    A = H[np.ix_(live, live)] * unit[live][:, None] * unit[live][None, :]
    A[np.diag_indices_from(A)] += mu * unit[live] ** 2
    b = -g[live] * unit[live]
    p = np.zeros_like(g)
    p[live] = _solve_scaled(A, b) * unit[live]
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
    values, vectors = eigh(A, check_finite=False)
    size = np.abs(values)
    kept = size > n * EPS * size.max()
    return np.asarray(vectors[:, kept] @ ((vectors[:, kept].T @ b) / size[kept]))


def quadratic_step(H: np.ndarray, g: np.ndarray, x: np.ndarray, constraints: Constraints,
                   mu: float = 0.0) -> np.ndarray:
    """``u - x`` for the ``u`` that minimises ``g.(u - x) + (u - x).(H + mu I)(u - x) / 2 +
    sum_j l1_j |u_j|`` over the box, by cyclic coordinate descent from ``u = x``: each
    coordinate's exact minimiser, soft-thresholded and clipped, sweeping the coordinates that
    moved or left zero until they settle, then every coordinate once more (glmnet's active
    set). A coordinate with no curvature is left where it is."""
    n = x.size
    l1 = np.zeros(n) if constraints.weights is None else constraints.weights
    lower = np.full(n, -np.inf) if constraints.lower is None else constraints.lower
    upper = np.full(n, np.inf) if constraints.upper is None else constraints.upper
    curvature = np.diag(H) + mu
    u = x.copy()
    moved = np.zeros(n)  # (H + mu I)(u - x), kept as u moves
    everything = np.flatnonzero(curvature > 0)
    coordinates = everything
    for _ in range(SWEEPS):
        largest = 0.0
        for j in coordinates:
            a = curvature[j]
            centre = u[j] - (g[j] + moved[j]) / a
            threshold = l1[j] / a
            new = math.copysign(max(abs(centre) - threshold, 0.0), centre)
            new = min(max(new, lower[j]), upper[j])
            delta = new - u[j]
            if delta != 0.0:
                u[j] = new
                moved += delta * H[:, j]
                moved[j] += delta * mu
                largest = max(largest, abs(delta))
        settled = largest <= SWEEP_TOLERANCE * max(float(np.max(np.abs(u - x), initial=0.0)), 1.0)
        if settled and coordinates is everything:
            break
        # the coordinates off zero (and off the bounds they sit on), or every one to confirm
        coordinates = everything if settled else everything[(u[everything] != 0) | (x[everything] != 0)]
    return u - x


def dependent_coordinates(H: np.ndarray) -> np.ndarray:
    """The coordinates a symmetric positive semi-definite ``H`` cannot tell apart from the
    others, sorted: those with a zero diagonal, and, with ``H`` scaled to a unit diagonal,
    those a pivoted QR leaves past its numerical rank (pivots within ``n eps`` of the first)."""
    from scipy.linalg import qr

    diagonal = np.diag(H)
    live = np.flatnonzero(diagonal > 0)
    dead = np.flatnonzero(~(diagonal > 0))
    if live.size == 0:
        return dead
    unit = 1.0 / np.sqrt(diagonal[live])
    R, pivots = qr(H[np.ix_(live, live)] * unit[:, None] * unit[None, :], mode="r", pivoting=True,
                   check_finite=False)
    size = np.abs(np.diag(R))
    rank = int(np.count_nonzero(size > live.size * EPS * size[0]))
    return np.sort(np.concatenate([dead, live[pivots[rank:]]]))
