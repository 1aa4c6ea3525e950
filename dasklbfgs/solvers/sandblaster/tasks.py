"""Functions that run on the workers: load a shard, evaluate a portion, column statistics,
an online pass."""

from __future__ import annotations

from typing import Any

import numpy as np
from dask.sizeof import sizeof

from dasklbfgs._typing import Dataset, is_sparse
from dasklbfgs._wire import aligned
from dasklbfgs.data.rows import Rows, aligned_rows
from dasklbfgs.models.base import Model
from dasklbfgs.models.compact_rows import CompactColumns
from dasklbfgs.models.online_pass import PassResult, adagrad_pass


@sizeof.register(CompactColumns)
def _bytes_of(rows: CompactColumns) -> int:
    """What a cached shard of compact rows holds (Dask's memory accounting and spilling);
    registered here, with the caching, so that the models stay free of Dask."""
    local = rows.local
    return int(rows.columns.nbytes + local.data.nbytes + local.indices.nbytes + local.indptr.nbytes)


Shard = Rows  # X, y, and the sample weights and offsets (None: the dataset has none)




def load_shard(data: Dataset, index: int) -> Shard:
    """Read shard ``index`` from Zarr (at a URL: its objects fetched at once)."""
    return data.load_shards([index])[0]


def load_cached_shard(data: Dataset, index: int) -> Shard:
    """Read shard ``index`` from Zarr to stay in the worker's memory (affinity): sparse rows
    renumbered on their columns once for every evaluation to come
    (:class:`~dasklbfgs.models.compact_rows.CompactColumns`)."""
    return load_cached_shards(data, [index])[0]


def load_cached_shards(data: Dataset, indices: list[int]) -> list[Shard]:
    """:func:`load_cached_shard` of several shards read at once (at a URL: every object of
    them in one concurrent fetch)."""
    return [rows.with_X(CompactColumns.of(rows.X)) if is_sparse(rows.X) else rows for rows in data.load_shards(indices)]


def shard_of(shards: list[Shard], position: int) -> Shard:
    """One shard of a batch :func:`load_cached_shards` read (the same arrays, not a copy)."""
    return shards[position]


def portion_loss_grad(shard: Shard, local: slice, *, model: Model, x: np.ndarray) -> tuple[float, Any]:
    """Loss and gradient sums of one portion of a cached shard (compact on sparse rows:
    :meth:`~dasklbfgs.models.base.Model.portion_loss_grad_sum`)."""
    X, y, w, offset = aligned_rows(shard.cut(local.start, local.stop))
    return model.portion_loss_grad_sum(aligned(x), X, y, w, offset)


def compact_positions(shard: Shard, *, model: Model) -> np.ndarray | None:
    """The parameters a cached shard's portions read (:meth:`Model.compact_positions
    <dasklbfgs.models.base.Model.compact_positions>`; None: all of them)."""
    return model.compact_positions(shard[0])


def stored_shard_positions(data: Dataset, index: int, *, model: Model) -> np.ndarray | None:
    """:func:`compact_positions` of shard ``index`` read from Zarr (out-of-core runs): what
    its rows read once renumbered on their columns, as a cached shard's are (None: dense rows)."""
    X = load_shard(data, index).X
    return model.compact_positions(CompactColumns.of(X)) if is_sparse(X) else None


def portion_compact_loss_grad(shard: Shard, local: slice, *, model: Model, local_params: np.ndarray
                              ) -> tuple[float, np.ndarray]:
    """:func:`portion_loss_grad` given only the parameters at the shard's
    :func:`compact_positions`: the loss sum and the gradient sum's values there."""
    rows = shard.cut(local.start, local.stop)
    _, y, w, offset = aligned_rows(rows)
    return model.compact_loss_grad_sum(aligned(local_params), rows.X, y, w, offset)


def portion_loss_grad_from_store(start: int, stop: int, *, model: Model, data: Dataset, x: np.ndarray
                                 ) -> tuple[float, Any]:
    """The same sums, reading the rows from Zarr: out-of-core evaluation, or a copy on a
    worker without the shard (a backup, a rescue)."""
    X, y = data.load_rows(start, stop)
    return model.portion_loss_grad_sum(aligned(x), X, y, data.load_weights(start, stop), data.load_offsets(start, stop))


def shard_column_moments(data: Dataset, index: int) -> tuple[float, np.ndarray, np.ndarray]:
    """:func:`column_moments` of shard ``index`` read from Zarr (out-of-core runs)."""
    return column_moments(load_shard(data, index))


def column_moments(shard: Shard) -> tuple[float, np.ndarray, np.ndarray]:
    """Row count (total weight), column means and column sums of squared deviations of one
    shard, weighted by its sample weights if it has them: the standardised coordinates are
    then the same for weighted rows as for the rows repeated. A sparse shard's come from its
    column sums and sums of squares (centering it would make it dense)."""
    X: Any  # dense or sparse rows (aligned() passes sparse ones through)
    X, w = shard.X, shard.w
    X = X.to_csr() if isinstance(X, CompactColumns) else aligned(X)
    total = X.shape[0] if w is None else float(np.sum(w, dtype=np.float64))
    if total == 0:  # rows that weigh nothing say nothing about the columns
        return 0.0, np.zeros(X.shape[1]), np.zeros(X.shape[1])
    mean = _column_sums(X, w) / total
    if is_sparse(X):
        squares = _column_sums(X.multiply(X), w)
        return total, mean, np.maximum(squares - total * mean * mean, 0.0)
    centered = X - mean
    if w is None:
        return total, mean, np.einsum("ij,ij->j", centered, centered)
    return total, mean, np.einsum("i,ij,ij->j", w, centered, centered)


def _column_sums(A: Any, w: np.ndarray | None) -> np.ndarray:
    """The column sums of ``A`` (dense or sparse) in float64, weighted by ``w`` if given."""
    return np.asarray(A.sum(axis=0, dtype=np.float64) if w is None else A.T @ w, dtype=np.float64).ravel()


def shard_online_pass(shard: Shard, *, model: Model, x: np.ndarray, learning_rate: float) -> PassResult:
    """One online pass of Adagrad over a cached shard's rows from ``x``
    (:func:`~dasklbfgs.models.online_pass.adagrad_pass`)."""
    X, y, w, offset = aligned_rows(shard)
    return adagrad_pass(model, aligned(x), X, y, w, offset, learning_rate=learning_rate)


def stored_shard_online_pass(data: Dataset, index: int, *, model: Model, x: np.ndarray,
                             learning_rate: float) -> PassResult:
    """:func:`shard_online_pass` of shard ``index`` read from Zarr (out-of-core runs)."""
    return shard_online_pass(load_shard(data, index), model=model, x=x, learning_rate=learning_rate)
