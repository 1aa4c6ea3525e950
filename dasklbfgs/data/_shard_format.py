"""What one stored shard is: its arrays, the checks its rows pass, what it adds to the schema.

A dataset is written shard by shard, either by one process that buffers row blocks into
shards (:mod:`dasklbfgs.data._writer`) or by worker tasks that each write their own shards
(:mod:`dasklbfgs.data.worker_writes`). Both go through :class:`ShardFormat`, so a dataset
holds the same bytes and the same schema whichever wrote it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr
import zarr.codecs
from zarr.core.array_spec import ArrayConfigParams

from dasklbfgs.data._sparse import as_csr, check_csr, is_sparse, row_of_value, write_csr_shard
from dasklbfgs.data._validate import (
    check_block_shapes,
    check_cast,
    check_finite,
    check_numeric,
    check_per_row_shape,
    check_weight_values,
)
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import ConfigurationError, InvalidDataError

FORMAT_VERSION = 1
ATTRS_KEY = "dasklbfgs"
MAX_LABELS_COUNTED = 1000

#: The codec of ``compressor="default"``: Blosc lz4 level 5 with byte shuffle. Measured on the
#: recipes' dense float data (``python -m benchmarks.shard_load``), every codec saves only 4-17% of
#: the bytes (the mantissas are close to random), so the decode rate decides: lz4 decodes at
#: 1.5-2.5x Blosc zstd's rate for 2-6% more bytes, and unlike no codec it still shrinks data
#: that compress (integer codes, repeated values). docs/guide.md, "Codec and loading".
DEFAULT_CODEC = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")

#: Every shard's chunk is written even when all zeros, so a missing chunk is damage.
WRITE_EVERY_CHUNK: ArrayConfigParams = {"write_empty_chunks": True}


def resolve_compressor(compressor: Any) -> tuple:
    """The arrays' ``compressors``: ``"default"`` is :data:`DEFAULT_CODEC`, ``None`` is none."""
    if isinstance(compressor, str) and compressor == "default":
        compressor = DEFAULT_CODEC
    return () if compressor is None else (compressor,)


def stored_x_dtype(dtype: Any, given: np.dtype) -> np.dtype:
    """The stored dtype of X. By default float32 stays float32 and everything else becomes
    float64: the models compute in X's dtype, so integer features stored as integers would
    truncate their weights. Integer codes (token ids) are stored as integers only when the
    caller asks for an integer ``dtype``."""
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt.kind not in "iuf":
            raise ConfigurationError(f"dtype must be a floating or integer dtype, got {dt!s}")
        return dt
    return given if given in (np.float32, np.float64) else np.dtype(np.float64)


@dataclass
class LabelSummary:
    """Summary of y: min, max and, while labels are few integers, their counts (and, for
    weighted rows, each label's weight sum). One per shard, merged in shard order."""

    minimum: float = np.inf
    maximum: float = -np.inf
    counts: Counter[int] | None = field(default_factory=Counter)
    weights: dict[int, float] | None = None  # per label: the sum of its rows' weights
    integral: bool = True

    def update(self, y: np.ndarray, w: np.ndarray | None = None) -> None:
        if y.size == 0:
            return
        self.minimum = min(self.minimum, float(y.min()))
        self.maximum = max(self.maximum, float(y.max()))
        self.integral = self.integral and y.ndim == 1 and bool(np.all(np.mod(y, 1) == 0))
        if self.integral and self.counts is not None:
            values, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
            self.counts.update({int(v): int(c) for v, c in zip(values, counts)})
            if w is not None:
                self.weights = self.weights if self.weights is not None else {}
                for v, total in zip(values, np.bincount(inverse.ravel(), weights=w, minlength=values.size)):
                    self.weights[int(v)] = self.weights.get(int(v), 0.0) + float(total)
        self._drop_counts_if_many()

    def merge(self, later: LabelSummary) -> None:
        """Add the summary of the rows after these (sums in row order, as :meth:`update`)."""
        self.minimum, self.maximum = min(self.minimum, later.minimum), max(self.maximum, later.maximum)
        self.integral = self.integral and later.integral
        if self.counts is not None and later.counts is not None and self.integral:
            self.counts.update(later.counts)
            if later.weights is not None:
                self.weights = self.weights if self.weights is not None else {}
                for v, total in later.weights.items():
                    self.weights[v] = self.weights.get(v, 0.0) + total
        else:
            self.counts = None
        self._drop_counts_if_many()

    def _drop_counts_if_many(self) -> None:
        if not self.integral or (self.counts is not None and len(self.counts) > MAX_LABELS_COUNTED):
            self.counts = self.weights = None

    def as_attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"y_min": self.minimum, "y_max": self.maximum, "y_integral": self.integral}
        if self.counts is not None:
            out["label_counts"] = {str(k): v for k, v in sorted(self.counts.items())}
        if self.weights is not None:
            out["label_weights"] = {str(k): v for k, v in sorted(self.weights.items())}
        return out


