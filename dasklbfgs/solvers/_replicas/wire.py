"""What travels between replicas and parameter shards: whole slices, or only touched rows.

A model with a row table (:class:`~dasklbfgs.models.embedding.RowTable`, e.g. the
language model's word embeddings) has gradients that are zero outside the rows a batch
touched. With ``sparse=True`` a push carries, per shard, the touched rows of the table that
shard owns (their ids and values) and the shard's dense remainder; a fetch asks for the
rows the next batches will read. Shard bounds inside the table fall on row boundaries
(:func:`param_bounds`), so every row lives on exactly one shard.

Pure numpy: both sides (replica task and shard actor) use these helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.sums import SparseSum

__all__ = ["param_bounds", "payload_nbytes", "ShardLayout", "Wire"]

#: A sparse payload: (row ids local to the shard's table rows, values (k, width), dense rest)
SparsePayload = tuple[np.ndarray, np.ndarray, np.ndarray]


def param_bounds(n_params: int, n_shards: int, table: Any = None) -> list[tuple[int, int]]:
    """Contiguous slices of nearly equal size, one per parameter shard.

    With a row ``table``, edges inside it are moved to the nearest row boundary.
    """
    edges = [n_params * i // n_shards for i in range(n_shards + 1)]
    if table is not None:
        for i, edge in enumerate(edges):
            if table.offset < edge < table.end:
                edges[i] = table.offset + round((edge - table.offset) / table.width) * table.width
        if any(b <= a for a, b in zip(edges[:-1], edges[1:])):
            raise ConfigurationError(
                f"{n_shards} parameter shards cannot split {n_params} parameters on row "
                f"boundaries of {table.width}; use fewer shards"
            )
    return list(zip(edges[:-1], edges[1:]))


class ShardLayout:
    """How one shard's slice ``[start, stop)`` splits into table rows and dense ranges.

    The dense part (everything outside the table) is at most two contiguous ranges, so it
    travels and updates as slices; only the table rows need index arrays.
    """

    def __init__(self, start: int, stop: int, table: Any = None) -> None:
        self.start, self.stop = start, stop
        if table is None:
            self.first_row = self.n_rows = self.width = self.table_start = 0
            self.dense_ranges = [(0, stop - start)]
            return
        lo, hi = max(start, table.offset), min(stop, table.end)
        self.width = table.width
        self.table_start = max(lo - start, 0)  # local offset of the first owned row
        self.first_row = (lo - table.offset) // table.width if hi > lo else 0
        self.n_rows = max(hi - lo, 0) // table.width
        table_stop = self.table_start + self.n_rows * self.width
        ranges = [(0, self.table_start), (table_stop, stop - start)] if self.n_rows else [(0, stop - start)]
        self.dense_ranges = [(a, b) for a, b in ranges if b > a]

    @property
    def dense_size(self) -> int:
        return sum(b - a for a, b in self.dense_ranges)

    def row_index(self, rows: np.ndarray) -> np.ndarray:
        """Local flat indices of the given local rows, row after row."""
        base = self.table_start + np.asarray(rows, dtype=np.int64) * self.width
        return (base[:, None] + np.arange(self.width)).ravel()

    def pieces(self, rows: np.ndarray) -> list[tuple[Any, slice]]:
        """``(where in the shard, where in the flat payload)`` for the rows, then each dense range."""
        index = self.row_index(rows)
        out: list[tuple[Any, slice]] = [(index, slice(0, index.size))]
        at = index.size
        for a, b in self.dense_ranges:
            out.append((slice(a, b), slice(at, at + b - a)))
            at += b - a
        return out

    def values(self, vector: np.ndarray, rows: np.ndarray, dtype: Any) -> SparsePayload:
        """The payload for ``rows`` taken from the shard-local ``vector``."""
        return self.gather(vector.__getitem__, rows, dtype)

    def gather(self, read: Callable[[Any], np.ndarray], rows: np.ndarray, dtype: Any) -> SparsePayload:
        """The payload for ``rows``, reading shard-local values with ``read(index or slice)``
        (a shard whose values are computed on demand reads only these)."""
        table = read(self.row_index(rows)).reshape(len(rows), self.width).astype(dtype, copy=False)
        dense = [read(slice(a, b)) for a, b in self.dense_ranges]
        dense_values = (dense[0] if len(dense) == 1 else np.concatenate(dense or [read(slice(0, 0))]))
        return np.asarray(rows, dtype=np.int32), table, dense_values.astype(dtype, copy=True)

    def scatter(self, vector: np.ndarray, payload: SparsePayload) -> None:
        """Write a payload's values into the shard-local ``vector``."""
        rows, table, dense = payload
        vector[self.row_index(rows)] = table.ravel()
        at = 0
        for a, b in self.dense_ranges:
            vector[a:b] = dense[at : at + b - a]
            at += b - a


class Wire:
    """The replica's side: encode pushes, decode fetches, for dense or row-sparse transfer.

    ``copy=True`` makes dense payloads copies of the accrued gradient (needed when a push
    stays in flight while the replica accrues the next one)."""

    def __init__(self, bounds: list[tuple[int, int]], dtype: str, table: Any = None, *, copy: bool = False) -> None:
        self.bounds, self.dtype, self.table, self.copy = bounds, dtype, table, copy
        self.sparse = table is not None
        self.layouts = [ShardLayout(a, b, table) for a, b in bounds]

    def split_rows(self, rows: np.ndarray | None) -> list[np.ndarray | None]:
        """Global row ids -> each shard's local row ids (``None``: dense transfer)."""
        if not self.sparse or rows is None:
            return [None] * len(self.bounds)
        return [*self._local_rows(rows)]

    def _local_rows(self, rows: np.ndarray) -> list[np.ndarray]:
        """Global table row ids -> each shard's local row ids (sparse transfer)."""
        out = []
        for layout in self.layouts:
            mine = rows[(rows >= layout.first_row) & (rows < layout.first_row + layout.n_rows)]
            out.append((mine - layout.first_row).astype(np.int32))
        return out

    def payloads(self, accrued: np.ndarray, rows: np.ndarray | None) -> list[Any]:
        """Per shard: the slice (dense) or the touched rows and the dense rest (sparse)."""
        if not self.sparse or rows is None:
            # ``copy``: the caller reuses ``accrued`` while the push is still in flight.
            wire = accrued.astype(self.dtype, copy=self.copy)
            return [wire[a:b] for a, b in self.bounds]
        return [layout.values(accrued[a:b], local, self.dtype)
                for (a, b), layout, local in zip(self.bounds, self.layouts, self._local_rows(rows))]

    def apply_fetched(self, params: np.ndarray, replies: list[Any]) -> None:
        """Write fetched values (dense slices or sparse payloads) into the replica's copy."""
        for (a, _), layout, reply in zip(self.bounds, self.layouts, replies):
            if isinstance(reply, tuple):
                layout.scatter(params[a : layout.stop], reply)
            else:
                params[a : a + reply.size] = reply


def payload_nbytes(payload: Any) -> int:
    """Bytes of the arrays a message carries: numpy arrays and compact sums
    (:class:`~dasklbfgs.models.sums.SparseSum`), also inside tuples; scalars count nothing."""
    if isinstance(payload, tuple):
        return sum(payload_nbytes(p) for p in payload)
    if isinstance(payload, (np.ndarray, SparseSum)):
        return payload.nbytes
    return 0
