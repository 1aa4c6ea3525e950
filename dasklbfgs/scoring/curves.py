"""What the score figures draw, from pieces each shard computes and merges: the ROC and
precision-recall curves (from the exact :class:`~dasklbfgs.scoring.ranking.ScoreCounts`),
a reliability (calibration) diagram (:class:`Reliability`: fixed bins of the predicted
probability) and a histogram of regression residuals (:class:`Histogram`: bins of a
power-of-two width aligned on its multiples, so two shards' histograms merge exactly
whatever their ranges). Pure numpy: the workers compute and merge them; only the finished
points, a few hundred numbers, reach the client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.scoring.ranking import CURVE_POINTS, Ranked, ScoreCounts

__all__ = ["CURVE_POINTS", "RELIABILITY_BINS", "Histogram", "Reliability", "ranking_curves"]

#: the reliability diagram's bins of the predicted probability, uniform on [0, 1] (scikit-learn's
#: ``calibration_curve`` default ``n_bins=5`` is coarse for large data; its ``strategy="uniform"``)
RELIABILITY_BINS = 10
#: a residual histogram has between this many and twice as many bins over its range
HISTOGRAM_BINS = 32


@dataclass(frozen=True)
class Reliability:
    """Per bin of the predicted probability: the rows' weight, the weighted sum of their
    predicted probabilities and the weight of those that were right (positive, for a binary
    model's P(y=1); the predicted class correct, for a multi-class model's top probability)."""

    weight: np.ndarray
    predicted: np.ndarray
    hits: np.ndarray

    @classmethod
    def of(cls, probability: np.ndarray, hit: np.ndarray, weight: np.ndarray | None = None) -> Reliability:
        """The bins of rows with ``probability``, right where ``hit``, weighing ``weight``
        (None: 1 each)."""
        bins = _uniform_bins(probability)
        n = RELIABILITY_BINS
        if weight is None:  # the rows and the right ones counted at once
            counts = np.bincount(bins + n * hit, minlength=2 * n).astype(np.float64)
            return cls(counts[:n] + counts[n:], np.bincount(bins, weights=probability, minlength=n), counts[n:])
        return cls(np.bincount(bins, weights=weight, minlength=n), np.bincount(bins, weights=weight * probability,
                                                                              minlength=n),
                   np.bincount(bins, weights=weight * hit, minlength=n))

    def merge(self, other: Reliability) -> Reliability:
        return Reliability(self.weight + other.weight, self.predicted + other.predicted, self.hits + other.hits)

    def finished(self) -> dict[str, list[float]]:
        """The non-empty bins' mean predicted probability, fraction right and weight (the
        first two as ``sklearn.calibration.calibration_curve``'s ``prob_pred``, ``prob_true``)."""
        kept = self.weight > 0
        return {"mean_predicted": (self.predicted[kept] / self.weight[kept]).tolist(),
                "fraction_positive": (self.hits[kept] / self.weight[kept]).tolist(),
                "weight": self.weight[kept].tolist()}


def _uniform_bins(probability: np.ndarray) -> np.ndarray:
    """scikit-learn's uniform bins of ``probability`` (``calibration_curve``): edges
    ``linspace(0, 1, n + 1)``, a probability on an edge in the bin below it, NaN in the last."""
    return np.searchsorted(_INNER_EDGES, probability)


#: the reliability bins' edges between 0 and 1
_INNER_EDGES = np.linspace(0.0, 1.0, RELIABILITY_BINS + 1)[1:-1]


