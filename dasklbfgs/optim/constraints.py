"""What keeps a quasi-Newton step where the objective is smooth: L1 orthants and a box.

:class:`Constraints` holds per-coordinate L1 weights (OWL-QN's term ``sum_j w_j |x_j|``) and
bounds ``lower <= x <= upper``, either or both, and does the element-wise work the
orthant-wise and projected quasi-Newton method asks of them (docs/algorithms.md §8, §12):

- the *pseudo-gradient* ``v``: the minimum-norm subgradient of the L1 term's objective, then
  zero where a coordinate sits on a bound and ``-v`` points out of the box (the projected
  gradient: zero at a minimum, the quantity the gradient-norm test reads);
- the direction's alignment: zero where its sign disagrees with ``-v`` (penalised
  coordinates), and where it points out of the box from a coordinate on a bound;
- each trial point's projection: onto the orthant of the current iterate (OWL-QN), then
  onto the box (clipped).

Everything is element-wise, so a slice of the coordinates (:meth:`Constraints.part`) does
its part on a slice of the vectors: the sharded Sandblaster state does exactly this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError

__all__ = ["Constraints", "box"]


def _bound(values: Any, n: int, name: str, infinite: float) -> np.ndarray | None:
    """``values`` as ``n`` float64 bounds (a number or ``n`` numbers; None: none), NaN refused."""
    if values is None:
        return None
    bound = np.array(values, dtype=np.float64)
    if bound.shape not in ((), (n,)):
        raise ConfigurationError(f"{name} must be a number or {n} numbers (one per coordinate), got shape "
                                 f"{bound.shape}")
    bound = np.broadcast_to(bound, (n,)).copy()
    if np.isnan(bound).any():
        raise ConfigurationError(f"{name} holds NaN at coordinate {int(np.flatnonzero(np.isnan(bound))[0])}; give "
                                 f"a number, or {infinite} for no bound")
    return None if np.all(bound == infinite) else bound


def box(lower: Any, upper: Any, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(lower, upper)`` checked for ``n`` coordinates: numbers or ``n`` numbers each (-inf /
    inf or None: unbounded), with ``lower <= upper`` everywhere (else the box holds no point:
    :class:`~dasklbfgs.errors.ConfigurationError` naming the first coordinate)."""
    low, high = _bound(lower, n, "lower", -np.inf), _bound(upper, n, "upper", np.inf)
    if low is not None and high is not None and np.any(low > high):
        j = int(np.flatnonzero(low > high)[0])
        raise ConfigurationError(f"the bounds exclude every point: lower[{j}] = {low[j]:g} > upper[{j}] = {high[j]:g}")
    if (low is not None and np.any(low == np.inf)) or (high is not None and np.any(high == -np.inf)):
        raise ConfigurationError("a lower bound of inf or an upper bound of -inf excludes every point")
    return low, high


@dataclass(frozen=True)
class Constraints:
    """L1 weights (``weights``, >= 0; None: no L1 term) and a box (``lower``, ``upper``;
    None: unbounded on that side), over the same coordinates."""

    weights: np.ndarray | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None

    @property
    def penalised(self) -> np.ndarray | None:
        return None if self.weights is None else self.weights > 0

    @property
    def bounded(self) -> bool:
        return self.lower is not None or self.upper is not None

    def part(self, start: int, stop: int) -> Constraints:
        """The constraints of coordinates ``[start, stop)``."""
        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[start:stop]

        return Constraints(cut(self.weights), cut(self.lower), cut(self.upper))

    def project(self, x: np.ndarray) -> np.ndarray:
        """``x`` clipped into the box, in place (the orthant left alone); returned."""
        if self.bounded:
            np.clip(x, self.lower, self.upper, out=x)
        return x

    def l1_term(self, x: np.ndarray) -> float:
        return 0.0 if self.weights is None else float(self.weights @ np.abs(x))

    def pseudo_gradient(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        """The L1 term's minimum-norm subgradient (``g`` without one), zero where ``x`` sits on
        a bound and the step ``-v`` would leave the box."""
        v = g.copy() if self.weights is None else _l1_pseudo_gradient(x, g, self.weights)
        blocked = self._blocked(x, -v)
        if blocked is not None:
            v[blocked] = 0.0
        return v

    def align(self, x: np.ndarray, p: np.ndarray, v: np.ndarray) -> None:
        """Zero, in place, the components of the direction ``p`` from ``x`` that disagree in
        sign with ``-v`` (penalised coordinates), point out of the box from a bound, or move a
        coordinate held on its bound (``v = 0`` there: the gradient pushes it against the
        bound, so this iteration fixes it, as projected Newton methods do; the curvature the
        pairs hold between it and the free coordinates would otherwise pull it off)."""
        penalised = self.penalised
        if penalised is not None:
            np.copyto(p, 0.0, where=penalised & (p * v >= 0))
        blocked = self._blocked(x, p)
        if blocked is not None:
            held = self._blocked(x, -np.sign(p)) & (v == 0)
            p[blocked | held] = 0.0

    def orthant(self, x: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """The orthant a step from ``x`` stays in (``sign(x)``, or ``sign(-v)`` at 0); None
        without an L1 term."""
        if self.weights is None:
            return None
        return np.where(x != 0, np.sign(x), -np.sign(v))

    def project_trial(self, x_trial: np.ndarray, orthant: np.ndarray | None) -> None:
        """A trial point, in place: penalised components that left ``orthant`` set to 0,
        then the box's clip."""
        penalised = self.penalised
        if orthant is not None and penalised is not None:
            np.copyto(x_trial, 0.0, where=penalised & (np.sign(x_trial) != orthant))
        self.project(x_trial)

    def _blocked(self, x: np.ndarray, step: np.ndarray) -> np.ndarray | None:
        """Where ``x`` sits on a bound and ``step`` points out of the box (None: no box)."""
        if not self.bounded:
            return None
        blocked = np.zeros(x.shape, dtype=bool)
        if self.lower is not None:
            blocked |= (x <= self.lower) & (step < 0)
        if self.upper is not None:
            blocked |= (x >= self.upper) & (step > 0)
        return blocked


def _l1_pseudo_gradient(x: np.ndarray, g: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The minimum-norm subgradient of ``f + sum w |x|``: ``g + w sign(x)`` off zero; at zero
    ``g + w`` or ``g - w`` when that still points downhill, else 0 (zero is optimal there)."""
    v = np.sign(x)  # streamed over whole vectors (no gathers at the zeros: most of a sparse solution)
    v *= weights
    v += g
    right, left = g + weights, g - weights
    np.copyto(v, np.where(right < 0, right, np.where(left > 0, left, 0.0)), where=x == 0)
    return v
