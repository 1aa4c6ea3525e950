"""Limited-memory BFGS with an explicit state, scipy-compatible stopping and results.

Pure numpy: ``evaluate(x) -> (f, g)`` is the only contact with the outside world, so the
Sandblaster coordinator plugs in a distributed evaluation and tests plug in a function.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np

from dasklbfgs.errors import NonFiniteObjectiveError
from dasklbfgs.optim.basis import GramMatrix, LocalBasis, keep_pair
from dasklbfgs.optim.linesearch import strong_wolfe
from dasklbfgs.optim.two_loop import two_loop_coefficients
from dasklbfgs.optim.vectors import max_abs
from dasklbfgs.options import Options, option

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

__all__ = ["LBFGSOptions", "LBFGSState", "inverse_hessian_scale", "lbfgs_minimize", "Status"]

Evaluate = Callable[[np.ndarray], tuple[float, np.ndarray]]


class Status(IntEnum):
    """``OptimizeResult.status`` of every solver (0-2 as scipy's L-BFGS-B, 99 as scipy's callbacks).

    Sandblaster's L-BFGS ends ``CONVERGED`` (a tolerance was met), ``LIMIT``,
    ``LINE_SEARCH_FAILED``, ``NON_FINITE`` or ``CALLBACK_STOP``. The replica methods (the
    watch loop of :mod:`dasklbfgs.solvers._replicas.watch`) end ``COMPLETED`` when they ran
    their epochs or ``max_steps`` and the objective fell below its value at the start,
    ``NO_PROGRESS`` when they ran them and it did not, ``DIVERGED`` when a loss grew past
    ``DIVERGENCE_FACTOR`` times the start and the run was stopped, ``NON_FINITE`` when a
    replica's loss became NaN or infinite, or ``CALLBACK_STOP``. Any solver ends
    ``EARLY_STOPPED`` when ``early_stopping`` stopped it on its held-out objective
    (:mod:`dasklbfgs.solvers.early_stopping`). A run succeeded (``result.success``,
    :attr:`succeeded`) when it ended ``CONVERGED``, ``COMPLETED`` or ``EARLY_STOPPED``.
    """

    CONVERGED = 0
    LIMIT = 1
    LINE_SEARCH_FAILED = 2
    NON_FINITE = 3
    DIVERGED = 4
    COMPLETED = 5
    NO_PROGRESS = 6
    EARLY_STOPPED = 7
    CALLBACK_STOP = 99

    @property
    def succeeded(self) -> bool:
        """Whether a run that ended with this status succeeded (``result.success``)."""
        return self in (Status.CONVERGED, Status.COMPLETED, Status.EARLY_STOPPED)


MSG_GTOL = "CONVERGENCE: NORM OF PROJECTED GRADIENT <= GTOL"
MSG_FTOL = "CONVERGENCE: RELATIVE REDUCTION OF F <= FTOL"
MSG_PREDICTED = "CONVERGENCE: PREDICTED RELATIVE REDUCTION OF F <= FTOL (NO STEP CHANGES F BEYOND ITS ROUNDING)"
MSG_MAXITER = "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT"
MSG_MAXFUN = "STOP: TOTAL NO. OF F,G EVALUATIONS EXCEEDS LIMIT"
MSG_CALLBACK = "`callback` raised `StopIteration`."


@dataclass(frozen=True, kw_only=True)
class LBFGSOptions(Options):
    """L-BFGS limits and memory; defaults and meanings follow scipy's ``L-BFGS-B``."""

    solver: ClassVar[str] = "lbfgs"

    history: int = option(10, "curvature pairs kept (L-BFGS memory m)", "int", minimum=1)
    gtol: float = option(1e-5, "stop when the largest gradient component is at most this", "float", minimum=0)
    ftol: float = option(2.220446049250313e-09, "stop when the relative decrease of the objective "
                         "is at most this", "float", minimum=0)
    maxiter: int = option(15000, "at most this many iterations", "int", minimum=1)
    maxfun: int = option(15000, "at most this many objective evaluations", "int", minimum=1)
    max_line_search: int = option(20, "evaluations per line search", "int", minimum=1)
    initial_scale: float | None = option(
        None, "the first step is -initial_scale * g (the scale of the inverse Hessian, gamma = s.y / y.y, of an "
        "earlier run on a nearby problem: a warm start's first step)", "float", positive=True, nullable=True,
        none_means="a first step of length 1, as scipy's")


@dataclass
class LBFGSState:
    """Everything needed to continue an L-BFGS run: iterate, gradient, history, counters."""

    x: np.ndarray | None  # None when the vectors live elsewhere (a sharded space)
    f: float
    g: np.ndarray | None
    basis: GramMatrix
    nit: int = 0
    nfev: int = 0
    previous_f: float = math.nan
    last_step: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)


