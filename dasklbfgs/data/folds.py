"""Cross-validation folds over a sharded dataset, shard by shard: scikit-learn's ``KFold`` and
``StratifiedKFold`` (without shuffling) on the rows in their stored order, computed where each
shard lives from a few numbers per shard, never from the rows in one place.

``KFold(k)`` cuts the rows, in order, into ``k`` runs, the first ``n % k`` one row longer.
``StratifiedKFold(k)`` deals each class's rows, in order, to the folds by scikit-learn's
allocation: the labels sorted and dealt round-robin, ``allocation[i, c]`` rows of class ``c``
to fold ``i``, the class's rows then given to fold 0's share first, then fold 1's, ... So the
fold of a row depends on its class and its rank among that class's rows, which a shard gets
from the class counts of the shards before it. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError

__all__ = ["Folds", "RandomSplit", "check_n_splits", "kfold", "stratified_kfold"]


@dataclass(frozen=True)
class Folds:
    """Which fold each row is held out in: ``n_splits`` folds, and per shard what its rows'
    folds follow from (``kind`` "kfold": the fold boundaries in rows; "stratified": the
    class offsets of each shard and the per-class fold boundaries in class ranks)."""

    kind: str
    n_splits: int
    bounds: np.ndarray  # kfold: (n_splits + 1,) row edges; stratified: (n_classes, n_splits + 1) rank edges
    shard_starts: np.ndarray  # kfold: each shard's first row; stratified: (n_shards, n_classes) ranks before it

    @property
    def needs_labels(self) -> bool:
        """Whether a row's fold depends on its label (stratified folds), not only its position."""
        return self.kind == "stratified"

    def of_shard(self, shard: int, y: np.ndarray) -> np.ndarray:
        """The fold of each row of shard ``shard`` (labels ``y``, used by stratified folds)."""
        if self.kind == "kfold":
            rows = self.shard_starts[shard] + np.arange(len(y))
            return np.searchsorted(self.bounds, rows, side="right") - 1
        classes = np.asarray(y).astype(np.intp)
        folds = np.empty(len(classes), dtype=np.intp)
        for c in np.unique(classes):
            at = np.flatnonzero(classes == c)
            ranks = self.shard_starts[shard, c] + np.arange(len(at))
            folds[at] = np.searchsorted(self.bounds[c], ranks, side="right") - 1
        return folds


@dataclass(frozen=True)
class RandomSplit:
    """A seeded random ``fraction`` of each shard's rows held out (fold 1), the others kept
    (fold 0): each row by a uniform draw from the generator of ``(seed, shard)``, so the same
    rows whatever the worker count or the order shards are read in (scikit-learn's
    ``validation_fraction``, without its stratification)."""

    fraction: float
    seed: int = 0
    n_splits: int = 2  # fold 0 the kept rows, fold 1 the held-out ones
    needs_labels = False  # a row's fold follows from its shard and position alone

    def of_shard(self, shard: int, y: np.ndarray) -> np.ndarray:
        """The fold of each row of shard ``shard``: 1 for held-out rows, else 0."""
        draws = np.random.default_rng([self.seed, shard]).random(len(y))
        return (draws < self.fraction).astype(np.intp)


def check_n_splits(n_splits: Any) -> None:
    """``n_splits`` is a number of folds: an integer >= 2."""
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 2:
        raise ConfigurationError(f"cv must be an integer number of folds >= 2, got {n_splits!r}")


def _check_splits(n_splits: int, n: int) -> None:
    check_n_splits(n_splits)
    if n_splits > n:
        raise ConfigurationError(f"cv={n_splits} folds need at least {n_splits} rows; the dataset has {n}")


def kfold(shard_rows: list[int], n_splits: int) -> Folds:
    """scikit-learn's ``KFold(n_splits)`` over shards of ``shard_rows`` rows, in order."""
    n = int(sum(shard_rows))
    _check_splits(n_splits, n)
    sizes = np.full(n_splits, n // n_splits)
    sizes[: n % n_splits] += 1
    return Folds("kfold", int(n_splits), np.concatenate([[0], np.cumsum(sizes)]),
                 np.concatenate([[0], np.cumsum(shard_rows)[:-1]]).astype(np.int64))


def stratified_kfold(class_counts: np.ndarray, first_rows: np.ndarray, n_splits: int) -> Folds:
    """scikit-learn's ``StratifiedKFold(n_splits)`` over shards whose rows of each class
    (labels 0..C-1) are counted in ``class_counts`` (n_shards x C), in order; ``first_rows``:
    the row where each class first appears (scikit-learn numbers the classes in that order,
    which orders their blocks among the sorted labels)."""
    counts = np.asarray(class_counts, dtype=np.int64)
    totals = counts.sum(axis=0)
    _check_splits(n_splits, int(totals.sum()))
    present = totals > 0
    if np.all(totals[present] < n_splits):
        raise ConfigurationError(f"cv={n_splits} stratified folds need a class with at least {n_splits} rows; "
                                 f"the class counts are {totals.tolist()}")
    # the sorted labels, classes in order of first appearance, dealt round-robin: allocation[i, c]
    # rows of class c to fold i (positions i, i + k, ... of class c's block)
    order = [c for c in np.argsort(np.asarray(first_rows), kind="stable") if present[c]]
    ends = np.zeros(len(totals), dtype=np.int64)
    ends[order] = np.cumsum(totals[order])
    starts = ends - totals
    allocation = np.zeros((n_splits, len(totals)), dtype=np.int64)
    for i in range(n_splits):
        first = (starts - i + n_splits - 1) // n_splits  # the first j with i + j k >= the block's start
        last = (ends - i + n_splits - 1) // n_splits  # the first j with i + j k >= its end
        allocation[i] = np.where(present, np.maximum(last - first, 0), 0)
    bounds = np.concatenate([np.zeros((len(totals), 1), dtype=np.int64), np.cumsum(allocation.T, axis=1)], axis=1)
    before = np.concatenate([np.zeros((1, len(totals)), dtype=np.int64), np.cumsum(counts, axis=0)[:-1]])
    return Folds("stratified", int(n_splits), bounds, before)
