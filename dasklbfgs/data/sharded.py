"""``ShardedDataset``: training data as a Zarr (format 3) group chunked along rows.

The group holds ``X`` (n x d), ``y`` ((n,) or (n, k)) and, for weighted data, ``w`` (n,) of
sample weights, for data with offsets ``offset`` (n,); one row chunk of the arrays is one
*data shard*, the unit Sandblaster caches on a worker and Downpour replicas stream from.
Schema and label statistics live in the group attribute ``"dasklbfgs"``. A sparse ``X``
(scipy.sparse input) is stored shard by shard in CSR form (see :mod:`dasklbfgs.data._sparse`)
and read back as ``scipy.sparse.csr_array``.

A dataset lives in a local folder or at any fsspec URL (``s3://bucket/train.zarr`` with
``storage_options``: :mod:`dasklbfgs.data.location`); the workers read it where it lives.
This module reads; the constructors that write one are in :mod:`dasklbfgs.data.constructors`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr

from dasklbfgs.data import _remote_shards as remote
from dasklbfgs.data._chunks import chunk_decoder, file_filler, read_whole_chunks
from dasklbfgs.data._shard_format import ATTRS_KEY
from dasklbfgs.data._sparse import csr_nbytes, read_csr_shard, vstack_csr
from dasklbfgs.data.constructors import FRAME_FEATURES_KEY, DatasetWriters
from dasklbfgs.data.frame_features import FrameFeatures
from dasklbfgs.data.location import Location
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import (
    ConfigurationError,
    CorruptDatasetError,
    DatasetError,
    NotADatasetError,
    StoreError,
)

if TYPE_CHECKING:
    import dask.array
    import xarray
    from zarr.core.metadata import ArrayV3Metadata

__all__ = ["ShardedDataset", "datasets_below"]



class ShardedDataset(DatasetWriters):
    """A dataset of ``X`` and ``y`` stored as row shards in a Zarr group.

    Open an existing one with :meth:`open`; write one with :meth:`create` (numpy, dask or
    xarray input) or :meth:`from_blocks` (an iterator of row blocks, for data larger than
    memory). Instances are small and picklable: workers reopen the store where it lives
    (``url``: an absolute local path, or a URL reached with ``storage_options``).

    Examples
    --------
    >>> ds = ShardedDataset.create("train.zarr", X, y, shard_rows=50_000)  # doctest: +SKIP
    >>> ds.n_shards, ds.shard_bounds[0]                                    # doctest: +SKIP
    (20, (0, 50000))
    >>> ShardedDataset.create("s3://bucket/train.zarr", X, y, shard_rows=50_000,
    ...                       storage_options={"profile": "ml"})           # doctest: +SKIP
    """

    def __init__(self, path: Location | os.PathLike[str] | str, storage_options: dict[str, Any] | None = None
                 ) -> None:
        # Absolute: the workers read this path, and their working directory is not ours.
        self.location = Location.of(path, storage_options)
        self.url = self.location.url
        group = _open_group(self.location)
        self._attrs: dict[str, Any] = dict(group.attrs)  # JSON; the schema under ATTRS_KEY a mapping
        if not self.location.is_local and ATTRS_KEY not in self._attrs:
            raise NotADatasetError(
                f"{self.url!r} holds no finished dataset: its group has no dasklbfgs schema, which a write "
                "commits last (a write that did not finish leaves this; write it again with overwrite=True)")
        schema = self._attrs.get(ATTRS_KEY, {})
        sparse = schema.get("X_format") == "csr"
        for name in ("y",) + (() if sparse else ("X",)) + (("w",) if schema.get("weighted") else ()) + (
                ("offset",) if schema.get("offsets") else ()):
            if name not in group.array_keys():
                raise NotADatasetError(
                    f"{self.url!r} is a Zarr group but has no {name!r} array; "
                    "write datasets with ShardedDataset.create"
                )
        y = cast(zarr.Array, group["y"])  # checked among the array keys above, as a dense X is
        X_shape: tuple[int, ...]
        if sparse:
            if "X" not in group.group_keys():
                raise NotADatasetError(f"{self.url!r}: the schema says X is sparse (CSR) but there is no 'X' "
                                       "group of shards; write datasets with ShardedDataset.create")
            X_shape, chunk_rows = (schema["n_samples"], schema["n_features"]), y.chunks[0]
            self._dtype = np.dtype(schema["X_dtype"])
        else:
            X = cast(zarr.Array, group["X"])
            X_shape, chunk_rows, self._dtype = X.shape, X.chunks[0], X.dtype
        if len(X_shape) != 2 or y.shape[0] != X_shape[0]:
            raise NotADatasetError(
                f"{self.url!r}: X has shape {tuple(X_shape)} and y has shape {y.shape}; "
                "expected X (n, d) and y with n rows"
            )
        self._shape = tuple(X_shape)
        self._y_shape = y.shape
        self._chunk_rows = chunk_rows
        self._y_dtype = y.dtype

    # -- construction ---------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The local folder of a dataset on local disk (:attr:`url` names any dataset)."""
        return self.location.path

    @classmethod
    def open(cls, path: Location | os.PathLike[str] | str, storage_options: dict[str, Any] | None = None
             ) -> ShardedDataset:
        """Open the dataset stored at ``path`` (a local path or a URL, reached with
        ``storage_options`` as fsspec takes them)."""
        return cls(path, storage_options)

    # -- description ----------------------------------------------------------------

    @property
    def n_samples(self) -> int:
        return int(self._shape[0])

    @property
    def n_features(self) -> int:
        return int(self._shape[1])

    @property
    def shard_rows(self) -> int:
        return int(self._chunk_rows)

    @property
    def n_shards(self) -> int:
        return -(-self.n_samples // self.shard_rows)

    @cached_property
    def shard_bounds(self) -> list[tuple[int, int]]:
        """Row range ``(start, stop)`` of each shard, in order."""
        rows = self.shard_rows
        return [(s, min(s + rows, self.n_samples)) for s in range(0, self.n_samples, rows)]

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def is_sparse(self) -> bool:
        """Whether X is stored sparse (CSR shards; rows read as ``scipy.sparse.csr_array``)."""
        return self.schema.get("X_format") == "csr"

    @property
    def nnz(self) -> int:
        """Stored non-zeros of X (``n_samples * n_features`` when dense)."""
        return sum(self.schema["nnz"]) if self.is_sparse else self.n_samples * self.n_features

    @property
    def is_weighted(self) -> bool:
        """Whether the rows carry sample weights (the ``w`` array)."""
        return bool(self.schema.get("weighted", False))

    @property
    def has_offsets(self) -> bool:
        """Whether the rows carry offsets (the ``offset`` array: a known term of each row's
        linear predictor, see :meth:`create`)."""
        return bool(self.schema.get("offsets", False))

    @property
    def total_weight(self) -> float:
        """The sum of the sample weights (``n_samples`` when unweighted): what the loss sum
        is divided by to give the objective's (weighted) mean."""
        return float(self.schema["total_weight"]) if self.is_weighted else float(self.n_samples)

    @property
    def label_weights(self) -> dict[int, float] | None:
        """Per class label, the sum of its rows' weights (weighted data with few integer labels;
        else None): what ``class_weight="balanced"`` divides by."""
        weights = self.schema.get("label_weights")
        return None if weights is None else {int(k): float(v) for k, v in weights.items()}

    @property
    def y_shape(self) -> tuple[int, ...]:
        return tuple(self._y_shape)

    @property
    def attrs(self) -> dict[str, Any]:
        """User attributes plus the schema under the ``"dasklbfgs"`` key."""
        return dict(self._attrs)

    @property
    def schema(self) -> dict[str, Any]:
        return dict(self._attrs.get(ATTRS_KEY, {}))

    @property
    def frame_features(self) -> FrameFeatures | None:
        """How a table's columns became ``X`` (datasets written from DataFrames), else None."""
        doc = self.schema.get(FRAME_FEATURES_KEY)
        return None if doc is None else FrameFeatures.from_json(doc)

    @property
    def feature_names(self) -> list[str] | None:
        return self.schema.get("feature_names")

    @property
    def label_counts(self) -> dict[int, int] | None:
        counts = self.schema.get("label_counts")
        return None if counts is None else {int(k): int(v) for k, v in counts.items()}

    @property
    def classes(self) -> list[str] | None:
        """The names of the classes, label ``k`` being ``classes[k]``, when the dataset records
        them (written from a table whose labels are classes, or by a recipe that names them);
        else None."""
        names = self._attrs.get("classes")
        return [str(name) for name in names] if isinstance(names, list) else None

    @property
    def label_range(self) -> tuple[float, float]:
        """Smallest and largest value in ``y``, recorded when the dataset was written."""
        schema = self.schema
        if "y_min" in schema:
            return float(schema["y_min"]), float(schema["y_max"])
        _, y = self.load_rows(0, self.n_samples)
        return float(y.min()), float(y.max())

    @property
    def nbytes_in_memory(self) -> int:
        """Bytes X and y take once loaded (decompressed)."""
        y_bytes = int(np.prod(self.y_shape)) * self._y_dtype.itemsize + 8 * self.n_samples * (
            int(self.is_weighted) + int(self.has_offsets))
        if self.is_sparse:
            return y_bytes + sum(csr_nbytes(nnz, stop - start, self.n_features, self.dtype.itemsize)
                                 for nnz, (start, stop) in zip(self.schema["nnz"], self.shard_bounds, strict=True))
        return int(self.n_samples * self.n_features * self.dtype.itemsize + y_bytes)

    def nbytes_stored(self) -> int:
        """Bytes the store occupies (on disk, or in the object store)."""
        return self.location.stored_bytes()

    def check_workers_can_read(self, client: Any) -> None:
        """Open this dataset on every worker of ``client`` before work is sent to them: a
        worker that cannot (no shared file system, another mount, no credentials or no
        route to the store) is a :class:`DatasetError` naming the location and the worker,
        not a failed task's traceback later."""
        answers = client.run(_open_problem, self.location)
        where = ("at the same path (a shared file system, a copy at that path on each machine, or an object "
                 "store URL)" if self.location.is_local else "reachable: its filesystem package, credentials and "
                 "a route to the store")
        for worker, problem in sorted(answers.items()):
            if problem is not None:
                raise DatasetError(f"worker {worker} cannot read the dataset at {self.url!r} ({problem}); every "
                                   f"worker needs it {where}")

    def __repr__(self) -> str:
        return (
            f"ShardedDataset({self.url!r}, n_samples={self.n_samples}, "
            f"n_features={self.n_features}, n_shards={self.n_shards}, dtype={self.dtype}"
            f"{f', sparse, nnz={self.nnz}' if self.is_sparse else ''}{', weighted' if self.is_weighted else ''}"
            f"{', offsets' if self.has_offsets else ''})"
        )

    # -- reading --------------------------------------------------------------------

    # Pickled, a dataset is its path and schema (plain attributes): whoever unpickles it, such
    # as a Dask scheduler that cannot see the files, does not open the store; a worker opens
    # it when it reads rows.

    def _root(self) -> zarr.Group:
        return _read_group(self.location)

    def _group(self) -> zarr.Group:
        group = self._root()
        self._check_same_write(group)
        return group

    def _check_same_write(self, group: zarr.Group | None = None) -> None:
        """On an object store, refuse to read a dataset written again since it was opened
        (a handle or a worker's copy would read the new write's chunks as the old one's); a
        local dataset is replaced by a rename, so open files stay the old one's."""
        if self.location.is_local:
            return
        if group is None:
            try:
                group = self._root()
            except StoreError:
                raise
            except Exception as exc:  # no zarr.json: removed, or an overwrite under way
                raise NotADatasetError(f"no dataset at {self.url!r} any more: it was removed, or is being written "
                                       "again, since it was opened") from exc
        schema = dict(group.attrs).get(ATTRS_KEY)
        if not isinstance(schema, Mapping) or schema.get("write_id") != self.schema.get("write_id"):
            raise NotADatasetError(f"the dataset at {self.url!r} was written again since it was opened "
                                   "(another write committed there, or is under way); open it again")

    def _arrays(self) -> tuple[zarr.Array | zarr.Group, zarr.Array]:
        try:
            group = self._group()
            return group["X"], cast(zarr.Array, group["y"])  # the layout's (a group there fails on use)
        except (StoreError, NotADatasetError):
            raise
        except Exception as exc:  # zarr raises several types for a store that is gone
            if not self.location.is_local:
                self._check_same_write()  # a rewrite under way, or the dataset removed
            if self.location.exists():
                raise CorruptDatasetError(f"cannot open the dataset at {self.url!r}: {exc}") from exc
            raise NotADatasetError(f"no dataset at {self.url!r} any more: the path does not exist "
                                   "(was it deleted or moved after it was opened?)") from exc

    def load_rows(self, start: int, stop: int) -> tuple[Any, np.ndarray]:
        """Read rows ``[start, stop)`` of X and y; only the chunks touched are read. X is a
        numpy array, or a ``scipy.sparse.csr_array`` when the dataset is sparse."""
        if not (0 <= start <= stop <= self.n_samples):
            raise ConfigurationError(
                f"row range [{start}, {stop}) is outside the dataset's {self.n_samples} rows"
            )
        if remote.applies(self, start, stop):  # a URL: the shards' objects fetched at once
            fetched = remote.read_rows(self, start, stop, ("X", "y"))
            return fetched["X"], fetched["y"]
        X, y = self._arrays()  # X a group of CSR shards when sparse, else an array (the layout's)
        if self.is_sparse:
            rows = self._sparse_rows(cast(zarr.Group, X), start, stop), self._dense_rows(y, "y", start, stop)
        else:
            rows = self._dense_rows(cast(zarr.Array, X), "X", start, stop), self._dense_rows(y, "y", start, stop)
        self._check_same_write()  # an overwrite takes the schema back before it deletes a chunk
        return rows

    def load_labels(self, start: int, stop: int) -> np.ndarray:
        """``y`` of rows ``[start, stop)`` alone (no X read)."""
        return self._per_row("y", "labels", start, stop)

    def first_label(self, bad: Callable[[np.ndarray], np.ndarray]) -> tuple[int, int, float] | None:
        """``(shard, row, value)`` of the first label ``bad`` marks (a boolean array of a shard's
        labels), reading the labels alone, shard by shard until one is found; None when none is.
        What an error about the labels names (a check that failed on the schema's range)."""
        for shard, (start, stop) in enumerate(self.shard_bounds):
            y = self.load_labels(start, stop)
            hit = np.flatnonzero(np.asarray(bad(y)).reshape(len(y), -1).any(axis=1))
            if hit.size:
                return shard, start + int(hit[0]), float(np.ravel(y[hit[0]])[0])
        return None

    def load_weights(self, start: int, stop: int) -> np.ndarray | None:
        """Sample weights of rows ``[start, stop)`` (float64), or None when the data are unweighted."""
        return self._per_row("w", "sample weights", start, stop) if self.is_weighted else None

    def load_shard_weights(self, index: int) -> np.ndarray | None:
        """Sample weights of shard ``index`` (None when unweighted)."""
        return self.load_weights(*self.shard_bounds[index])

    def load_offsets(self, start: int, stop: int) -> np.ndarray | None:
        """Offsets of rows ``[start, stop)`` (float64), or None when the dataset has none."""
        return self._per_row("offset", "offsets", start, stop) if self.has_offsets else None

    def _per_row(self, name: str, what: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the per-row array ``name`` (weights, offsets)."""
        if not (0 <= start <= stop <= self.n_samples):
            raise ConfigurationError(
                f"row range [{start}, {stop}) is outside the dataset's {self.n_samples} rows"
            )
        if remote.applies(self, start, stop):
            return cast(np.ndarray, remote.read_rows(self, start, stop, (name,))[name])
        try:
            array = cast(zarr.Array, self._group()[name])
        except (StoreError, NotADatasetError):
            raise
        except Exception as exc:
            raise CorruptDatasetError(f"cannot open the {what} of the dataset at {self.url!r}: "
                                      f"{exc}; rewrite the dataset") from exc
        values = self._dense_rows(array, name, start, stop)
        self._check_same_write()
        return values

    def _dense_rows(self, array: zarr.Array, name: str, start: int, stop: int) -> np.ndarray:
        if stop == start:
            return np.asarray(array[start:stop])
        shards = range(start // self.shard_rows, (stop - 1) // self.shard_rows + 1)
        if self.schema.get("chunks_complete", False):  # a missing chunk file would silently read as zeros
            keys = {i: f"{name}/{array.metadata.encode_chunk_key((i,) + (0,) * (array.ndim - 1))}" for i in shards}
            missing = set(self.location.missing(list(keys.values())))
            for i, key in keys.items():
                if key in missing:
                    raise remote.missing_chunk(self, key, i)
        try:
            return self._decoded_rows(array, name, start, stop)
        except Exception as exc:
            raise CorruptDatasetError(
                f"cannot decode {name} of the dataset at {self.url!r} in shard(s) "
                f"{list(shards)} (rows [{start}, {stop})): {exc}; a chunk file is damaged, rewrite the dataset"
            ) from exc

    def _decoded_rows(self, array: zarr.Array, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of ``array``: whole chunks decoded straight into the result
        where the codecs allow (:mod:`dasklbfgs.data._chunks`: a cached shard loads at
        several times zarr's rate), through zarr otherwise."""
        metadata = cast("ArrayV3Metadata", array.metadata)  # a dataset is opened as Zarr format 3
        decoder, rows = chunk_decoder(metadata), array.chunks[0]
        whole_chunks = start % rows == 0 and (stop % rows == 0 or stop == array.shape[0])
        # without chunks_complete a missing chunk is the fill value, which only zarr supplies
        if decoder is None or not whole_chunks or array.chunks[1:] != array.shape[1:] or \
                not self.schema.get("chunks_complete", False) or not self.location.is_local:
            return np.asarray(array[start:stop])  # zarr fetches a range's chunks concurrently
        return read_whole_chunks(metadata, file_filler(decoder, self.location.path / name), start // rows, stop)

    def _sparse_rows(self, X: zarr.Group, start: int, stop: int) -> Any:
        """Rows ``[start, stop)`` of a sparse X: the CSR shards they touch, cut and stacked."""
        parts = []
        for i in range(start // self.shard_rows, -(-stop // self.shard_rows)):
            first, last = self.shard_bounds[i]
            try:
                shard = read_csr_shard(X, i, self.n_features, last - first, self.location / "X")
            except Exception as exc:
                raise CorruptDatasetError(
                    f"cannot read sparse shard {i} of X of the dataset at {self.url!r} (rows {first}-{last}): "
                    f"{exc}; rewrite the dataset"
                ) from exc
            whole = start <= first and stop >= first + shard.shape[0]
            parts.append(shard if whole else shard[max(start - first, 0) : stop - first])
        return vstack_csr(parts, self.n_features, self.dtype)

    def load_shard(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Read shard ``index`` (one row chunk) of X and y."""
        if not (0 <= index < self.n_shards):
            raise ConfigurationError(f"shard index {index} out of range [0, {self.n_shards})")
        return self.load_rows(*self.shard_bounds[index])

    def load_shards(self, indices: Sequence[int]) -> list[Rows]:
        """The rows of each shard of ``indices``: X, y, and the sample weights and offsets
        (None when the dataset has none); on an object store every object of them is
        fetched in one concurrent batch, retried within the retry budget
        (:mod:`dasklbfgs.data._fetch`)."""
        for index in indices:
            if not (0 <= index < self.n_shards):
                raise ConfigurationError(f"shard index {index} out of range [0, {self.n_shards})")
        if not all(remote.applies(self, *self.shard_bounds[i]) for i in indices):
            return [Rows(*self.load_shard(i), self.load_shard_weights(i), self.load_offsets(*self.shard_bounds[i]))
                    for i in indices]
        parts = ("X", "y", *(("w",) if self.is_weighted else ()), *(("offset",) if self.has_offsets else ()))
        return [Rows(shard["X"], shard["y"], shard.get("w"), shard.get("offset"))
                for shard in remote.read_shards(self, indices, parts)]

    def iter_shards(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i in range(self.n_shards):
            yield self.load_shard(i)

    def to_dask(self) -> tuple[dask.array.Array, dask.array.Array]:
        """``X`` and ``y`` as dask arrays, one dask chunk per shard (``scipy.sparse.csr_array``
        chunks when the dataset is sparse)."""
        import dask
        import dask.array as da
        import scipy.sparse as sp

        X, y = self._arrays()
        if not self.is_sparse:
            return da.from_zarr(X), da.from_zarr(y)
        load = dask.delayed(_sparse_shard_X, pure=True)
        meta = sp.csr_array((0, self.n_features), dtype=self.dtype)
        chunks = [da.from_delayed(load(self, i), shape=(stop - start, self.n_features), dtype=self.dtype, meta=meta)
                  for i, (start, stop) in enumerate(self.shard_bounds)]
        return da.concatenate(chunks, axis=0), da.from_zarr(y)

    def weights_to_dask(self) -> dask.array.Array | None:
        """The sample weights as a dask array chunked like :meth:`to_dask`'s; None when unweighted."""
        import dask.array as da

        return da.from_zarr(cast(zarr.Array, self._group()["w"])) if self.is_weighted else None

    def offsets_to_dask(self) -> dask.array.Array | None:
        """The offsets as a dask array chunked like :meth:`to_dask`'s; None when the dataset has none."""
        import dask.array as da

        return da.from_zarr(cast(zarr.Array, self._group()["offset"])) if self.has_offsets else None

    def to_xarray(self) -> xarray.Dataset:
        """A lazy ``xarray.Dataset`` with ``X`` (sample, feature) and ``y`` (sample[, output])."""
        import xarray as xr

        if self.is_sparse:
            raise ConfigurationError(f"the dataset at {self.url!r} is sparse and xarray holds dense arrays; "
                                     "use to_dask() (scipy.sparse chunks) or load_rows()")
        ds = xr.open_zarr(self.location.zarr_store(read_only=True), consolidated=False, zarr_format=3)
        if self.feature_names is not None:
            ds = ds.assign_coords(feature=self.feature_names)
        return ds

    def describe(self) -> dict[str, Any]:
        """A summary: shape, shards, dtype, bytes on disk and in memory, labels."""
        schema = self.schema
        return {
            "path": self.url,
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "y_shape": list(self.y_shape),
            "n_shards": self.n_shards,
            "shard_rows": self.shard_rows,
            "dtype": str(self.dtype),
            "sparse": self.is_sparse,
            "nnz": self.nnz,
            "density": self.nnz / (self.n_samples * self.n_features),
            "nbytes_in_memory": self.nbytes_in_memory,
            "nbytes_stored": self.nbytes_stored(),
            "y_min": schema.get("y_min"),
            "y_max": schema.get("y_max"),
            "label_counts": self.label_counts,
            "classes": self.classes,
            "weighted": self.is_weighted,
            "total_weight": self.total_weight,
            "offsets": self.has_offsets,
            "attrs": {k: v for k, v in self._attrs.items() if k != ATTRS_KEY},
        }


def _sparse_shard_X(data: ShardedDataset, index: int) -> Any:
    """X of shard ``index`` (a dask task of :meth:`ShardedDataset.to_dask`)."""
    return data.load_shard(index)[0]


#: what the message about a path without a dataset says one is
WHAT_A_DATASET_IS = ("a dataset is a Zarr (format 3) group of X and y arrays chunked by rows: write one with "
                     "ShardedDataset.create or make_dataset, or 'dasklbfgs data make' or 'dasklbfgs data import'")


def datasets_below(location: Location) -> list[str]:
    """The names of the datasets directly below ``location`` (a recipe's ``test`` and
    ``train``): the Zarr groups there holding a ``y`` array, sorted."""
    return [name for name in location.groups_below() if location.exists(f"{name}/y/zarr.json")]


def _open_group(location: Location) -> zarr.Group:
    if not location.exists("zarr.json"):
        if not location.exists():
            raise NotADatasetError(f"no dataset at {location.url!r}: the path does not exist")
        splits = datasets_below(location)
        if splits:
            example = "train" if "train" in splits else splits[0]  # what a training command wants
            raise NotADatasetError(
                f"{location.url!r} holds the datasets {splits}, not one dataset; "
                f"open one of them, e.g. {(location / example).url!r}"
            )
        if location.is_local:
            found = "it is a file" if location.path.is_file() else "it is a folder without a zarr.json"
        else:
            found = "it has no zarr.json (a write that did not finish can leave files without one; write it again " \
                    "with overwrite=True)"
        raise NotADatasetError(f"no dataset at {location.url!r}: {found}; {WHAT_A_DATASET_IS}")
    try:
        return _read_group(location)
    except zarr.errors.ContainsArrayError as exc:
        raise NotADatasetError(f"{location.url!r} is a Zarr array, not a dataset group") from exc
    except Exception as exc:  # zarr raises several types for "not zarr here"
        raise NotADatasetError(f"{location.url!r} is not a Zarr (format 3) group: {exc}") from exc


def _read_group(location: Location) -> zarr.Group:
    """The dataset's group as its arrays' own metadata has it, never its consolidated copy: that
    copy is for xarray (``xarray.open_zarr``), and would hide an array lost since it was written."""
    return zarr.open_group(location.zarr_store(read_only=True), mode="r", zarr_format=3, use_consolidated=False)


def as_dataset(data: Any, storage_options: dict[str, Any] | None = None) -> ShardedDataset:
    """``data`` if it is a ShardedDataset, else the dataset at that path or URL (a cached
    dataset, ``dasklbfgs.cached(...)``, stands for its own)."""
    if isinstance(data, ShardedDataset):
        return data
    if isinstance(getattr(data, "dataset", None), ShardedDataset):
        return data.dataset
    if isinstance(data, (str, os.PathLike, Location)):
        return ShardedDataset.open(data, storage_options)
    raise ConfigurationError(
        f"data must be a ShardedDataset or a path or URL of one, got {type(data).__name__}"
    )


def _open_problem(location: Location) -> str | None:
    """Why this process cannot open the dataset at ``location`` (None: it can)."""
    try:
        ShardedDataset(location)
    except Exception as exc:  # any reason at all is what the caller must hear
        return str(exc) if isinstance(exc, DatasetError) else f"{type(exc).__name__}: {exc}"
    return None