def lbfgs_minimize(
    evaluate: Evaluate,
    x0: np.ndarray,
    options: LBFGSOptions | None = None,
    *,
    callback: Callable[[OptimizeResult], Any] | None = None,
    state: LBFGSState | None = None,
    on_iteration: Callable[[LBFGSState], str | None] | None = None,
    space: Any = None,
) -> tuple[OptimizeResult, LBFGSState]:
    """Minimise ``f`` from ``x0`` (or continue from ``state``) with L-BFGS.

    Parameters
    ----------
    evaluate
        ``x -> (f(x), grad f(x))``.
    x0
        Starting point (ignored when ``state`` is given).
    options
        :class:`LBFGSOptions`.
    callback
        Called after each iteration with an ``OptimizeResult`` holding ``x`` and ``fun``
        (scipy's ``intermediate_result``); raising ``StopIteration`` stops with status 99 (its
        argument, if any, is the message).
    state
        A state from an earlier run to continue from.
    on_iteration
        Called with the state after each completed iteration (for checkpoints and reports);
        a str it returns stops the run with status 99 and that message.
    space
        Where the vectors live, when not in this process (``evaluate`` and ``x0`` are
        then unused): an object like :class:`LocalSpace` whose ``start()`` evaluates the
        starting point and returns ``f``. With ``state``, the space holds that state's
        vectors already and ``state`` gives the counters and history.

    Returns
    -------
    (OptimizeResult, LBFGSState)
        The result has scipy's fields ``x, fun, jac, nit, nfev, njev, status, success,
        message`` plus ``history``, one dict per iteration (``step``, ``loss``, ``gnorm``,
        ``step_length``, ``nfev``, ``time``).

    Notes
    -----
    Stopping is scipy's: ``max|g| <= gtol``; ``(f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1)
    <= ftol`` (and, when a line search fails, the reduction its first trial predicts,
    ``-(g . p) alpha_1``, within ``ftol`` likewise: no step changes ``f`` beyond its rounding
    there, and the next accepted step would have stopped the run); ``nit >= maxiter``;
    ``nfev >= maxfun``. The first step along ``-g`` has
    length 1 (``alpha = 1 / ||g||``), later ones start at ``alpha = 1``. A pair with
    ``s.y <= eps (-g.s)`` is skipped (:func:`~dasklbfgs.optim.basis.keep_pair`: scale
    invariant, as L-BFGS-B). As in scipy, the relative decrease is measured against at least
    1, so for objectives below 1 in size ``ftol`` acts as an absolute tolerance. When the
    line search fails the history is dropped and
    the search retried along ``-g`` once before giving up (status 2).
    """
    opts = options or LBFGSOptions()
    started = time.perf_counter()
    space, state = start_run(evaluate, x0, opts, state, space)
    return run_iterations(space, state, opts, _iterate, callback=callback, on_iteration=on_iteration,
                          started=started)


class IterationState(Protocol):
    """What :func:`run_iterations` reads and keeps of a run's state (:class:`LBFGSState`, the
    Newton method's :class:`~dasklbfgs.optim.newton.NewtonState`)."""

    f: float
    nit: int
    nfev: int
    previous_f: float
    last_step: float
    history: list[dict[str, Any]]


class StoppingRules(Protocol):
    """The options the shared stopping rules read (:class:`LBFGSOptions`, the Newton method's)."""

    @property
    def gtol(self) -> float: ...

    @property
    def ftol(self) -> float: ...

    @property
    def maxiter(self) -> int: ...

    @property
    def maxfun(self) -> int: ...


S = TypeVar("S", bound=IterationState)
O = TypeVar("O", bound=StoppingRules)


def run_iterations(space: Any, state: S, opts: O,
                   iterate: Callable[[Any, S, O], tuple[Status, str] | None], *,
                   callback: Callable[[OptimizeResult], Any] | None = None,
                   on_iteration: Callable[[S], str | None] | None = None,
                   started: float | None = None) -> tuple[OptimizeResult, S]:
    """The loop every quasi-Newton method here shares: ``iterate`` until it or the stopping
    rules say stop, with the history, callbacks and the scipy-style result.

    ``space`` answers ``gmax()`` (the norm convergence is measured on), ``x()`` and ``g()``
    (the result's ``x`` and ``jac``); ``iterate(space, state, opts)`` makes one iteration in
    place or returns ``(status, message)`` when it cannot. The history's times count from
    ``started`` (a ``time.perf_counter()`` value: the run's start, its first evaluation included).
    """
    # scipy.optimize loads with a run: this module's options are read by the command line.
    from scipy.optimize import OptimizeResult

    started = time.perf_counter() if started is None else started
    status, message = _check_gradient(space, opts)
    while status is None:
        outcome = iterate(space, state, opts)
        if outcome is not None:
            status, message = outcome
            break
        state.history.append({"step": state.nit, "loss": state.f, "gnorm": space.gmax(),
                              "step_length": state.last_step, "nfev": state.nfev,
                              "time": time.perf_counter() - started})
        if on_iteration is not None and (reason := on_iteration(state)) is not None:
            status, message = Status.CALLBACK_STOP, reason
            break
        if callback is not None:
            try:
                callback(OptimizeResult(x=space.x(), fun=state.f, nit=state.nit))
            except StopIteration as stop:
                status, message = Status.CALLBACK_STOP, str(stop) or MSG_CALLBACK
                break
        status, message = _check_convergence(space, state, opts)
    result = OptimizeResult(x=space.x(), fun=state.f, jac=space.g(), nit=state.nit, nfev=state.nfev,
                            njev=state.nfev, status=status, success=status.succeeded,
                            message=message, history=list(state.history))
    return result, state


