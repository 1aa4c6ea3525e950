"""Write a sharded dataset shard by shard, atomically.

Rows arrive in blocks of any size; the writer buffers them into whole shards, validates
each shard (shape, dtype, finiteness) and appends it to the Zarr arrays of a temporary
group beside the target. Only when every shard is written does the temporary group
replace the target path, so a failed write never leaves a half-written store.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from dasklbfgs.data._sparse import as_csr, check_csr, is_sparse, row_of_value, vstack_csr, write_csr_shard
from dasklbfgs.data._validate import (
    check_block_shapes,
    check_cast,
    check_finite,
    check_numeric,
    check_weight_values,
    check_weights_shape,
)
from dasklbfgs.data.location import WRITING_MARKER, Location
from dasklbfgs.errors import ConfigurationError, DatasetExistsError, InvalidDataError

FORMAT_VERSION = 1
ATTRS_KEY = "dasklbfgs"
MAX_LABELS_COUNTED = 1000


#: The codec of ``compressor="default"``: Blosc lz4 level 5 with byte shuffle. Measured on the
#: recipes' dense float data (``python -m benchmarks.shard_load``), every codec saves only 4-17% of
#: the bytes (the mantissas are close to random), so the decode rate decides: lz4 decodes at
#: 1.5-2.5x Blosc zstd's rate for 2-6% more bytes, and unlike no codec it still shrinks data
#: that compress (integer codes, repeated values). docs/guide.md, "Codec and loading".
DEFAULT_CODEC = zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")


def resolve_compressor(compressor: Any) -> tuple:
    """The arrays' ``compressors``: ``"default"`` is :data:`DEFAULT_CODEC`, ``None`` is none."""
    if isinstance(compressor, str) and compressor == "default":
        compressor = DEFAULT_CODEC
    return () if compressor is None else (compressor,)


class _LabelSummary:
    """Running summary of y: min, max and, while labels are few integers, their counts."""

    def __init__(self) -> None:
        self.minimum = np.inf
        self.maximum = -np.inf
        self.counts: Counter[int] | None = Counter()
        self.weights: dict[int, float] | None = None  # per label: the sum of its rows' weights
        self.integral = True

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
        if not self.integral or (self.counts is not None and len(self.counts) > MAX_LABELS_COUNTED):
            self.counts = self.weights = None

    def as_attrs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"y_min": self.minimum, "y_max": self.maximum, "y_integral": self.integral}
        if self.counts is not None:
            out["label_counts"] = {str(k): v for k, v in sorted(self.counts.items())}
        if self.weights is not None:
            out["label_weights"] = {str(k): v for k, v in sorted(self.weights.items())}
        return out


