"""A line search for the strong Wolfe conditions that needs only scalars.

``phi(alpha)`` returns ``(f(x + alpha p), grad f(x + alpha p) . p)``: the objective and
the directional derivative along ``p``. Nothing here touches a vector, so the same search
serves a coordinator that never holds the parameters (docs/algorithms.md §1).

Bracketing and zoom with safeguarded cubic interpolation (Nocedal & Wright, *Numerical
Optimization*, 2nd ed., Algorithms 3.5 and 3.6). Trial steps where the objective is not
finite are treated as too long: the interval is shrunk towards the last finite point.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LineSearchResult", "backtracking_armijo", "strong_wolfe"]

Phi = Callable[[float], tuple[float, float]]


@dataclass(frozen=True)
class LineSearchResult:
    """Outcome of :func:`strong_wolfe`; ``alpha`` is 0 when no acceptable step was found."""

    alpha: float
    f: float
    derivative: float
    n_evals: int
    success: bool
    message: str
    saw_non_finite: bool = False


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def _cubic_min(a: float, fa: float, da: float, b: float, fb: float, db: float) -> float:
    """Minimiser of the cubic through (a, fa, da) and (b, fb, db); NaN when it has none."""
    d1 = da + db - 3.0 * (fa - fb) / (a - b)
    radicand = d1 * d1 - da * db
    if radicand < 0:
        return math.nan
    d2 = math.copysign(math.sqrt(radicand), b - a)
    denom = db - da + 2.0 * d2
    if denom == 0:
        return math.nan
    return b - (b - a) * (db + d2 - d1) / denom


def _quadratic_min(a: float, fa: float, da: float, b: float, fb: float) -> float:
    """Minimiser of the quadratic through (a, fa) with slope da at a and (b, fb)."""
    h = b - a
    curvature = (fb - fa - da * h) / (h * h)
    if curvature <= 0:
        return math.nan
    return a - da / (2.0 * curvature)


def _interpolate(lo, f_lo, d_lo, hi, f_hi, d_hi) -> float:
    low, high = min(lo, hi), max(lo, hi)
    margin = 0.1 * (high - low)
    for candidate in (
        _cubic_min(lo, f_lo, d_lo, hi, f_hi, d_hi) if _finite(f_hi, d_hi) else math.nan,
        _quadratic_min(lo, f_lo, d_lo, hi, f_hi) if _finite(f_hi) else math.nan,
    ):
        if math.isfinite(candidate) and low + margin <= candidate <= high - margin:
            return candidate
    return 0.5 * (lo + hi)


def strong_wolfe(
    phi: Phi,
    f0: float,
    d0: float,
    *,
    alpha1: float = 1.0,
    c1: float = 1e-4,
    c2: float = 0.9,
    alpha_max: float = 1e10,
    max_evals: int = 20,
) -> LineSearchResult:
    """Find ``alpha > 0`` with ``f(alpha) <= f0 + c1 alpha d0`` and ``|d(alpha)| <= c2 |d0|``.

    Parameters
    ----------
    phi
        ``alpha -> (f, d)``, objective and directional derivative at ``x + alpha p``.
    f0, d0
        Values at ``alpha = 0``; ``d0`` must be negative (a descent direction).
    alpha1
        First trial step.
    c1, c2
        Sufficient-decrease and curvature constants, ``0 < c1 < c2 < 1``.
    alpha_max
        Largest step tried while bracketing.
    max_evals
        Budget of ``phi`` calls.
    """
    if not d0 < 0:
        raise ValueError(f"d0 must be negative for a descent direction, got {d0!r}")
    evals = 0
    saw_non_finite = False
    prev, f_prev, d_prev = 0.0, f0, d0
    alpha = min(alpha1, alpha_max)
    while evals < max_evals:
        f, d = phi(alpha)
        evals += 1
        if not _finite(f, d):
            saw_non_finite = True
            return _zoom(phi, f0, d0, prev, f_prev, d_prev, alpha, math.inf, math.nan,
                         c1, c2, evals, max_evals, saw_non_finite)
        if f > f0 + c1 * alpha * d0 or (evals > 1 and f >= f_prev):
            return _zoom(phi, f0, d0, prev, f_prev, d_prev, alpha, f, d,
                         c1, c2, evals, max_evals, saw_non_finite)
        if abs(d) <= -c2 * d0:
            return LineSearchResult(alpha, f, d, evals, True, "strong Wolfe conditions hold", saw_non_finite)
        if d >= 0:
            return _zoom(phi, f0, d0, alpha, f, d, prev, f_prev, d_prev,
                         c1, c2, evals, max_evals, saw_non_finite)
        if alpha >= alpha_max:
            break
        prev, f_prev, d_prev = alpha, f, d
        alpha = min(2.0 * alpha, alpha_max)
    return LineSearchResult(0.0, f0, d0, evals, False,
                            "no step satisfying the strong Wolfe conditions within the budget",
                            saw_non_finite)


def _zoom(phi, f0, d0, lo, f_lo, d_lo, hi, f_hi, d_hi, c1, c2, evals, max_evals, saw_non_finite):
    """Shrink the bracket [lo, hi] (lo: the best point with sufficient decrease)."""
    while evals < max_evals:
        if abs(hi - lo) <= 1e-15 * max(abs(lo), abs(hi)):  # relative: tiny steps are fine
            break
        alpha = _interpolate(lo, f_lo, d_lo, hi, f_hi, d_hi)
        f, d = phi(alpha)
        evals += 1
        if not _finite(f, d):
            saw_non_finite = True
            hi, f_hi, d_hi = alpha, math.inf, math.nan
            continue
        if f > f0 + c1 * alpha * d0 or f >= f_lo:
            hi, f_hi, d_hi = alpha, f, d
            continue
        if abs(d) <= -c2 * d0:
            return LineSearchResult(alpha, f, d, evals, True, "strong Wolfe conditions hold", saw_non_finite)
        if d * (hi - lo) >= 0:
            hi, f_hi, d_hi = lo, f_lo, d_lo
        lo, f_lo, d_lo = alpha, f, d
    return LineSearchResult(0.0, f0, d0, evals, False,
                            "no step satisfying the strong Wolfe conditions within the budget",
                            saw_non_finite)


def backtracking_armijo(
    phi: Phi,
    f0: float,
    *,
    alpha1: float = 1.0,
    c1: float = 1e-4,
    shrink: float = 0.5,
    max_evals: int = 20,
) -> LineSearchResult:
    """Halve ``alpha`` from ``alpha1`` until ``f(alpha) <= f0 + c1 * predicted(alpha)``.

    For OWL-QN's projected search (docs/algorithms.md §8): ``phi(alpha)`` returns the
    objective at the (projected) trial point and the predicted change there, ``v . (x(alpha)
    - x)`` with ``v`` the pseudo-gradient, negative along a descent direction. The path bends
    at the orthant's faces, so there is no curvature condition to test; a non-finite
    objective counts as a step too long. ``derivative`` holds the predicted change.
    """
    alpha, saw_non_finite = alpha1, False
    for evals in range(1, max_evals + 1):
        f, predicted = phi(alpha)
        if not _finite(f):
            saw_non_finite = True
        elif predicted < 0 and f <= f0 + c1 * predicted:
            return LineSearchResult(alpha, f, predicted, evals, True, "sufficient decrease (Armijo) holds",
                                    saw_non_finite)
        alpha *= shrink
    return LineSearchResult(0.0, f0, math.nan, max_evals, False,
                            "no step with sufficient decrease within the budget", saw_non_finite)
