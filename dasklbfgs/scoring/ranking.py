"""Exact ranking metrics (ROC AUC, average precision) from per-shard sorted score counts.

A shard's :class:`ScoreCounts` holds its rows' scores, in descending order, with the weight
of each if positive and if negative (equal scores collapsed into one entry where there are
many): a sorted *run*. Counts merge by keeping the runs (:meth:`ScoreCounts.merge`, in the
order merged); the first time the dataset's counts are read, its k runs are merged at
once, by one stable sort of their concatenation (a merge of sorted runs: about ``n log k``
for ``n`` scores, never a comparison of every pair). The true and false positive weights
above each distinct score are then cumulative sums read at the last row of each score, as
scikit-learn's ``_binary_clf_curve`` forms them, so tied scores are one threshold. Equal
scores of different runs keep their run order, so the figures do not depend on where the
runs were computed. Pure numpy: no Dask here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["ScoreCounts"]

#: a run: scores negated (so ascending), and the positive and the negative weight at each
Run = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class ScoreCounts:
    """The sorted runs of score counts of some rows (one per shard), merged when read."""

    runs: tuple[Run, ...]

    @classmethod
    def of(cls, scores: np.ndarray, is_positive: np.ndarray, weight: np.ndarray) -> ScoreCounts:
        """The counts of rows with ``scores``, positive where ``is_positive``, weighing
        ``weight``: the rows sorted by score, descending; equal scores collapsed into one
        entry when they are many (they are collapsed anyway when the counts are read)."""
        keys = -np.asarray(scores, dtype=np.float64)
        if not keys.size:
            return cls(())
        order = np.argsort(keys)
        keys = keys[order]
        positive = np.where(is_positive, weight, 0.0)[order]
        negative = np.where(is_positive, 0.0, weight)[order]
        starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
        if 2 * starts.size < keys.size:  # mostly ties: fewer numbers to send and sort
            keys, positive, negative = (keys[starts], np.add.reduceat(positive, starts),
                                        np.add.reduceat(negative, starts))
        return cls(((keys, positive, negative),))

    def merge(self, other: ScoreCounts) -> ScoreCounts:
        """The counts of both sets of rows, this one's runs first."""
        if not other.runs or not self.runs:
            return self if not other.runs else other
        return ScoreCounts(self.runs + other.runs)

    def curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct scores (descending), and the true and the false positive weight at or
        above each (scikit-learn's ``_binary_clf_curve``)."""
        return self._curve

    @cached_property
    def _curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`curve`: the runs sorted together (a stable sort merges the sorted runs it finds),
        cumulative sums taken in that order and read at each score's last row."""
        if not self.runs:
            return np.empty(0), np.empty(0), np.empty(0)
        if len(self.runs) == 1:
            keys, positive, negative = self.runs[0]
        else:
            keys = np.concatenate([run[0] for run in self.runs])
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
            positive = np.concatenate([run[1] for run in self.runs])[order]
            negative = np.concatenate([run[2] for run in self.runs])[order]
        last = np.flatnonzero(np.append(keys[1:] != keys[:-1], True))  # the last row of each distinct score
        return -keys[last], np.cumsum(positive)[last], np.cumsum(negative)[last]

    @property
    def scores(self) -> np.ndarray:
        """The distinct scores of every run, descending."""
        return self._curve[0]

    @property
    def positive(self) -> np.ndarray:
        """The positive rows' weight at each of :attr:`scores`."""
        return np.diff(self._curve[1], prepend=0.0)

    @property
    def negative(self) -> np.ndarray:
        """The negative rows' weight at each of :attr:`scores`."""
        return np.diff(self._curve[2], prepend=0.0)

    def roc_auc(self) -> float:
        """The area under the ROC curve (trapezoids between thresholds, as
        ``sklearn.metrics.roc_auc_score``); NaN when one class is absent."""
        _, tps, fps = self._curve
        if tps.size == 0 or tps[-1] <= 0 or fps[-1] <= 0:
            return float("nan")
        tpr = np.concatenate([[0.0], tps / tps[-1]])
        fpr = np.concatenate([[0.0], fps / fps[-1]])
        return float(np.trapezoid(tpr, fpr))

    def average_precision(self) -> float:
        """The sum over thresholds of precision times the gain in recall (as
        ``sklearn.metrics.average_precision_score``, no interpolation); NaN with no positives."""
        _, tps, fps = self._curve
        if tps.size == 0 or tps[-1] <= 0:
            return float("nan")
        seen = tps + fps
        precision = np.divide(tps, seen, out=np.zeros_like(tps), where=seen > 0)  # 0 weight above: no threshold
        recall = tps / tps[-1]
        return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))
