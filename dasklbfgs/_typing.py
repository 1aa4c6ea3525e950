"""Type aliases and the data contract used across dasklbfgs."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]


class Dataset(Protocol):
    """What models and solvers read of a dataset (:class:`~dasklbfgs.data.ShardedDataset`
    is the one implementation): its shape and schema, and rows, shard by shard or by range.

    Rows come as ``(X, y)``: ``X`` a dense array or CSR matrix of ``n_features`` columns,
    ``y`` of shape ``(rows, *y_shape)``; weights and offsets as arrays, or None when the
    dataset has none; whole shards as ``Rows`` (:class:`dasklbfgs.data.rows.Rows`:
    ``X, y, w, offset``).
    """

    @property
    def url(self) -> str:
        """Where the dataset lives: an absolute local path or a URL (what messages name)."""
        ...

    @property
    def n_samples(self) -> int: ...

    @property
    def n_features(self) -> int: ...

    @property
    def n_shards(self) -> int: ...

    @property
    def y_shape(self) -> tuple[int, ...]: ...

    @property
    def attrs(self) -> dict[str, Any]: ...

    @property
    def schema(self) -> dict[str, Any]: ...

    @property
    def is_sparse(self) -> bool: ...

    @property
    def is_weighted(self) -> bool: ...

    @property
    def has_offsets(self) -> bool: ...

    @property
    def total_weight(self) -> float: ...

    @property
    def nbytes_in_memory(self) -> int: ...

    @property
    def shard_bounds(self) -> list[tuple[int, int]]: ...

    @property
    def label_range(self) -> tuple[float, float]: ...

    @property
    def label_counts(self) -> dict[int, int] | None: ...

    @property
    def label_weights(self) -> dict[int, float] | None: ...

    def load_shard(self, index: int) -> tuple[Any, np.ndarray]: ...

    def load_shard_weights(self, index: int) -> np.ndarray | None: ...

    def load_shards(self, indices: Sequence[int]) -> list[Any]: ...

    def load_rows(self, start: int, stop: int) -> tuple[Any, np.ndarray]: ...

    def load_weights(self, start: int, stop: int) -> np.ndarray | None: ...

    def first_label(self, bad: Any) -> tuple[int, int, float] | None: ...

    def load_offsets(self, start: int, stop: int) -> np.ndarray | None: ...


def is_sparse(X: Any) -> bool:
    """Whether ``X`` is a scipy.sparse matrix or array (any format).

    Asked without importing scipy.sparse: none exists before it is imported, and a dense run
    (the command line, a worker holding dense shards) does not need it.
    """
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(X))


#: a dataset, or the path of one (:func:`~dasklbfgs.data.sharded.as_dataset` opens it)
DatasetLike = Union[Dataset, PathLike]  # noqa: UP007 - a runtime alias: X | Y needs the names defined
