"""Exact ranking metrics (ROC AUC, average precision) and their curves, from per-shard sorted
score counts, finished in parts of the score range that can be computed side by side.

A shard's :class:`ScoreCounts` holds a *run*: its positive rows' scores and its negative rows'
scores, each sorted (descending, as ascending negated keys: a sort of plain numbers, no
payload, when every row weighs 1), with each row's weight when the rows are weighted (equal
scores collapsed into one entry with their weight where there are many). Counts merge by
keeping the runs, in the order merged.

To finish, the score range is cut at :data:`PARTS` - 1 distinct values taken from the runs
themselves (so the parts hold similar numbers of scores, and equal scores are always in one
part). Each part (:meth:`ScoreCounts.part`) takes its slice of every run (two binary searches
of a sorted run), merges them (a sort of the positives, one of the negatives, a stable merge
of the two: about ``n log n`` for ``n`` scores, never a comparison of every pair), and with
the weight of the rows scored above it forms the true and false positive weight at or above
each of its distinct scores, as scikit-learn's ``_binary_clf_curve`` forms them, so tied
scores are one threshold. From those it sums its trapezoids of the ROC area and its terms of
the average precision, and picks its points of the thinned curves: a :class:`RankedPart`, a
few hundred numbers. :class:`Ranked` adds the parts up in their order. Every part is computed
from all the runs, in their order, so the figures do not depend on where any part was
computed. Pure numpy: no Dask here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CURVE_POINTS", "PARTS", "Ranked", "RankedPart", "ScoreCounts"]

#: the score range is finished in this many parts (fixed: the figures do not depend on the cluster)
PARTS = 4
#: at most this many points of a ROC or precision-recall curve reach the client (and the figure)
CURVE_POINTS = 256
#: the cut points are quantiles of a sample of about this many keys per part
_SAMPLE = 1024

#: one class's sorted keys (negated scores, ascending) and their weights (None: each row weighs 1)
Side = tuple[np.ndarray, "np.ndarray | None"]
#: a run: its positive rows' side, then its negative rows'
Run = tuple[Side, Side]


@dataclass(frozen=True)
class ScoreCounts:
    """The sorted runs of score counts of some rows (one per shard), merged when finished."""

    runs: tuple[Run, ...]

    @classmethod
    def of(cls, scores: np.ndarray, is_positive: np.ndarray, weight: np.ndarray | None = None) -> ScoreCounts:
        """The counts of rows with ``scores``, positive where ``is_positive``, weighing
        ``weight`` (None, or every weight 1: the rows counted, no weights kept)."""
        scores = np.asarray(scores, dtype=np.float64)
        if not scores.size:
            return cls(())
        is_positive = np.asarray(is_positive, dtype=bool)
        if weight is not None and bool(np.all(weight == 1.0)):
            weight = None
        negative = ~is_positive
        return cls(((_sorted(scores[is_positive], None if weight is None else weight[is_positive]),
                     _sorted(scores[negative], None if weight is None else weight[negative])),))

    def merge(self, other: ScoreCounts) -> ScoreCounts:
        """The counts of both sets of rows, this one's runs first."""
        if not other.runs or not self.runs:
            return self if not other.runs else other
        return ScoreCounts(self.runs + other.runs)

    def totals(self) -> tuple[float, float]:
        """The positive and the negative rows' total weight."""
        return (sum(_weight(side, side[0].size) for side, _ in self.runs),
                sum(_weight(side, side[0].size) for _, side in self.runs))

    def cuts(self, parts: int) -> np.ndarray:
        """The distinct keys at which parts 1, 2, ... begin (fewer than ``parts - 1`` when the
        scores have fewer distinct values): quantiles of an even sample of every run."""
        size = sum(side[0].size for run in self.runs for side in run)
        if parts <= 1 or not size:
            return np.empty(0)
        step = max(1, size // (_SAMPLE * parts))
        sample = np.sort(np.concatenate([side[0][::step] for run in self.runs for side in run]))
        return np.unique(sample[[sample.size * k // parts for k in range(1, parts)]])

    def part(self, index: int, parts: int = 1, points: int = CURVE_POINTS) -> RankedPart:
        """Part ``index`` of ``parts``' contribution: its ROC area, its terms of the average
        precision and its points of the curves thinned to about ``points`` thresholds."""
        positives, negatives = self.totals()
        scores, tps, fps, above = self._thresholds(index, parts)
        if not scores.size:
            return RankedPart(positives, negatives, 0.0, 0.0, np.full(max(points - 1, 0), -1), np.empty(0, np.int64),
                              scores, tps, fps)
        tps0, fps0 = above
        before_tps, before_fps = np.concatenate([[tps0], tps[:-1]]), np.concatenate([[fps0], fps[:-1]])
        area = float(np.sum((fps - before_fps) * (tps + before_tps))) / 2  # trapezoids, 2x wide
        seen = tps + fps
        precision = np.divide(tps, seen, out=np.zeros_like(tps), where=seen > 0)  # 0 weight above: no threshold
        gain = float(np.sum((tps - before_tps) * precision))
        candidates = np.searchsorted(seen, np.linspace(0.0, positives + negatives, points - 1))
        candidates[candidates >= seen.size] = -1  # beyond this part: a later one's
        kept = np.unique(np.concatenate([candidates[candidates >= 0], [0, seen.size - 1]]))
        return RankedPart(positives, negatives, area, gain, candidates, kept, scores[kept], tps[kept], fps[kept])

    def ranked(self, parts: int = PARTS, points: int = CURVE_POINTS) -> Ranked:
        """Every part, finished here one after another."""
        return Ranked(tuple(self.part(index, parts, points) for index in range(parts)))

    def curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct scores (descending), and the true and the false positive weight at or
        above each (scikit-learn's ``_binary_clf_curve``), all of them."""
        scores, tps, fps, _ = self._thresholds(0, 1)
        return scores, tps, fps

    @property
    def scores(self) -> np.ndarray:
        """The distinct scores of every run, descending."""
        return self.curve()[0]

    @property
    def positive(self) -> np.ndarray:
        """The positive rows' weight at each of :attr:`scores`."""
        return np.diff(self.curve()[1], prepend=0.0)

    @property
    def negative(self) -> np.ndarray:
        """The negative rows' weight at each of :attr:`scores`."""
        return np.diff(self.curve()[2], prepend=0.0)

    def roc_auc(self) -> float:
        """:meth:`Ranked.roc_auc` of these counts."""
        return self.ranked().roc_auc()

    def average_precision(self) -> float:
        """:meth:`Ranked.average_precision` of these counts."""
        return self.ranked().average_precision()

    def _thresholds(self, index: int, parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[float, float]]:
        """Part ``index``'s distinct scores (descending), the true and false positive weight
        at or above each, and those above the part (the weight of the parts before it)."""
        cuts = self.cuts(parts)
        if index > cuts.size or not self.runs:
            return np.empty(0), np.empty(0), np.empty(0), (0.0, 0.0)
        sides = []
        for which in (0, 1):  # the positives' slices, then the negatives'
            slices, above = [], 0.0
            for run in self.runs:
                keys, weights = run[which]
                start = 0 if index == 0 else int(np.searchsorted(keys, cuts[index - 1]))
                stop = keys.size if index == cuts.size else int(np.searchsorted(keys, cuts[index]))
                above += _weight((keys, weights), start)
                slices.append((keys[start:stop], None if weights is None else weights[start:stop]))
            sides.append((_merged(slices), above))
        ((positive_keys, positive_weights), tps0), ((negative_keys, negative_weights), fps0) = sides
        keys = np.concatenate([positive_keys, negative_keys])
        if not keys.size:
            return np.empty(0), np.empty(0), np.empty(0), (tps0, fps0)
        order = np.argsort(keys, kind="stable")  # two sorted runs: a merge
        keys = keys[order]
        last = np.flatnonzero(np.append(keys[1:] != keys[:-1], True))  # the last row of each distinct score
        if positive_weights is None and negative_weights is None:
            above_positive = np.cumsum(order < positive_keys.size)[last]
            tps, fps = tps0 + above_positive, fps0 + (last + 1 - above_positive)
        else:
            positive = np.concatenate([_weights_of(positive_keys, positive_weights), np.zeros(negative_keys.size)])
            negative = np.concatenate([np.zeros(positive_keys.size), _weights_of(negative_keys, negative_weights)])
            tps, fps = tps0 + np.cumsum(positive[order])[last], fps0 + np.cumsum(negative[order])[last]
        return -keys[last], tps, fps, (tps0, fps0)


@dataclass(frozen=True)
class RankedPart:
    """What one part of the score range contributes (:meth:`ScoreCounts.part`): the totals of
    every part, its ROC area (twice the trapezoids, in weights), its sum of the gain in true
    positive weight times the precision at each threshold, and for each evenly spaced weight
    of the thinned curves the index of its first threshold with as much weight at or above
    (-1: none here), with the thresholds so chosen (``index``: their place in the part)."""

    positives: float
    negatives: float
    area: float
    gain: float
    candidates: np.ndarray
    index: np.ndarray
    scores: np.ndarray
    tps: np.ndarray
    fps: np.ndarray


@dataclass(frozen=True)
class Ranked:
    """The parts of one class's scores (all of them, in order), added up."""

    parts: tuple[RankedPart, ...]

    def roc_auc(self) -> float:
        """The area under the ROC curve (trapezoids between thresholds, as
        ``sklearn.metrics.roc_auc_score``); NaN when one class is absent."""
        positives, negatives = self.parts[0].positives, self.parts[0].negatives
        if positives <= 0 or negatives <= 0:
            return float("nan")
        return sum(part.area for part in self.parts) / positives / negatives

    def average_precision(self) -> float:
        """The sum over thresholds of precision times the gain in recall (as
        ``sklearn.metrics.average_precision_score``, no interpolation); NaN with no positives."""
        positives = self.parts[0].positives
        if positives <= 0:
            return float("nan")
        return sum(part.gain for part in self.parts) / positives

    def thinned(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The curve (scores, descending, and the true and false positive weight at or above
        each) at its first and last thresholds and, for each evenly spaced weight, the first
        threshold with as much weight at or above it (the last when none has)."""
        filled = [k for k, part in enumerate(self.parts) if part.index.size]
        if not filled:
            return np.empty(0), np.empty(0), np.empty(0)
        last = (filled[-1], int(self.parts[filled[-1]].index[-1]))
        chosen = {(filled[0], 0), last}
        for target in range(self.parts[0].candidates.size):
            found = [(k, int(part.candidates[target])) for k, part in enumerate(self.parts)
                     if part.candidates[target] >= 0]
            chosen.add(found[0] if found else last)
        rows = [(k, int(np.searchsorted(self.parts[k].index, i))) for k, i in sorted(chosen)]
        return tuple(np.array([getattr(self.parts[k], name)[row] for k, row in rows], dtype=np.float64)
                     for name in ("scores", "tps", "fps"))  # type: ignore[return-value]


def _sorted(scores: np.ndarray, weights: np.ndarray | None) -> Side:
    """A side of a run: ``scores`` (a copy, negated and sorted here) as keys with their
    ``weights``; equal keys collapsed into one entry weighing their total when they are many
    (fewer numbers to send and sort)."""
    keys = np.negative(scores, out=scores)
    if weights is None:
        keys.sort()
    else:
        order = np.argsort(keys)
        keys, weights = keys[order], np.asarray(weights, dtype=np.float64)[order]
    return _collapsed(keys, weights)


def _collapsed(keys: np.ndarray, weights: np.ndarray | None) -> Side:
    """Sorted ``keys`` with their ``weights``, equal keys collapsed into one entry weighing
    their total when they are many."""
    new = keys[1:] != keys[:-1]
    if 2 * (1 + np.count_nonzero(new)) < keys.size:
        starts = np.flatnonzero(np.concatenate([[True], new]))
        weights = (np.diff(np.append(starts, keys.size)).astype(np.float64) if weights is None
                   else np.add.reduceat(weights, starts))
        keys = keys[starts]
    return keys, weights


def _weight(side: Side, stop: int) -> float:
    """The weight of a side's first ``stop`` entries."""
    keys, weights = side
    return float(stop if weights is None else weights[:stop].sum())


def _weights_of(keys: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """The weight of each of ``keys``."""
    return np.ones(keys.size) if weights is None else weights


def _merged(slices: list[Side]) -> Side:
    """Sorted slices of runs, sorted together (the keys alone, when no weights are kept)."""
    keys = np.concatenate([keys for keys, _ in slices]) if slices else np.empty(0)
    if all(weights is None for _, weights in slices):
        keys.sort()  # in place: no second array of them
        return keys, None
    weights = np.concatenate([_weights_of(k, w) for k, w in slices])
    order = np.argsort(keys, kind="stable")
    return keys[order], weights[order]