class ShardWriter:
    """Append validated, whole shards to the ``X`` and ``y`` arrays of a new Zarr group
    (``X`` dense, or one CSR subgroup per shard when the first block is sparse: see
    :mod:`dasklbfgs.data._sparse`), and to the ``w`` array of sample weights when the first
    block has weights."""

    def __init__(
        self, group: zarr.Group, *, shard_rows: int, first_X: Any, first_y: np.ndarray,
        x_dtype: np.dtype, compressors: tuple, weighted: bool = False,
    ) -> None:
        self.shard_rows = shard_rows
        self.n_rows = 0
        self.n_features = first_X.shape[1]
        self.y_tail = first_y.shape[1:]
        self.labels = _LabelSummary()
        self._pending: list[tuple[Any, np.ndarray, np.ndarray | None]] = []
        self._pending_rows = 0
        self.sparse = is_sparse(first_X)
        self.nnz: list[int] = []  # per shard, sparse X only
        self.x_dtype, self.compressors = x_dtype, compressors

        def create(name: str, tail: tuple[int, ...], dtype: Any, dims: tuple[str, ...]) -> zarr.Array:
            # write_empty_chunks: every shard's chunk exists, so a missing one is damage
            return group.create_array(
                name, shape=(0, *tail), chunks=(shard_rows, *tail), dtype=dtype,
                compressors=compressors, config={"write_empty_chunks": True}, dimension_names=dims,
            )

        self.X: zarr.Group | zarr.Array  # a group of CSR shards when sparse, else the dense array
        if self.sparse:
            self.X = group.create_group("X", attributes={"format": "csr"})
        else:
            self.X = create("X", (self.n_features,), x_dtype, ("sample", "feature"))
        y_dims = ("sample",) if first_y.ndim == 1 else ("sample", "output")
        y_dtype = first_y.dtype if first_y.dtype.kind in "iuf" else np.float64
        self.y = create("y", self.y_tail, y_dtype, y_dims)
        self.w = create("w", (), np.float64, ("sample",)) if weighted else None
        self.total_weight = 0.0

    def append(self, X: Any, y: np.ndarray, w: np.ndarray | None = None) -> None:
        where = f"in the block starting at row {self.n_rows + self._pending_rows}"
        if (w is not None) != (self.w is not None):
            given, first = ("has", "had none") if w is not None else ("has no", "had")
            raise InvalidDataError(f"the block starting at row {self.n_rows + self._pending_rows} {given} sample "
                                   f"weights but the first block {first}; give weights with every block or none")
        if w is not None:
            check_weights_shape(w, X.shape[0], where=where)
        if is_sparse(X) != self.sparse:
            given, first = ("sparse", "dense") if is_sparse(X) else ("dense", "sparse")
            raise InvalidDataError(f"X is {given} {where} but the first block was {first}; "
                                   "give every block in the same kind")
        check_block_shapes(X, y, where=where)
        check_numeric(X, "X")
        check_numeric(y, "y")
        if X.shape[1] != self.n_features:
            raise InvalidDataError(
                f"X has {X.shape[1]} features {where}, expected {self.n_features} "
                "like the first block"
            )
        if y.shape[1:] != self.y_tail:
            raise InvalidDataError(
                f"y has shape {y.shape} {where}, expected (n, {', '.join(map(str, self.y_tail))}) "
                "like the first block".replace("(n, )", "(n,)")
            )
        if X.shape[0] == 0:
            return
        if self.sparse:  # checked whole, before the rows are cut into shards
            X = check_csr(as_csr(X), first_row=self.n_rows + self._pending_rows, shard_rows=self.shard_rows,
                          n_features=self.n_features)
        self._pending.append((X, y, w))
        self._pending_rows += X.shape[0]
        while self._pending_rows >= self.shard_rows:
            self._write_shard(self.shard_rows)

    def finish(self) -> None:
        if self._pending_rows:
            self._write_shard(self._pending_rows)

    def _write_shard(self, rows: int) -> None:
        Xs, ys, ws = zip(*self._pending)
        X_all = vstack_csr(list(Xs), self.n_features, self.x_dtype) if self.sparse else (
            np.concatenate(Xs) if len(Xs) > 1 else Xs[0])
        y_all = np.concatenate(ys) if len(ys) > 1 else ys[0]
        w_all = None if self.w is None else (np.concatenate(ws) if len(ws) > 1 else ws[0])
        X, y = X_all[:rows], y_all[:rows]
        w = None if w_all is None else w_all[:rows]
        self._pending = [(X_all[rows:], y_all[rows:], None if w_all is None else w_all[rows:])] \
            if X_all.shape[0] > rows else []
        self._pending_rows = X_all.shape[0] - rows

        shard = self.n_rows // self.shard_rows
        check_finite(y, "y", first_row=self.n_rows, shard=shard)
        if w is not None:
            check_weight_values(w, first_row=self.n_rows, shard=shard)
        with np.errstate(over="ignore", invalid="ignore"):
            y_stored = y.astype(self.y.dtype, copy=False)
        # Validate what is stored, not only what was given: a cast can overflow or truncate.
        check_cast(y, y_stored, "y", first_row=self.n_rows, shard=shard)
        X_stored = self._stored_X(X, shard)
        start, stop = self.n_rows, self.n_rows + rows
        if isinstance(self.X, zarr.Group):  # sparse
            write_csr_shard(self.X, shard, X_stored, dtype=self.x_dtype, compressors=self.compressors)
            self.nnz.append(int(X_stored.nnz))
        else:
            self.X.resize((stop, self.n_features))
            self.X[start:stop] = X_stored
        self.y.resize((stop, *self.y_tail))
        self.y[start:stop] = y_stored
        if self.w is not None:
            assert w is not None  # every block has weights when the first had (append checks)
            self.w.resize((stop,))
            self.w[start:stop] = w
            self.total_weight += float(np.sum(w, dtype=np.float64))
        self.labels.update(y, w)
        self.n_rows = stop

    def _stored_X(self, X: Any, shard: int) -> Any:
        """X as stored, checked: finite, and unchanged by the cast to the stored dtype (and a
        sparse block well formed and canonical)."""
        if not self.sparse:
            check_finite(X, "X", first_row=self.n_rows, shard=shard)
            with np.errstate(over="ignore", invalid="ignore"):
                stored = X.astype(self.x_dtype, copy=False)
            check_cast(X, stored, "X", first_row=self.n_rows, shard=shard)
            return stored
        with np.errstate(over="ignore", invalid="ignore"):
            values = X.data.astype(self.x_dtype, copy=False)
        changed = ~np.isfinite(values) if values.dtype.kind == "f" else values != X.data
        if changed.any():
            i = int(np.argmax(changed))
            row = self.n_rows + row_of_value(X.indptr, i)
            raise InvalidDataError(
                f"X value {X.data[i].item()!r} in shard {shard} at row {row}, column {int(X.indices[i])} does not "
                f"fit the stored dtype {values.dtype} (fixed by the first block or the dtype argument)")
        import scipy.sparse as sp  # loaded with sparse data only (dasklbfgs._typing.is_sparse)

        return sp.csr_array((values, X.indices, X.indptr), shape=X.shape)