@dataclass(frozen=True)
class Histogram:
    """Weight of values in bins ``[k * width, (k + 1) * width)`` for ``k`` from ``first``:
    ``width`` a power of two chosen for the range, so a merge re-bins the finer histogram
    into the coarser one's bins by adding whole groups of bins."""

    width: float
    first: int
    weight: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray, weight: np.ndarray) -> Histogram:
        finite = np.isfinite(values)
        values, weight = values[finite], weight[finite]
        if not values.size:
            return cls(1.0, 0, np.zeros(0))
        low, high = float(values.min()), float(values.max())
        width = _width_for(low, high)
        first = math.floor(low / width)
        bins = np.floor(values / width).astype(np.int64) - first
        return cls(width, first, np.bincount(bins, weights=weight))._within_bounds()

    def merge(self, other: Histogram) -> Histogram:
        if not other.weight.size or not self.weight.size:
            return self if not other.weight.size else other
        low = min(self.first * self.width, other.first * other.width)
        high = max((self.first + self.weight.size) * self.width, (other.first + other.weight.size) * other.width)
        width = max(self.width, other.width, _width_for(low, high))  # bins for the union's range: a few dozen
        a, b = self._rebinned(width), other._rebinned(width)
        first = min(a.first, b.first)
        weight = np.zeros(max(a.first + a.weight.size, b.first + b.weight.size) - first)
        weight[a.first - first: a.first - first + a.weight.size] += a.weight
        weight[b.first - first: b.first - first + b.weight.size] += b.weight
        return Histogram(width, first, weight)._within_bounds()

    def _rebinned(self, width: float) -> Histogram:
        """The same counts in bins ``width`` wide (a power-of-two multiple of this one's);
        the bins' indices in Python integers, which no ratio of widths overflows."""
        if width == self.width:
            return self
        factor = 2 ** (math.frexp(width)[1] - math.frexp(self.width)[1])  # both powers of two: exact
        index = [(self.first + k) // factor for k in range(self.weight.size)]  # at most 2 * HISTOGRAM_BINS
        first = index[0]
        return Histogram(width, first, np.bincount(np.asarray(index) - first, weights=self.weight))

    def _within_bounds(self) -> Histogram:
        """At most ``2 * HISTOGRAM_BINS`` bins: twice as wide while more."""
        histogram = self
        while histogram.weight.size > 2 * HISTOGRAM_BINS:
            histogram = histogram._rebinned(2 * histogram.width)
        return histogram

    def finished(self) -> dict[str, list[float]]:
        """The bins' edges and weights."""
        edges = (self.first + np.arange(self.weight.size + 1)) * self.width
        return {"edges": edges.tolist(), "weight": self.weight.tolist()}


def _width_for(low: float, high: float) -> float:
    """The power of two that cuts ``[low, high]`` into between ``HISTOGRAM_BINS`` and twice as
    many bins; never so fine that a bin's index (value / width) leaves the float's exact
    integers, and a normal float (no overflow or underflow at the ends of the range)."""
    half_span, size = high / 2 - low / 2, max(abs(low), abs(high))  # halves: no overflow near the largest floats
    if size == 0:
        return 1.0
    scale = int(math.log2(HISTOGRAM_BINS))
    exponent = (math.floor(math.log2(half_span)) + 1 - scale if half_span > 0
                else math.floor(math.log2(size)) - scale)
    exponent = max(exponent, math.ceil(math.log2(size)) - 50, -1022)
    return math.ldexp(1.0, min(exponent, 1023))


def ranking_curves(ranked: Ranked | ScoreCounts) -> dict[str, Any]:
    """The ROC curve (``fpr``, ``tpr``) and the precision-recall curve (``recall``,
    ``precision``) at most :data:`CURVE_POINTS` thresholds, spread evenly over the rows'
    weight (the fraction of the data called positive), with the first and last thresholds
    always kept (:meth:`~dasklbfgs.scoring.ranking.Ranked.thinned`); the curves as
    ``sklearn.metrics.roc_curve`` and ``precision_recall_curve`` compute them, thinned.
    Empty when one class is absent."""
    if isinstance(ranked, ScoreCounts):
        ranked = ranked.ranked()
    scores, tps, fps = ranked.thinned()
    if not tps.size or tps[-1] <= 0 or fps[-1] <= 0:
        return {}
    seen = tps + fps
    precision = np.divide(tps, seen, out=np.ones_like(tps), where=seen > 0)
    return {"roc": {"fpr": [0.0, *(fps / fps[-1]).tolist()], "tpr": [0.0, *(tps / tps[-1]).tolist()]},
            "precision_recall": {"recall": (tps / tps[-1]).tolist(), "precision": precision.tolist()},
            "thresholds": scores.tolist()}
