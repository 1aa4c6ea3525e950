"""How a learning curve is drawn honestly: the rules ``curves.png`` and the Training page share.

A mini-batch loss is noisy: drawn faint, with TensorBoard's smoothing over it (:func:`smoothed`,
:func:`smoothing_weight`). Axis ranges never shrink below a decade (log) or a tenth of the
values' size (linear), so noise does not look like learning (:func:`honest_limits`). The best
held-out point is the highest value of a figure where higher is better, else the lowest
(:func:`best_point`). Pure Python and numpy: no plotting library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dasklbfgs.scoring.names import HIGHER_IS_BETTER

__all__ = ["SMOOTHING", "smoothed", "smoothing_weight", "honest_limits", "is_noisy", "best_point"]

#: TensorBoard's default smoothing weight for its scalar curves
SMOOTHING = 0.9
_MIN_LINEAR_SPAN = 0.1  # of the largest absolute value
_MIN_DECADES = 1.0


def is_noisy(loss_name: str) -> bool:
    """Whether a training curve whose ``loss`` is ``loss_name`` (a solver's
    ``stats.loss_name``) is a mini-batch loss, noisy, rather than the full-batch objective."""
    return loss_name != "objective"


def smoothing_weight(n_points: int) -> float:
    """TensorBoard's 0.9, lighter for short curves (about a tenth of the points in the
    average), none under 20 points: smoothing a handful of points only makes them lag."""
    return min(SMOOTHING, max(0.0, 1.0 - 10.0 / n_points)) if n_points >= 20 else 0.0


def smoothed(values: Sequence[float], weight: float = SMOOTHING) -> np.ndarray:
    """Exponential moving average with the start-up bias removed (TensorBoard's smoothing)."""
    out, average = np.empty(len(values)), 0.0
    for i, value in enumerate(values):
        average = weight * average + (1 - weight) * value
        out[i] = average / (1 - weight ** (i + 1))
    return out


def honest_limits(values: Sequence[float], log: bool) -> tuple[float, float] | None:
    """y limits that cover ``values`` and span at least a decade (log) or a tenth of the
    largest absolute value (linear), centred on the data, so small wiggles stay small."""
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    if log:
        low, high = math.log10(low), math.log10(high)
        widen = max(0.0, _MIN_DECADES - (high - low)) / 2 + 0.05 * (high - low)
        return 10 ** (low - widen), 10 ** (high + widen)
    floor = _MIN_LINEAR_SPAN * max(abs(low), abs(high)) or 1.0
    widen = max(0.0, floor - (high - low)) / 2 + 0.05 * (high - low)
    return low - widen, high + widen


def best_point(xs: Sequence[float], ys: Sequence[float], metric: str) -> tuple[float, float] | None:
    """``(x, y)`` of the best finite value of the held-out figure ``metric`` (a name of
    :data:`~dasklbfgs.scoring.names.METRIC_LABELS`: ``"accuracy"``, ``"objective"``): the
    highest where higher is better, else the lowest; the first on ties; None without one."""
    points = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    if not points:
        return None
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    return min(points, key=lambda point: sign * point[1])
