"""Dask arrays as the pieces a worker-side write takes (:mod:`dasklbfgs.data.worker_writes`).

Each row chunk of ``X`` (its column chunks joined) with the matching rows of ``y`` and the
weights is one piece, computed on a worker; ``y`` and the weights are rechunked by dask to
``X``'s row chunks, on the workers. Chunks of unknown length are measured first, also on the
workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs.data._shard_format import ShardFormat
from dasklbfgs.data._sparse import is_sparse
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import InvalidDataError

__all__ = ["is_dask_collection", "dask_pieces"]


def is_dask_collection(value: Any) -> bool:
    return hasattr(value, "dask") and hasattr(value, "compute")


def dask_pieces(X: Any, y: Any, w: Any, offset: Any = None, *, shard_rows: int, dtype: Any, compressors: tuple
                ) -> tuple[list[Any], list[int], ShardFormat]:
    """``(pieces, rows per piece, format)`` of the rows of ``X``, ``y``, ``w`` and
    ``offset`` (dask arrays, or numpy for all but ``X``), none of them computed here."""
    import dask
    import dask.array as da
    import scipy.sparse as sp  # loaded with sparse data only

    X = _known_rows(da.asarray(X) if not is_dask_collection(X) else X)
    if X.ndim != 2:
        raise InvalidDataError(f"X must be 2-D (samples x features), got {X.ndim}-D shape {X.shape}")
    row_chunks = X.chunks[0]
    y = _rows_like(y, row_chunks, "y")
    w = None if w is None else _rows_like(w, row_chunks, "sample_weight")
    offset = None if offset is None else _rows_like(offset, row_chunks, "offset")
    if y.shape[0] != X.shape[0]:
        raise InvalidDataError(f"X has {X.shape[0]} rows but y has shape {y.shape}; give one label per row")
    for values, name in ((w, "sample_weight"), (offset, "offset")):
        if values is not None and values.shape != (X.shape[0],):
            raise InvalidDataError(f"X has {X.shape[0]} rows but {name} has shape {values.shape}; give one "
                                   "number per row")
    sparse = is_sparse(X._meta)
    probe_X = sp.csr_array((0, X.shape[1]), dtype=X.dtype) if sparse else np.empty((0, X.shape[1]), X.dtype)
    probe = Rows(probe_X, np.empty((0, *y.shape[1:]), y.dtype), *(
        None if values is None else np.empty(0, values.dtype) for values in (w, offset)))
    shard_format = ShardFormat.of_first_block(probe, shard_rows=shard_rows, dtype=dtype, compressors=compressors)
    x_blocks, y_blocks = X.to_delayed(), y.to_delayed()
    w_blocks, offset_blocks = (None if values is None else values.to_delayed() for values in (w, offset))
    pieces = [
        dask.delayed(_row_block, pure=True)(list(x_blocks[i]), y_blocks[i] if y.ndim == 1 else y_blocks[i, 0],
                                            None if w_blocks is None else w_blocks[i],
                                            None if offset_blocks is None else offset_blocks[i])
        for i in range(len(row_chunks))
    ]
    return pieces, [int(r) for r in row_chunks], shard_format


def _known_rows(array: Any) -> Any:
    """``array`` with its row chunks' lengths known (measured on the workers if not)."""
    if any(np.isnan(c) for c in array.chunks[0]):
        array = array.compute_chunk_sizes()
    return array


def _rows_like(values: Any, row_chunks: tuple[int, ...], name: str) -> Any:
    """``values`` as a dask array chunked along rows as ``row_chunks`` (whole along columns)."""
    import dask.array as da

    if not is_dask_collection(values):
        values = np.asarray(values)
        if values.dtype.kind not in "biuf":
            raise InvalidDataError(f"{name} must hold real numbers, got dtype {values.dtype!s}")
        if values.ndim not in (1, 2) or values.shape[0] != sum(row_chunks):
            raise InvalidDataError(f"{name} has shape {values.shape}; expected {sum(row_chunks)} rows")
        return da.from_array(values, chunks=(row_chunks, *values.shape[1:]))
    values = _known_rows(values)
    if values.ndim not in (1, 2) or values.shape[0] != sum(row_chunks):
        raise InvalidDataError(f"{name} has shape {values.shape}; expected {sum(row_chunks)} rows, 1-D or 2-D")
    return values.rechunk({0: row_chunks, **({1: -1} if values.ndim == 2 else {})})


def _row_block(x_parts: list[Any], y: np.ndarray, w: np.ndarray | None, offset: np.ndarray | None
               ) -> tuple[Any, np.ndarray, Any, Any]:
    """One row chunk: ``X``'s column chunks side by side, with its labels, weights and offsets."""
    import scipy.sparse as sp  # loaded with sparse data only

    if len(x_parts) == 1:
        X = x_parts[0]
    elif any(is_sparse(p) for p in x_parts):
        X = sp.hstack([sp.csr_array(p) for p in x_parts], format="csr")
    else:
        X = np.concatenate(x_parts, axis=1)
    return X, np.asarray(y), None if w is None else np.asarray(w), None if offset is None else np.asarray(offset)