def evaluate_start(evaluate: Evaluate, x0: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """``(x0, f, g)`` at the starting point, refused when not finite."""
    x = np.array(x0, dtype=np.float64)
    f, g = evaluate(x)
    if not (math.isfinite(f) and np.all(np.isfinite(g))):
        raise NonFiniteObjectiveError(f"the objective at x0 is not finite (f = {f}); check the data scale and x0")
    return x, float(f), g


def start_run(evaluate: Evaluate, x0: np.ndarray, opts: LBFGSOptions, state: LBFGSState | None,
           space: Any) -> tuple[Any, LBFGSState]:
    """The space and state to iterate from: a new local run, a restored one, or a space's."""
    if space is None:
        if state is None:
            x, f, g = evaluate_start(evaluate, x0)
            basis = LocalBasis(x.size, opts.history)
            basis.set_gradient(g)
            state = LBFGSState(x=x, f=f, g=g, basis=basis, nfev=1)
        return LocalSpace(evaluate, state), state
    if state is None:
        return space, LBFGSState(x=None, f=space.start(), g=None, basis=space.basis, nfev=1)
    state.basis = space.basis  # continue in a space restored from the same checkpoint as ``state``
    return space, state


class LocalVectors:
    """A space whose state's vectors are in this process: ``_x`` and ``_g`` are never None."""

    state: LBFGSState

    @property
    def _x(self) -> np.ndarray:
        assert self.state.x is not None, "a local space holds its state's vectors"
        return self.state.x

    @property
    def _g(self) -> np.ndarray:
        assert self.state.g is not None, "a local space holds its state's vectors"
        return self.state.g


class LocalSpace(LocalVectors):
    """The L-BFGS vectors in this process: ``state.x``, ``state.g`` and ``state.basis``.

    The iteration (:func:`_iterate`) only asks a space for the Gram matrix, to point the
    search direction along given coefficients, to evaluate ``f`` and ``g . p`` at a trial
    step, to accept a step, and for ``max |g|``; a space whose vectors live on parameter
    shards (:class:`dasklbfgs.solvers.sandblaster.sharded_space.ShardedSpace`) answers the same questions
    with scalars only.
    """

    def __init__(self, evaluate: Evaluate, state: LBFGSState) -> None:
        self.evaluate, self.state = evaluate, state
        self.basis: LocalBasis = state.basis  # type: ignore[assignment]
        self._p = np.zeros(0)
        self._trials: dict[float, tuple[np.ndarray, float, np.ndarray]] = {}

    def set_direction(self, delta: np.ndarray) -> None:
        self._p = self.basis.combine(delta)
        self._trials = {}

    def trial(self, alpha: float) -> tuple[float, float]:
        x_trial = self._x + alpha * self._p  # (numpy adds into alpha * p's temporary: one fresh vector)
        f_trial, g_trial = self.evaluate(x_trial)
        self._trials[alpha] = (x_trial, f_trial, g_trial)
        return float(f_trial), float(g_trial @ self._p)

    def accept(self, alpha: float) -> float:
        """Move to the trial point at ``alpha``; store the pair when its curvature is positive."""
        x_new, f_new, g_new = self._trials[alpha]
        s, y = x_new - self._x, g_new - self._g
        self.basis.advance((s, y) if keep_pair(float(s @ y), -float(self._g @ s)) else None, g_new)
        self.state.x, self.state.g = x_new, g_new
        return float(f_new)

    def gmax(self) -> float:
        return max_abs(self._g)

    def x(self) -> np.ndarray:
        return self._x.copy()

    def g(self) -> np.ndarray:
        return self._g.copy()


def _check_gradient(space: Any, opts: StoppingRules):
    if space.gmax() <= opts.gtol:
        return Status.CONVERGED, MSG_GTOL
    return None, ""


def _check_convergence(space: Any, state: IterationState, opts: StoppingRules):
    f_old, f_new = state.previous_f, state.f
    if (f_old - f_new) <= opts.ftol * max(abs(f_old), abs(f_new), 1.0):
        return Status.CONVERGED, MSG_FTOL
    return _check_gradient(space, opts)


def inverse_hessian_scale(basis: GramMatrix) -> float | None:
    """``gamma = s.y / y.y`` of the newest pair (L-BFGS's initial inverse Hessian, what
    ``initial_scale`` takes), or None without pairs."""
    k = basis.k
    if k == 0:
        return None
    gram = basis.gram()
    return float(gram[k - 1, 2 * k - 1] / gram[2 * k - 1, 2 * k - 1])


def check_limits(state: IterationState, opts: StoppingRules) -> tuple[Status, str] | None:
    """``(LIMIT, message)`` once the iterations or evaluations are used up."""
    if state.nit >= opts.maxiter:
        return Status.LIMIT, MSG_MAXITER
    if state.nfev >= opts.maxfun:
        return Status.LIMIT, MSG_MAXFUN
    return None


def search_failure(search: Any, state: LBFGSState, opts: LBFGSOptions, basis: GramMatrix):
    """How a run ends after a failed line search, or ``None`` to retry along the steepest
    descent (when pairs were in use: they may be what misled the search)."""
    if state.nfev >= opts.maxfun:
        return Status.LIMIT, MSG_MAXFUN
    if basis.k > 0:
        return None
    if search.saw_non_finite:
        return Status.NON_FINITE, (
            "ABNORMAL: the objective became non-finite along the search direction; x is the last finite iterate"
        )
    return Status.LINE_SEARCH_FAILED, f"ABNORMAL_TERMINATION_IN_LNSRCH: {search.message}"


def quasi_newton_iteration(space: Any, state: LBFGSState, opts: LBFGSOptions, *,
                           direction: Callable[[Any], tuple[float, float]],
                           search: Callable[..., Any]) -> tuple[Status, str] | None:
    """One iteration in place; returns ``(status, message)`` when it cannot go on.

    ``direction(space)`` points the space's search direction (dropping the pairs for the
    steepest descent when theirs is no descent) and returns its slope and first trial step;
    ``search(phi, f0, slope, alpha1, budget)`` is the line search. A failed search drops the
    pairs and tries once more (:func:`search_failure`).
    """
    limit = check_limits(state, opts)
    if limit is not None:
        return limit
    basis = space.basis
    for attempt in range(2):  # the second try starts over from steepest descent
        slope, alpha1 = direction(space)
        if attempt == 0 and state.nit == 0 and basis.k == 0 and opts.initial_scale is not None:
            alpha1 = opts.initial_scale  # the direction is -g (or -v): the step -gamma g

        def phi(alpha: float) -> tuple[float, float]:
            state.nfev += 1
            return space.trial(alpha)

        budget = min(opts.max_line_search, max(opts.maxfun - state.nfev, 1))
        result = search(phi, state.f, slope, alpha1, budget)
        if result.success:
            break
        if -slope * alpha1 <= opts.ftol * max(abs(state.f), 1.0):
            # the first trial step's predicted reduction is within ftol: the search failed at the
            # objective's precision, where the next accepted step would have stopped the run
            return Status.CONVERGED, MSG_PREDICTED
        failure = search_failure(result, state, opts, basis)
        if failure is not None:
            return failure
        basis.drop_pairs()
    state.previous_f = state.f
    state.last_step = result.alpha
    state.f = space.accept(result.alpha)
    state.nit += 1
    return None


def _two_loop_direction(space: Any) -> tuple[float, float]:
    """L-BFGS's ``p = -H g`` (``-g`` when that is no descent or no pair is stored)."""
    basis = space.basis
    gram = basis.gram()
    delta = two_loop_coefficients(gram, basis.k)
    slope = float(delta @ gram[:, -1])  # g . p
    if not slope < 0 or basis.k == 0:
        basis.drop_pairs()
        delta = two_loop_coefficients(basis.gram(), 0)
        slope = -float(basis.gram()[-1, -1])
        alpha1 = 1.0 / math.sqrt(-slope)
    else:
        alpha1 = 1.0
    space.set_direction(delta)
    return slope, alpha1


def _wolfe_search(phi: Callable[[float], tuple[float, float]], f0: float, slope: float, alpha1: float,
                  budget: int) -> Any:
    # the largest step is relative to the first trial: along -g that is 1 / ||g||, so an
    # absolute cap would depend on the objective's scale (the step in x is what matters)
    return strong_wolfe(phi, f0, slope, alpha1=alpha1, alpha_max=1e10 * alpha1, max_evals=budget)


_iterate = partial(quasi_newton_iteration, direction=_two_loop_direction, search=_wolfe_search)
