"""Sparse X in a sharded dataset: each shard a CSR matrix in its own three Zarr arrays.

Layout (``X_format: "csr"`` in the schema): the group ``X`` holds one subgroup per shard,
``X/<i>``, with the 1-D arrays ``data`` (the non-zeros), ``indices`` (their columns) and
``indptr`` (row starts, ``rows + 1`` entries), each one chunk. A shard is still one unit
of reading and caching, and bytes on disk and in memory grow with the non-zeros, not with
``n x d``. ``y`` stays a dense array chunked like the dense layout. The non-zeros of each
shard are recorded in the schema (``nnz``), so the dataset's size is known without reading.

Blocks are checked before they are written: values finite, column indices in
``[0, n_features)``, ``indptr`` starting at 0, non-decreasing and ending at the number of
values. Duplicate entries of a row are summed and each row's columns sorted (scipy's
canonical CSR, what ``sum_duplicates`` gives): a matrix built from (row, column, value)
triples with repeats means their sum, as in scipy's COO -> CSR conversion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr

from dasklbfgs._typing import is_sparse
from dasklbfgs.errors import InvalidDataError

if TYPE_CHECKING:
    import scipy.sparse as sp

    from dasklbfgs.data.location import Location

__all__ = ["row_of_value", "is_sparse", "index_dtype", "as_csr", "check_csr", "write_csr_shard", "read_csr_shard",
           "csr_of_parts", "CSR_PARTS", "csr_nbytes", "vstack_csr"]

_INT32_LIMIT = np.iinfo(np.int32).max
#: the arrays of one stored CSR shard, ``X/<i>/<part>``
CSR_PARTS = ("data", "indices", "indptr")


def index_dtype(n_features: int, nnz: int) -> np.dtype:
    """Column indices and row pointers in int32 while they fit (4 bytes a non-zero less than
    int64; scipy's own choice), else int64."""
    return np.dtype(np.int32 if max(n_features, nnz) <= _INT32_LIMIT else np.int64)


def as_csr(X: Any) -> sp.csr_array:
    """``X`` as a ``csr_array`` (a sparse block of any format, or CSR parts) without a dense copy."""
    import scipy.sparse as sp  # here and below: scipy.sparse loads with sparse data (is_sparse says why)

    return X if isinstance(X, sp.csr_array) else sp.csr_array(X)


def row_of_value(indptr: np.ndarray, position: int) -> int:
    """The row (within the block) that holds the value stored at ``position``."""
    return int(np.searchsorted(indptr, position, side="right")) - 1


def check_csr(X: sp.csr_array, *, first_row: int, shard_rows: int, n_features: int) -> sp.csr_array:
    """Check a CSR block whose first row is row ``first_row`` of the dataset: structure and
    values, naming the shard, row and column of the first problem. Returns it canonical
    (duplicates summed, columns sorted). Check before slicing: scipy's row slicing drops
    entries whose column is out of range, silently."""
    def where(row: int) -> str:
        return f"in shard {row // shard_rows} at row {row}"

    indptr, indices, data = X.indptr, X.indices, X.data
    rows = X.shape[0]
    if len(indptr) != rows + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != len(data):
        raise InvalidDataError(
            f"X is a malformed CSR block in shard {first_row // shard_rows} starting at row {first_row}: indptr must "
            f"hold rows + 1 = {rows + 1} non-decreasing offsets from 0 to the {len(data)} values, got {len(indptr)} "
            f"from {indptr[:1].tolist()} to {indptr[-1:].tolist()}")
    if len(indices) != len(data):
        raise InvalidDataError(f"X has {len(indices)} column indices for {len(data)} values in the CSR block starting "
                               f"at row {first_row} (shard {first_row // shard_rows}); they must match")
    out_of_range = (indices < 0) | (indices >= n_features)
    if out_of_range.any():
        i = int(np.argmax(out_of_range))
        row = first_row + row_of_value(indptr, i)
        raise InvalidDataError(f"X has the column index {int(indices[i])} {where(row)}, "
                               f"outside [0, {n_features}) (the dataset has {n_features} features)")
    bad = ~np.isfinite(data) if data.dtype.kind == "f" else np.zeros(len(data), bool)
    if bad.any():
        i = int(np.argmax(bad))
        row = first_row + row_of_value(indptr, i)
        raise InvalidDataError(f"X holds a non-finite value ({data[i]}) {where(row)}, "
                               f"column {int(indices[i])}; drop or impute such rows before writing")
    if X.has_canonical_format:
        return X
    canonical = X.copy()  # the caller's matrix stays as given
    canonical.sum_duplicates()  # sorts each row's columns too
    return canonical


def write_csr_shard(group: zarr.Group, shard: int, X: sp.csr_array, *, dtype: np.dtype, compressors: tuple) -> None:
    """Write shard ``shard`` of X as ``X/<shard>/{data,indices,indptr}``, one chunk each."""
    node = group.require_group(str(shard))
    index = index_dtype(X.shape[1], X.nnz)
    parts = dict(zip(CSR_PARTS, (X.data.astype(dtype, copy=False), X.indices.astype(index, copy=False),
                                  X.indptr.astype(index, copy=False)), strict=True))
    for name, values in parts.items():
        array = node.create_array(name, shape=values.shape, chunks=(max(len(values), 1),), dtype=values.dtype,
                                  compressors=compressors, config={"write_empty_chunks": True})
        array[:] = values


def read_csr_shard(group: zarr.Group, shard: int, n_features: int, rows: int, folder: Location
                   ) -> sp.csr_array:
    """Shard ``shard`` (``rows`` rows) of the sparse X stored at ``folder`` (the ``X``
    group's location). A missing chunk file raises ``FileNotFoundError``, a shard whose parts
    do not fit together ``ValueError``: Zarr would read a missing chunk as zeros, silently."""
    # the layout's nodes (X/<i> a group, its parts arrays); other nodes fail on use, as damage
    node = cast(zarr.Group, group[str(shard)])
    arrays = {name: cast(zarr.Array, node[name]) for name in CSR_PARTS}
    keys = [f"{shard}/{name}/{array.metadata.encode_chunk_key((0,))}" for name, array in arrays.items()
            if array.shape[0]]
    missing = folder.missing(keys)
    if missing:
        raise FileNotFoundError(f"the chunk file X/{missing[0]} is missing")
    parts = {name: np.asarray(array[:]) for name, array in arrays.items()}
    return csr_of_parts(parts["data"], parts["indices"], parts["indptr"], rows, n_features)


def csr_of_parts(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, rows: int, n_features: int
                 ) -> sp.csr_array:
    """A stored shard's CSR matrix from its three parts, read back; ``ValueError`` if they do
    not fit together."""
    if len(indptr) != rows + 1 or indptr[-1] != len(data) or len(indices) != len(data):
        raise ValueError(f"its parts do not fit together ({len(data)} values, {len(indices)} column indices, "
                         f"{len(indptr)} row pointers for {rows} rows)")
    import scipy.sparse as sp

    return sp.csr_array((data, indices, indptr), shape=(rows, n_features))


def csr_nbytes(nnz: int, rows: int, n_features: int, itemsize: int) -> int:
    """Bytes of a CSR block in memory: values, column indices and row pointers."""
    index = index_dtype(n_features, nnz).itemsize
    return nnz * (itemsize + index) + (rows + 1) * index


def vstack_csr(blocks: list[sp.csr_array], n_features: int, dtype: np.dtype) -> sp.csr_array:
    """Rows of ``blocks`` one after the other, as one CSR array."""
    import scipy.sparse as sp

    if not blocks:
        return sp.csr_array((0, n_features), dtype=dtype)
    if len(blocks) == 1:
        return blocks[0]
    return sp.csr_array(sp.vstack(blocks, format="csr"))
