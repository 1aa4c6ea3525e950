"""A block of rows as the data layer moves it: ``X``, ``y`` and the per-row extras a
dataset may hold, sample weights ``w`` and offsets ``offset`` (None when it has none).

An offset is a known term of each row's linear predictor, added to ``x . w + b`` with no
coefficient (a policy's log exposure in a Poisson model of its claim counts); a sample
weight scales the row's loss. Both travel with their rows: written, cut, joined, cached and
read together.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Rows", "aligned_rows", "cut", "joined"]


class Rows(NamedTuple):
    """Rows of X (dense or CSR), their labels, and their weights and offsets (or None)."""

    X: Any
    y: np.ndarray
    w: np.ndarray | None = None
    offset: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    def cut(self, start: int, stop: int) -> Rows:
        """Rows ``[start, stop)`` of these (views where numpy gives them)."""
        return Rows(self.X[start:stop], self.y[start:stop], cut(self.w, start, stop), cut(self.offset, start, stop))

    def with_X(self, X: Any) -> Rows:
        return self._replace(X=X)


def cut(values: np.ndarray | None, start: int, stop: int) -> np.ndarray | None:
    """``values[start:stop]``, None staying None."""
    return None if values is None else values[start:stop]


def joined(parts: list[np.ndarray | None]) -> np.ndarray | None:
    """The per-row arrays ``parts`` one after another (None when the first is None: a
    dataset's blocks all have them or none do)."""
    if parts[0] is None:
        return None
    return parts[0] if len(parts) == 1 else np.concatenate([p for p in parts if p is not None])


def aligned_rows(rows: Rows) -> Rows:
    """``rows`` with each array aligned (:func:`dasklbfgs._wire.aligned`: rows that came over
    the wire are handed to BLAS aligned)."""
    from dasklbfgs._wire import aligned

    w, offset = rows.w, rows.offset
    return Rows(aligned(rows.X), aligned(rows.y), None if w is None else aligned(w),
                None if offset is None else aligned(offset))