def _block_arrays(block: Any) -> tuple[Any, np.ndarray, np.ndarray | None]:
    """``(X, y, w)`` of a block given as ``(X, y)`` or ``(X, y, sample_weight)``."""
    if not isinstance(block, (tuple, list)) or len(block) not in (2, 3):
        raise InvalidDataError(f"a block must be (X, y) or (X, y, sample_weight), got {type(block).__name__}"
                               + (f" of length {len(block)}" if isinstance(block, (tuple, list)) else ""))
    X, y, *w = block
    weights = None if not w or w[0] is None else np.asarray(w[0])
    return (X if is_sparse(X) else np.asarray(X)), np.asarray(y), weights


def _x_dtype(dtype: Any, first_X: np.ndarray) -> np.dtype:
    """The stored dtype of X. By default float32 stays float32 and everything else becomes
    float64: the models compute in X's dtype, so integer features stored as integers would
    truncate their weights. Integer codes (token ids) are stored as integers only when the
    caller asks for an integer ``dtype``."""
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt.kind not in "iuf":
            raise ConfigurationError(f"dtype must be a floating or integer dtype, got {dt!s}")
        return dt
    return first_X.dtype if first_X.dtype in (np.float32, np.float64) else np.dtype(np.float64)


def is_replaceable(path: Path) -> bool:
    """Whether ``overwrite=True`` may replace ``path``: a Zarr store, or a folder of them."""
    if (path / "zarr.json").is_file():
        return True
    if not path.is_dir():
        return False
    entries = list(path.iterdir())
    return bool(entries) and all((e / "zarr.json").is_file() for e in entries)


def check_target(target: Path, overwrite: bool) -> None:
    """Refuse an existing target without ``overwrite``, and anything but our own stores with it."""
    if not target.exists():
        return
    if not overwrite:
        raise DatasetExistsError(f"{str(target)!r} already exists; pass overwrite=True to replace it")
    if not is_replaceable(target):
        raise DatasetExistsError(
            f"refusing to overwrite {str(target)!r}: it is not a Zarr store or a folder of them"
        )


