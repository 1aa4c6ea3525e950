"""A dataset's rows seen through a row mask: a fold's training or held-out rows, the others
weighing 0 (cross-validation's folds, a run's ``validation_fraction``).

The view holds the base dataset's ``X`` and ``y`` and multiplies its weights by the mask,
so every reader of a dataset (a Sandblaster portion, a replica's rows, a shard's scoring)
reads the view as it reads any dataset: rows of weight 0 add nothing to a loss, a gradient
or a metric, and the objective divides by the view's own total weight, so a fit on the view
is the fit on its rows alone, without a copy of the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasklbfgs.data.folds import Folds, RandomSplit
from dasklbfgs.data.rows import Rows
from dasklbfgs.data.sharded import ShardedDataset
from dasklbfgs.errors import ConfigurationError

__all__ = ["FoldDataset", "validation_split"]


class FoldDataset(ShardedDataset):
    """``base`` seen through one fold's mask: its training rows (``train``) or its held-out
    rows, the others weighing 0: the weights that ``load_shards``, ``load_shard_weights`` and
    ``load_weights`` return, and ``total_weight``. What describes the stored rows is the base
    dataset's (``n_samples``, the schema, the label counts: an evaluation's ``n_samples``
    counts every row of the shards)."""

    def __init__(self, base: ShardedDataset, folds: Folds | RandomSplit, fold: int, train: bool,
                 total_weight: float) -> None:
        self.__dict__.update(base.__dict__)
        self.base, self.folds, self.fold, self.train = base, folds, fold, train
        self._total_weight = total_weight

    @property
    def is_weighted(self) -> bool:
        return True

    @property
    def total_weight(self) -> float:
        return self._total_weight

    def keep(self, shard: int, y: np.ndarray) -> np.ndarray:
        """1.0 for the rows of shard ``shard`` this view keeps, 0.0 for the others."""
        held_out = self.folds.of_shard(shard, y) == self.fold
        return (~held_out if self.train else held_out).astype(np.float64)

    def masked(self, shard: int, y: np.ndarray, w: np.ndarray | None) -> np.ndarray:
        keep = self.keep(shard, y)
        return keep if w is None else keep * w

    def load_shards(self, indices: Sequence[int]) -> list[Rows]:
        return [rows._replace(w=self.masked(i, rows.y, rows.w))
                for i, rows in zip(indices, self.base.load_shards(indices))]

    def load_shard_weights(self, index: int) -> np.ndarray | None:
        lo, hi = self.shard_bounds[index]
        return self.load_weights(lo, hi)

    def load_weights(self, start: int, stop: int) -> np.ndarray | None:
        """The masked weights of rows ``[start, stop)``, shard by shard (a shard's labels are
        read only for stratified folds, whose ranks count from the shard's start)."""
        pieces = []
        for shard, (lo, hi) in enumerate(self.shard_bounds):
            first, last = max(lo, start), min(hi, stop)
            if first >= last:
                continue
            y = self.base.load_rows(lo, hi)[1] if self.folds.needs_labels else np.empty(hi - lo)
            pieces.append(self.masked(shard, y, self.base.load_weights(lo, hi))[first - lo : last - lo])
        return np.concatenate(pieces) if pieces else np.zeros(0)

    def __reduce__(self) -> Any:
        return (FoldDataset, (self.base, self.folds, self.fold, self.train, self._total_weight))

    def __repr__(self) -> str:
        part = "training rows" if self.train else "held-out rows"
        return f"FoldDataset({self.base!r}, fold {self.fold} of {self.folds.n_splits}, {part})"


def validation_split(data: ShardedDataset, fraction: float, seed: int = 0) -> tuple[FoldDataset, FoldDataset]:
    """``data``'s training and held-out views for ``validation_fraction=fraction``
    (:class:`~dasklbfgs.data.folds.RandomSplit`), with their total weights: counted from
    the masks for unweighted data, summed from the stored weights (8 bytes a row, read here)
    otherwise. A split that leaves either side without weight is refused."""
    split = RandomSplit(float(fraction), int(seed))
    kept = held = 0.0
    for shard, (lo, hi) in enumerate(data.shard_bounds):
        held_out = split.of_shard(shard, np.empty(hi - lo)) == 1
        weights = data.load_shard_weights(shard) if data.is_weighted else None
        if weights is None:
            held += float(np.count_nonzero(held_out))
            kept += float(hi - lo - np.count_nonzero(held_out))
        else:
            held += float(np.sum(weights[held_out], dtype=np.float64))
            kept += float(np.sum(weights[~held_out], dtype=np.float64))
    if held <= 0 or kept <= 0:
        side = "held-out" if held <= 0 else "training"
        raise ConfigurationError(f"validation_fraction={fraction:g} leaves no {side} rows of weight > 0 in "
                                 f"{data.url!r} ({data.n_samples} rows): give a larger dataset, another fraction or "
                                 "eval_data", parameters=("validation_fraction",))
    return (FoldDataset(data, split, 1, True, total_weight=kept), FoldDataset(data, split, 1, False, total_weight=held))