@dataclass
class WrittenRows:
    """What a run of written shards adds to the schema: rows, labels, weights, non-zeros."""

    n_rows: int = 0
    labels: LabelSummary = field(default_factory=LabelSummary)
    total_weight: float = 0.0
    nnz: list[int] = field(default_factory=list)  # per shard, sparse X only

    def merge(self, later: WrittenRows) -> None:
        self.n_rows += later.n_rows
        self.labels.merge(later.labels)
        self.total_weight += later.total_weight
        self.nnz.extend(later.nnz)


@dataclass(frozen=True)
class ShardFormat:
    """The layout every shard of one dataset shares, fixed by the first block of rows: rows
    per shard, width, y's trailing shape, dense or CSR X, the stored dtypes, weights or
    none, the codecs. Small and picklable: worker tasks check and write shards with it."""

    shard_rows: int
    n_features: int
    y_tail: tuple[int, ...]
    sparse: bool
    x_dtype: np.dtype
    y_dtype: np.dtype
    weighted: bool
    compressors: tuple
    offsets: bool = False

    @classmethod
    def of_first_block(cls, block: Rows, *, shard_rows: int, dtype: Any, compressors: tuple) -> ShardFormat:
        """The format of a dataset whose first block of rows is ``block``."""
        X, y = block.X, block.y
        check_block_shapes(X, y, where="in the first block")
        check_numeric(X, "X")
        check_numeric(y, "y")
        return cls(
            shard_rows=shard_rows, n_features=int(X.shape[1]), y_tail=tuple(y.shape[1:]), sparse=is_sparse(X),
            x_dtype=stored_x_dtype(dtype, X.dtype), y_dtype=y.dtype if y.dtype.kind in "iuf" else np.dtype(np.float64),
            weighted=block.w is not None, compressors=compressors, offsets=block.offset is not None,
        )

    def create_arrays(self, group: zarr.Group, n_rows: int = 0) -> None:
        """Create the dataset's arrays in ``group`` with ``n_rows`` rows (they grow as a
        single writer appends; worker tasks each fill their own shards of the full length)."""

        def create(name: str, tail: tuple[int, ...], dtype: Any, dims: tuple[str, ...]) -> None:
            group.create_array(
                name, shape=(n_rows, *tail), chunks=(self.shard_rows, *tail), dtype=dtype,
                compressors=self.compressors, config=WRITE_EVERY_CHUNK, dimension_names=dims,
            )

        if self.sparse:
            group.create_group("X", attributes={"format": "csr"})
        else:
            create("X", (self.n_features,), self.x_dtype, ("sample", "feature"))
        create("y", self.y_tail, self.y_dtype, ("sample",) if not self.y_tail else ("sample", "output"))
        if self.weighted:
            create("w", (), np.float64, ("sample",))
        if self.offsets:
            create("offset", (), np.float64, ("sample",))

    def check_block(self, block: Rows, *, first_row: int) -> Rows:
        """``block``, starting at ``first_row``, once its shapes, kinds and (sparse)
        structure are checked against this format (X as CSR when sparse)."""
        X, y, w = block.X, block.y, block.w
        where = f"in the block starting at row {first_row}"
        for values, has, what in ((w, self.weighted, "sample weights"), (block.offset, self.offsets, "offsets")):
            if (values is not None) != has:
                given, first = ("has", "had none") if values is not None else ("has no", "had")
                raise InvalidDataError(f"the block starting at row {first_row} {given} {what} but the first "
                                       f"block {first}; give {what} with every block or none")
        if w is not None:
            check_per_row_shape(w, X.shape[0], where=where)
        if block.offset is not None:
            check_per_row_shape(block.offset, X.shape[0], where=where, name="offset")
        if is_sparse(X) != self.sparse:
            given, first = ("sparse", "dense") if is_sparse(X) else ("dense", "sparse")
            raise InvalidDataError(f"X is {given} {where} but the first block was {first}; "
                                   "give every block in the same kind")
        check_block_shapes(X, y, where=where)
        check_numeric(X, "X")
        check_numeric(y, "y")
        if X.shape[1] != self.n_features:
            raise InvalidDataError(f"X has {X.shape[1]} features {where}, expected {self.n_features} "
                                   "like the first block")
        if y.shape[1:] != self.y_tail:
            raise InvalidDataError(
                f"y has shape {y.shape} {where}, expected (n, {', '.join(map(str, self.y_tail))}) "
                "like the first block".replace("(n, )", "(n,)"))
        if self.sparse and X.shape[0]:  # checked whole, before the rows are cut into shards
            return block.with_X(check_csr(as_csr(X), first_row=first_row, shard_rows=self.shard_rows,
                                          n_features=self.n_features))
        return block

    def stored(self, block: Rows, *, first_row: int) -> Rows:
        """The shard ``block`` starting at ``first_row`` as stored, checked: finite, weights
        >= 0, and unchanged by the casts to the stored dtypes."""
        shard = first_row // self.shard_rows
        y, w, offset = block.y, block.w, block.offset
        check_finite(y, "y", first_row=first_row, shard=shard)
        if w is not None:
            check_weight_values(w, first_row=first_row, shard=shard)
        if offset is not None:
            check_finite(offset, "offset", first_row=first_row, shard=shard)
            offset = offset.astype(np.float64, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            y_stored = y.astype(self.y_dtype, copy=False)
        # Validate what is stored, not only what was given: a cast can overflow or truncate.
        check_cast(y, y_stored, "y", first_row=first_row, shard=shard)
        return Rows(self._stored_X(block.X, first_row, shard), y_stored, w, offset)

    def _stored_X(self, X: Any, first_row: int, shard: int) -> Any:
        if not self.sparse:
            check_finite(X, "X", first_row=first_row, shard=shard)
            with np.errstate(over="ignore", invalid="ignore"):
                stored = X.astype(self.x_dtype, copy=False)
            check_cast(X, stored, "X", first_row=first_row, shard=shard)
            return stored
        with np.errstate(over="ignore", invalid="ignore"):
            values = X.data.astype(self.x_dtype, copy=False)
        changed = ~np.isfinite(values) if values.dtype.kind == "f" else values != X.data
        if changed.any():
            i = int(np.argmax(changed))
            row = first_row + row_of_value(X.indptr, i)
            raise InvalidDataError(
                f"X value {X.data[i].item()!r} in shard {shard} at row {row}, column {int(X.indices[i])} does not "
                f"fit the stored dtype {values.dtype} (fixed by the first block or the dtype argument)")
        import scipy.sparse as sp  # loaded with sparse data only (dasklbfgs._typing.is_sparse)

        return sp.csr_array((values, X.indices, X.indptr), shape=X.shape)

    def write(self, group: zarr.Group, block: Rows, *, first_row: int, grow: bool) -> WrittenRows:
        """Check and write the shard ``block`` starting at ``first_row`` into ``group``'s
        arrays (``grow``: resize them to end at its last row first). Returns what it adds."""
        X, y, w, offset = self.stored(block, first_row=first_row)
        shard, stop = first_row // self.shard_rows, first_row + y.shape[0]
        written = WrittenRows(n_rows=y.shape[0])
        if self.sparse:
            write_csr_shard(_node(group, "X", zarr.Group), shard, X, dtype=self.x_dtype,
                            compressors=self.compressors)
            written.nnz.append(int(X.nnz))
        arrays = {**({} if self.sparse else {"X": X}), "y": y, "w": w, "offset": offset}
        for name, values in ((name, values) for name, values in arrays.items() if values is not None):
            array = _node(group, name, zarr.Array).with_config(WRITE_EVERY_CHUNK)
            if grow:
                array.resize((stop, *array.shape[1:]))
            array[first_row:stop] = values
        if w is not None:
            written.total_weight = float(np.sum(w, dtype=np.float64))
        written.labels.update(y, w)
        return written

    def schema(self, written: WrittenRows, feature_names: list[str] | None) -> dict[str, Any]:
        """The dataset's schema (the group attribute :data:`ATTRS_KEY`) once every shard is
        written: refuses an empty dataset, all-zero weights and a wrong number of names."""
        if written.n_rows == 0 or self.n_features == 0:
            raise InvalidDataError(f"the dataset is empty (shape {(written.n_rows, self.n_features)}); give at least "
                                   "one row and one feature")
        if self.weighted and not written.total_weight > 0:
            raise InvalidDataError(f"every sample_weight is 0 (over {written.n_rows} rows): the weighted objective "
                                   "is undefined; give some rows a positive weight")
        if feature_names is not None and len(feature_names) != self.n_features:
            raise InvalidDataError(f"feature_names has {len(feature_names)} names but X has {self.n_features} "
                                   "features")
        return {
            "format": FORMAT_VERSION,
            "n_samples": written.n_rows,
            "n_features": self.n_features,
            "shard_rows": self.shard_rows,
            "chunks_complete": True,
            "write_id": uuid.uuid4().hex,  # readers holding the dataset notice a later write
            "feature_names": list(map(str, feature_names)) if feature_names is not None else None,
            **({"X_format": "csr", "X_dtype": str(self.x_dtype), "nnz": written.nnz} if self.sparse else {}),
            **({"weighted": True, "total_weight": written.total_weight} if self.weighted else {}),
            **({"offsets": True} if self.offsets else {}),
            **written.labels.as_attrs(),
        }


def _node(group: zarr.Group, name: str, kind: type) -> Any:
    node = group[name]
    assert isinstance(node, kind)  # the layout create_arrays made
    return node