def write_dataset(
    target: Location, blocks: Iterable[tuple[Any, ...]], *, shard_rows: int,
    feature_names: list[str] | None, attrs: dict[str, Any] | None, overwrite: bool,
    compressor: Any, dtype: Any,
) -> None:
    """Write ``blocks`` of (X, y) or (X, y, sample_weight) rows to a new dataset at ``target``
    (:func:`written_atomically`: the schema is the last thing written)."""
    compressors = resolve_compressor(compressor)
    with written_atomically(target, overwrite=overwrite) as open_store:
        writer = None
        for block in blocks:
            X, y, w = _block_arrays(block)
            if writer is None:
                check_block_shapes(X, y, where="in the first block")
                check_numeric(X, "X")
                check_numeric(y, "y")
                x_dtype = _x_dtype(dtype, X)
                group = zarr.create_group(store=open_store(), zarr_format=3)  # the first block is good
                writer = ShardWriter(
                    group, shard_rows=shard_rows, first_X=X, first_y=y,
                    x_dtype=x_dtype, compressors=compressors, weighted=w is not None,
                )
            writer.append(X, y, w)
        if writer is not None:
            writer.finish()
        if writer is None or writer.n_rows == 0 or writer.n_features == 0:
            shape = (0, 0) if writer is None else (writer.n_rows, writer.n_features)
            raise InvalidDataError(
                f"the dataset is empty (shape {shape}); give at least one row and one feature"
            )
        if writer.w is not None and not writer.total_weight > 0:
            raise InvalidDataError(f"every sample_weight is 0 (over {writer.n_rows} rows): the weighted objective "
                                   "is undefined; give some rows a positive weight")
        if feature_names is not None and len(feature_names) != writer.n_features:
            raise InvalidDataError(
                f"feature_names has {len(feature_names)} names but X has "
                f"{writer.n_features} features"
            )
        meta = {
            "format": FORMAT_VERSION,
            "n_samples": writer.n_rows,
            "n_features": writer.n_features,
            "shard_rows": shard_rows,
            "chunks_complete": True,
            "write_id": uuid.uuid4().hex,  # readers holding the dataset notice a later write
            "feature_names": list(map(str, feature_names)) if feature_names is not None else None,
            **({"X_format": "csr", "X_dtype": str(writer.x_dtype), "nnz": writer.nnz} if writer.sparse else {}),
            **({"weighted": True, "total_weight": writer.total_weight} if writer.w is not None else {}),
            **writer.labels.as_attrs(),
        }
        group.attrs.update({ATTRS_KEY: meta, **(attrs or {})})  # the commit, on an object store


@contextlib.contextmanager
def written_atomically(target: Location, *, overwrite: bool) -> Iterator[Callable[[], Any]]:
    """Yield what opens the Zarr store to write a dataset into (called once its first block
    has passed its checks), such that readers of ``target`` find the old dataset, none, or
    the complete new one. A local folder is written aside and renamed into place
    (:func:`written_aside`). An object store has no rename: the dataset is written where it
    will stay, and counts as one only once its schema is in the root group's ``zarr.json``,
    one object the writer puts last (:func:`written_in_place`)."""
    if target.is_local:
        with written_aside(target.path, overwrite=overwrite) as temp:
            yield lambda: str(temp)
    else:
        with written_in_place(target, overwrite=overwrite) as open_store:
            yield open_store


@contextlib.contextmanager
def written_in_place(target: Location, *, overwrite: bool) -> Iterator[Callable[[], Any]]:
    """Yield what opens the store at ``target`` (an object store) to write into. The target
    is checked at once (an existing one needs ``overwrite``, and must be a Zarr store, a
    folder of them, or what a killed write left); opening puts a :data:`WRITING_MARKER`
    first, then takes an old dataset back (its ``zarr.json`` deleted, so readers stop finding
    it) and removes the rest. The marker goes once the write has committed; a failed write is
    removed, and what a killed one leaves (files and the marker, no schema) is refused by
    :class:`~dasklbfgs.data.sharded.ShardedDataset` and replaced by ``overwrite=True``."""
    if target.exists():
        if not overwrite:
            raise DatasetExistsError(f"{target.url!r} already exists; pass overwrite=True to replace it")
        if not target.is_replaceable():
            raise DatasetExistsError(f"refusing to overwrite {target.url!r}: it is not a Zarr store or a folder of "
                                     "them")
    opened = False

    def open_store() -> Any:
        nonlocal opened
        target.put(WRITING_MARKER, uuid.uuid4().hex.encode())
        opened = True
        target.remove("zarr.json")
        target.remove_all_but(WRITING_MARKER)
        return target.zarr_store(read_only=False)

    try:
        yield open_store
    except BaseException:
        if opened:
            with contextlib.suppress(Exception):  # the write's own error is the one to hear
                target.remove("zarr.json")
                target.remove()
        raise
    if opened:
        target.remove(WRITING_MARKER)


@contextlib.contextmanager
def written_aside(target: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` to write into; on success it replaces
    ``target`` (see :func:`replace_path`), on any failure it is removed. So readers find the
    old store or the complete new one, never a half-written one."""
    check_target(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.writing-{uuid.uuid4().hex[:8]}"
    try:
        yield temp
        replace_path(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def replace_path(temp: Path, target: Path) -> None:
    """Move ``temp`` to ``target``; an existing target is removed only after the move."""
    if not target.exists():
        os.rename(temp, target)
        return
    old = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    try:
        os.rename(temp, target)
    except BaseException:
        os.rename(old, target)  # put the previous store back
        raise
    if old.is_dir():
        shutil.rmtree(old)
    else:
        old.unlink()
