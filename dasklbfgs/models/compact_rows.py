"""Sparse rows stored on the columns they use: the renumbering done once per cached shard.

A linear model's portion sums on CSR rows (:meth:`LinearModel.portion_loss_grad_sum
<dasklbfgs.models.linear.LinearModel.portion_loss_grad_sum>`) work on the block's distinct
columns renumbered ``0..m-1``: the parameters are gathered at those ``m`` columns and the
gradient is formed on them, so nothing costs ``n_features``. Finding the distinct columns
sorts every non-zero's column index, which at ~35 non-zeros a row costs several times the
two products themselves. The columns of a cached shard never change, so Sandblaster
renumbers each sparse shard once, when it caches it (:class:`CompactColumns`), and every
evaluation's portions slice the renumbered rows.

A portion of a shard then works on the shard's columns, some of which it has no value in:
their gradient entries are ``+0.0``, which adds nothing to a sum that starts from ``+0.0``
(:mod:`dasklbfgs.models.sums`), and each other entry receives the same products in the same
order as on the portion's own columns. So the bits do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.models.sums import renumber

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["CompactColumns", "plain_rows"]


@dataclass(frozen=True)
class CompactColumns:
    """The CSR rows of an ``(n_rows, n_columns)`` matrix whose non-zeros lie in the sorted,
    distinct ``columns``; ``local`` holds them with column ``columns[j]`` renumbered ``j``."""

    columns: np.ndarray
    local: sp.csr_array
    n_columns: int

    @classmethod
    def of(cls, X: Any) -> CompactColumns:
        """``X`` (any scipy.sparse matrix or array) on its distinct columns."""
        if isinstance(X, CompactColumns):
            return X
        import scipy.sparse as sp  # here and in to_csr: only sparse data make these (is_sparse)

        X = sp.csr_array(X)
        columns, renumbered = renumber(X.indices)
        local = sp.csr_array((X.data, renumbered, X.indptr), shape=(X.shape[0], len(columns)))
        return cls(columns, local, X.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        return self.local.shape[0], self.n_columns

    @property
    def nnz(self) -> int:
        return int(self.local.nnz)

    def __getitem__(self, rows: slice) -> CompactColumns:
        """A range of the rows, on the same columns (a row slice copies only its non-zeros)."""
        if not isinstance(rows, slice):
            raise TypeError(f"CompactColumns takes a slice of rows, got {rows!r}")
        return CompactColumns(self.columns, self.local[rows], self.n_columns)

    def to_csr(self) -> sp.csr_array:
        """The rows as a CSR array on the original columns."""
        import scipy.sparse as sp

        local = self.local
        return sp.csr_array((local.data, self.columns[local.indices], local.indptr), shape=self.shape)


def plain_rows(X: Any) -> Any:
    """``X`` as numpy or scipy rows: compact ones (a cached sparse shard's) as CSR again on
    their original columns, any others as they are."""
    return X.to_csr() if isinstance(X, CompactColumns) else X
