"""Writing a :class:`~dasklbfgs.data.sharded.ShardedDataset`: from arrays in memory, row
blocks, dask arrays, DataFrames and svmlight files.

:class:`DatasetWriters` holds the constructors the dataset class inherits. Arrays in memory
and row blocks are written by this process (:mod:`dasklbfgs.data._writer`); dask arrays,
DataFrames and files by the workers, a task per shard (:mod:`dasklbfgs.data.worker_writes`).
Either way the dataset is written atomically and holds the same bytes for the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from dasklbfgs.data._client import active_client, client_for
from dasklbfgs.data._shard_format import ATTRS_KEY, resolve_compressor
from dasklbfgs.data._sparse import as_csr, is_sparse
from dasklbfgs.data._validate import check_block_shapes, check_per_row_shape, check_shard_rows
from dasklbfgs.data._writer import write_dataset
from dasklbfgs.data.dask_input import dask_pieces, is_dask_collection
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.data.frame_input import check_task, frame_pieces
from dasklbfgs.data.location import Location, options_for
from dasklbfgs.data.rows import cut
from dasklbfgs.data.svmlight_input import DEFAULT_BLOCK_BYTES, svmlight_pieces
from dasklbfgs.data.worker_writes import write_on_workers
from dasklbfgs.errors import ConfigurationError, InvalidDataError

__all__ = ["DatasetWriters", "FRAME_FEATURES_KEY", "unpack_xarray"]

FRAME_FEATURES_KEY = "frame_features"  # in the schema: how a table's columns became X


class DatasetWriters:
    """The constructors of :class:`~dasklbfgs.data.sharded.ShardedDataset` that write one;
    each returns the written dataset, opened (``cls(location)``)."""

    if TYPE_CHECKING:  # the dataset class opens what its constructors wrote: cls(location)
        def __init__(self, path: Location | os.PathLike[str] | str,
                     storage_options: dict[str, Any] | None = None) -> None: ...

    @classmethod
    def create(
        cls, path: Location | os.PathLike[str] | str, X: Any, y: Any = None, *, shard_rows: int,
        sample_weight: Any = None, offset: Any = None, feature_names: list[str] | None = None,
        attrs: dict[str, Any] | None = None, overwrite: bool = False, compressor: Any = "default", dtype: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Self:
        """Write ``X``, ``y`` (and sample weights, offsets) as a sharded dataset at ``path`` and open it.

        Parameters
        ----------
        path
            Target directory, or an fsspec URL (``s3://bucket/train.zarr``, ``gs://...``,
            ``memory://...``). Written atomically: readers see the old dataset, none, or
            the complete new one, and a failure leaves nothing an open mistakes for data
            (on object stores the dataset's schema is written last, as its commit).
        X
            numpy array, scipy.sparse matrix or array (CSR, CSC, COO, ...; stored sparse),
            dask array (dense or with scipy.sparse chunks), or an ``xarray.Dataset`` with
            data variables ``X`` (dims ``sample``, ``feature``) and ``y`` (then leave ``y``
            as None). Feature names come from the ``feature`` coordinate when present.
        y
            Labels or targets, ``(n,)`` or ``(n, k)``.
        shard_rows
            Rows per shard (the Zarr chunk length along rows).
        sample_weight
            Optional per-row weights ``(n,)``, >= 0 and not all 0 (numpy or dask). Every
            solver then minimises the weighted mean loss ``sum_i w_i loss_i / sum_i w_i``
            plus the penalty. An xarray.Dataset input may carry them as a ``w`` variable.
        offset
            Optional per-row offsets ``(n,)``, finite (numpy or dask): a known term added
            to each row's linear predictor with no coefficient, in training, evaluation and
            prediction (linear models). The log of each row's exposure makes a Poisson or
            Tweedie model one of rates: ``mu_i = exposure_i * exp(x_i . w + b)``. An
            xarray.Dataset input may carry them as an ``offset`` variable.
        feature_names
            Optional names, one per column.
        attrs
            Extra JSON-serialisable group attributes (``task``, ``n_classes``, ...).
        overwrite
            Replace an existing dataset at ``path``: a local one only after the new one is
            complete; one at a URL once the input's first block has passed its checks (an
            error later leaves no dataset there: object stores have no rename).
        compressor
            A Zarr bytes-to-bytes codec, ``None`` for no compression, or ``"default"``
            (Blosc lz4 level 5 with byte shuffle, chosen by measurement: docs/guide.md, "Datasets").
            Whole shards stored with Blosc, Zstd or no codec are decoded straight into
            memory (several times zarr's rate); other codecs are read through zarr.
        dtype
            Dtype of the stored ``X``; default float32 stays float32, anything else
            becomes float64. An integer dtype stores integer codes (e.g. word ids) as
            they are; a value that does not fit it is an error.
        storage_options
            For a URL: what its filesystem takes (credentials, ``endpoint_url``, ...), as
            Dask and pandas spell them.

        Raises
        ------
        DatasetExistsError, InvalidDataError, ConfigurationError, StoreError
        """
        shard_rows = check_shard_rows(shard_rows)
        X, y, feature_names, sample_weight, offset = unpack_xarray(X, y, feature_names, sample_weight, offset)
        if y is None:
            raise ConfigurationError("y is required unless X is an xarray.Dataset holding 'y'")
        if any(is_dask_collection(a) for a in (X, y, sample_weight, offset)) and active_client() is not None:
            return cls.from_dask(path, X, y, sample_weight, offset=offset, shard_rows=shard_rows,
                                 feature_names=feature_names, attrs=attrs, overwrite=overwrite, compressor=compressor,
                                 dtype=dtype, storage_options=storage_options)
        X = as_csr(X) if is_sparse(X) else _as_array(X, "X")  # CSR: COO and DIA cannot slice rows
        y = _as_array(y, "y")
        check_block_shapes(X, y, where="in the input")  # before any block is read
        extras = []
        for values, name in ((sample_weight, "sample_weight"), (offset, "offset")):
            if values is not None:
                values = _as_array(values, name)
                check_per_row_shape(values, X.shape[0], where="in the input", name=name)
            extras.append(values)
        if 0 in X.shape:
            raise InvalidDataError(
                f"the dataset is empty (shape {tuple(X.shape)}); give at least one row and one feature"
            )
        return cls.from_blocks(
            path, _row_blocks(X, y, *extras, shard_rows=shard_rows), shard_rows=shard_rows, feature_names=feature_names,
            attrs=attrs, overwrite=overwrite, compressor=compressor, dtype=dtype, storage_options=storage_options,
        )

    @classmethod
    def from_blocks(
        cls, path: Location | os.PathLike[str] | str, blocks: Iterable[tuple[Any, ...]], *, shard_rows: int,
        feature_names: list[str] | None = None, attrs: dict[str, Any] | None = None,
        overwrite: bool = False, compressor: Any = "default", dtype: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Self:
        """Write a dataset from an iterable of ``(X_block, y_block)`` row blocks, of
        ``(X_block, y_block, weight_block)`` for weighted data (every block then has
        weights), or of ``(X_block, y_block, weight_block, offset_block)`` with offsets
        (``weight_block`` None for offsets without weights).

        Blocks may have any number of rows; they are buffered into whole shards, so only
        about one shard is held in memory at a time. This is how a dataset larger than
        memory is written. Sparse ``X_block`` (scipy.sparse) writes a sparse dataset; every
        block must then be sparse. Other parameters as in :meth:`create`.
        """
        shard_rows = check_shard_rows(shard_rows)
        location = Location.of(path, storage_options)
        _check_attrs(attrs)
        write_dataset(
            location, blocks, shard_rows=shard_rows, feature_names=feature_names, attrs=attrs,
            overwrite=overwrite, compressor=compressor, dtype=dtype,
        )
        return cls(location)

    @classmethod
    def from_dask(
        cls, path: Location | os.PathLike[str] | str, X: Any, y: Any, sample_weight: Any = None, *,
        offset: Any = None, shard_rows: int, client: Any = None, feature_names: list[str] | None = None,
        attrs: dict[str, Any] | None = None, overwrite: bool = False, compressor: Any = "default",
        dtype: Any = None, storage_options: dict[str, Any] | None = None,
    ) -> Self:
        """Write dask arrays as a sharded dataset, each shard computed, checked and written
        by a task on a worker: the client sends no rows and receives none.

        ``X`` is a dask array, dense or with scipy.sparse chunks (a sparse dataset), ``y``
        ``sample_weight`` and ``offset`` dask or numpy arrays with one row per row of ``X`` (rechunked
        by dask to ``X``'s row chunks, on the workers). Rows that fail a check (NaN or
        infinity, a negative weight, a value the stored dtype cannot hold) fail the whole
        write with an :class:`~dasklbfgs.errors.InvalidDataError` naming shard, row and
        column, and leave no dataset behind. The result is the dataset :meth:`create` writes
        from the same rows, byte for byte; :meth:`create` comes here itself for dask input
        when a Dask client is active. ``path`` must be reachable by the workers (a URL, or a
        shared folder); ``client``: the default client (one is needed). Other
        parameters as in :meth:`create`.
        """
        shard_rows = check_shard_rows(shard_rows)
        location = Location.of(path, storage_options)
        _check_attrs(attrs)
        pieces, rows, shard_format = dask_pieces(X, y, sample_weight, offset, shard_rows=shard_rows, dtype=dtype,
                                                 compressors=resolve_compressor(compressor))
        write_on_workers(location, pieces, rows, shard_format, client=client_for(client, "from_dask"),
                         feature_names=feature_names, attrs=attrs, overwrite=overwrite)
        return cls(location)

    @classmethod
    def from_dataframe(
        cls, path: Location | os.PathLike[str] | str, frame: Any, *, label: str, features: list[str] | None = None,
        weight: str | None = None, offset: str | None = None, shard_rows: int,
        one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS,
        hash_features: int | None = None, crosses: list[tuple[str, str]] | None = None, client: Any = None,
        task: str | None = None, attrs: dict[str, Any] | None = None, overwrite: bool = False,
        compressor: Any = "default", dtype: Any = None, storage_options: dict[str, Any] | None = None,
    ) -> Self:
        """Write a Dask or pandas DataFrame as a sharded dataset, each partition turned into
        rows and each shard written by a task on a worker (a Dask DataFrame's rows never
        reach the client).

        Parameters
        ----------
        frame
            A ``dask.dataframe.DataFrame`` (read by the workers: ``read_parquet``,
            ``read_csv``, ...) or a ``pandas.DataFrame`` (sent to the cluster in pieces).
        label, weight, offset
            The column of labels, of sample weights and of offsets (see :meth:`create`;
            e.g. the log of each policy's exposure). Text labels are stored as the index of
            each row's class among the sorted classes (0..K-1), numbers as they are.
        task
            What the labels are for, recorded with the classes as the recipes record them
            (the attributes ``task``, ``n_classes`` and ``classes``, the class names), so that
            ``dasklbfgs train`` chooses the model: None decides by the labels (text, and
            integers that are class indices 0..K-1 with K at most
            :data:`~dasklbfgs.data.frame_features.MAX_INTEGER_CLASSES`, are classes: two
            ``binary``, a logistic model, more ``multiclass``, softmax; floats and many
            integers ``regression``, least squares; a few integers that are not class
            indices, such as -1 and 1, record none); ``"classification"`` (or ``"binary"``,
            ``"multiclass"``) takes numeric labels that are class indices as classes;
            ``"regression"``, ``"counts"`` (Poisson) or ``"amounts"`` (Gamma) keeps integer
            labels numbers. ``attrs`` given override what is recorded.
        features
            The columns of ``X`` (default: every other column), numeric, boolean, string
            or categorical; see :mod:`dasklbfgs.data.frame_features` for how text becomes
            features. The choice is recorded in the schema (:attr:`frame_features`), so
            new data can be turned into the same columns.
        one_hot_max_levels
            A text column with at most this many levels is one-hot encoded.
        hash_features
            Columns a text column with more levels (and each cross) is hashed into, as
            scikit-learn's ``FeatureHasher`` (e.g. ``2**22``); ``X`` is then sparse.
        crosses
            Pairs of columns whose combined values are hashed as one feature each.
        Other parameters as in :meth:`create` and :meth:`from_dask`.

        Raises
        ------
        InvalidDataError
            A missing column, a column neither numeric nor text, too many levels without
            hashing, a missing or non-finite value (naming column or shard, row, column).
        ConfigurationError
            An unknown ``task``, or one the labels do not fit (text labels for a numeric
            task, numbers that are not class indices for a classification task, more than
            two classes for ``"binary"``).
        """
        shard_rows = check_shard_rows(shard_rows)
        location = Location.of(path, storage_options)
        _check_attrs(attrs)
        check_task(task)
        cluster = client_for(client, "from_dataframe")
        pieces, rows, shard_format, frame_features = frame_pieces(
            frame, label=label, features=features, weight=weight, offset=offset, one_hot_max_levels=one_hot_max_levels,
            hash_features=hash_features, crosses=list(crosses or []), shard_rows=shard_rows, dtype=dtype,
            compressors=resolve_compressor(compressor), partition_rows=shard_rows, client=cluster, task=task)
        write_on_workers(location, pieces, rows, shard_format, client=cluster,
                         feature_names=frame_features.feature_names,
                         attrs={**dict(frame_features.label_attrs), **(attrs or {})}, overwrite=overwrite,
                         schema_extra={FRAME_FEATURES_KEY: frame_features.to_json()})
        return cls(location)

    @classmethod
    def from_svmlight(
        cls, path: Location | os.PathLike[str] | str, source: str | list[str], *, shard_rows: int,
        n_features: int | None = None, zero_based: bool | str = "auto", client: Any = None,
        block_bytes: int = DEFAULT_BLOCK_BYTES, attrs: dict[str, Any] | None = None, overwrite: bool = False,
        compressor: Any = "default", dtype: Any = None, storage_options: dict[str, Any] | None = None,
    ) -> Self:
        """Write svmlight / LibSVM files (the format the public sparse benchmarks ship in)
        as a sparse dataset, parsed by the workers in byte ranges, in parallel.

        The rows, labels and columns are those ``sklearn.datasets.load_svmlight_files``
        reads from the same files (``n_features``, ``zero_based`` as there); see
        :mod:`dasklbfgs.data.svmlight_input`. ``source``: a path or URL, a glob
        (``s3://bucket/rcv1/*.svm``) or a list of them, read in order; ``storage_options``
        apply to every URL, source or target. Other parameters as in :meth:`from_dask`.
        """
        shard_rows = check_shard_rows(shard_rows)
        location = Location.of(path, storage_options if isinstance(path, Location)
                               else options_for(path, storage_options))
        _check_attrs(attrs)
        cluster = client_for(client, "from_svmlight")
        with svmlight_pieces(
                source, storage_options=storage_options, n_features=n_features, zero_based=zero_based,
                block_bytes=block_bytes, shard_rows=shard_rows, dtype=dtype,
                compressors=resolve_compressor(compressor), client=cluster) as (pieces, rows, shard_format):
            write_on_workers(location, pieces, rows, shard_format, client=cluster, feature_names=None, attrs=attrs,
                             overwrite=overwrite)
        return cls(location)


def unpack_xarray(X: Any, y: Any, feature_names: list[str] | None = None, sample_weight: Any = None,
                  offset: Any = None):
    """``(X, y, feature_names, sample_weight, offset)`` from an ``xarray.Dataset`` with ``X``
    and ``y`` variables (``X`` as (sample, feature)) and optionally ``w`` and ``offset``; other
    inputs pass through unchanged."""
    import xarray as xr

    if not isinstance(X, xr.Dataset):
        return X, y, feature_names, sample_weight, offset
    if y is not None:
        raise ConfigurationError("pass y=None when X is an xarray.Dataset (y is read from it)")
    if missing := [v for v in ("X", "y") if v not in X.data_vars]:
        raise InvalidDataError(
            f"the xarray.Dataset has no data variable(s) {missing}; "
            f"found {sorted(map(str, X.data_vars))}"
        )
    xa = X["X"]
    if set(xa.dims) == {"sample", "feature"}:
        xa = xa.transpose("sample", "feature")
    if "feature" in xa.coords and feature_names is None:
        feature_names = [str(v) for v in xa.coords["feature"].values]
    extras = {"sample_weight": sample_weight, "offset": offset}
    for variable, name in (("w", "sample_weight"), ("offset", "offset")):
        if variable in X.data_vars:
            if extras[name] is not None:
                raise ConfigurationError(f"the xarray.Dataset holds {name} {variable!r}; pass {name}=None")
            extras[name] = X[variable].data
    return xa.data, X["y"].data, feature_names, extras["sample_weight"], extras["offset"]


def _check_attrs(attrs: Any) -> None:
    if attrs is not None:
        if not isinstance(attrs, dict):
            raise ConfigurationError(f"attrs must be a dict, got {type(attrs).__name__}")
        if ATTRS_KEY in attrs:
            raise ConfigurationError(f"attrs key {ATTRS_KEY!r} is reserved for the dataset schema")


def _as_array(a: Any, name: str):
    """Keep dask arrays lazy, turn everything else into numpy."""
    if is_dask_collection(a):
        return a
    try:
        return np.asarray(a)
    except Exception as exc:
        raise InvalidDataError(f"{name} cannot be converted to an array: {exc}") from exc


def _row_blocks(X, y, w, offset, *, shard_rows: int) -> Iterator[tuple[Any, ...]]:
    """Yield (X, y, w, offset) row blocks of one shard each (w, offset None when absent); dask
    inputs are computed block by block.

    A sparse X is never cut here but handed over whole (in memory) or chunk by chunk (dask):
    the writer checks each block before cutting it, and scipy's row slicing would drop an
    out-of-range column index silently.
    """
    def numpy(values: Any) -> Any:
        return None if values is None else np.asarray(values)

    if is_sparse(X):
        yield X, np.asarray(y), numpy(w), numpy(offset)
        return
    if hasattr(X, "dask") and is_sparse(getattr(X, "_meta", None)):
        import dask

        start = 0
        for i in range(X.numblocks[0]):
            rows = slice(start, start + X.chunks[0][i])
            Xb, *rest = dask.compute(X.blocks[i, 0] if X.numblocks[1] == 1 else X.blocks[i].rechunk({1: -1}),
                                     y[rows], cut(w, rows.start, rows.stop), cut(offset, rows.start, rows.stop))
            start += X.chunks[0][i]
            yield Xb, *(numpy(values) for values in rest)
        return
    lazy = any(hasattr(a, "dask") for a in (X, y, w, offset))
    for start in range(0, X.shape[0], shard_rows):
        stop = start + shard_rows
        block = (X[start:stop], y[start:stop], cut(w, start, stop), cut(offset, start, stop))
        if lazy:
            import dask

            block = dask.compute(*block)
        Xb = block[0]
        yield (Xb if is_sparse(Xb) else np.asarray(Xb)), *(numpy(values) for values in block[1:])
