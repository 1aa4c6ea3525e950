"""Exact ranking metrics (ROC AUC, average precision) from per-shard sorted score counts.

A shard's :class:`ScoreCounts` holds its distinct scores, in descending order, with the
weight of the positive and of the negative rows at each. Counts merge by a sorted union
(:meth:`ScoreCounts.merge`), so the dataset's counts cost a sort of its rows, not a
comparison of every pair, and tied scores stay one threshold, as scikit-learn's
``_binary_clf_curve`` treats them. Pure numpy: no Dask here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ScoreCounts"]


@dataclass(frozen=True)
class ScoreCounts:
    """Distinct scores (descending) and the positive and negative weight at each."""

    scores: np.ndarray
    positive: np.ndarray
    negative: np.ndarray

    @classmethod
    def of(cls, scores: np.ndarray, is_positive: np.ndarray, weight: np.ndarray) -> ScoreCounts:
        """The counts of rows with ``scores``, positive where ``is_positive``, weighing ``weight``."""
        distinct, inverse = np.unique(-np.asarray(scores, dtype=np.float64), return_inverse=True)
        positive = np.bincount(inverse, weights=weight * is_positive, minlength=distinct.size)
        negative = np.bincount(inverse, weights=weight * ~is_positive, minlength=distinct.size)
        return cls(-distinct, positive, negative)

    def merge(self, other: ScoreCounts) -> ScoreCounts:
        """The counts of both sets of rows (equal scores added together): the two sorted runs
        merged by a stable sort (timsort merges two runs in linear time), then the equal
        scores collapsed."""
        if not other.scores.size or not self.scores.size:
            return self if other.scores.size == 0 else other
        scores = np.concatenate([self.scores, other.scores])
        order = np.argsort(-scores, kind="stable")
        ordered = scores[order]
        starts = np.concatenate([[0], np.flatnonzero(ordered[1:] != ordered[:-1]) + 1])
        positive = np.add.reduceat(np.concatenate([self.positive, other.positive])[order], starts)
        negative = np.add.reduceat(np.concatenate([self.negative, other.negative])[order], starts)
        return ScoreCounts(ordered[starts], positive, negative)

    def _curve(self) -> tuple[np.ndarray, np.ndarray]:
        """True and false positive weight at each threshold, highest first."""
        return np.cumsum(self.positive), np.cumsum(self.negative)

    def roc_auc(self) -> float:
        """The area under the ROC curve (trapezoids between thresholds, as
        ``sklearn.metrics.roc_auc_score``); NaN when one class is absent."""
        tps, fps = self._curve()
        if tps.size == 0 or tps[-1] <= 0 or fps[-1] <= 0:
            return float("nan")
        tpr = np.concatenate([[0.0], tps / tps[-1]])
        fpr = np.concatenate([[0.0], fps / fps[-1]])
        return float(np.trapezoid(tpr, fpr))

    def average_precision(self) -> float:
        """The sum over thresholds of precision times the gain in recall (as
        ``sklearn.metrics.average_precision_score``, no interpolation); NaN with no positives."""
        tps, fps = self._curve()
        if tps.size == 0 or tps[-1] <= 0:
            return float("nan")
        seen = tps + fps
        precision = np.divide(tps, seen, out=np.zeros_like(tps), where=seen > 0)  # 0 weight above: no threshold
        recall = tps / tps[-1]
        return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))
