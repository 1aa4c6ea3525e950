"""How written predictions are laid out: a Zarr group's array chunked like the input's
shards, or a folder of Parquet files, one per shard, with a ``row`` column.

A format is made by the client for one write; it creates the empty output
(:meth:`PredictionFormat.prepare`), the workers write a shard each into it
(:meth:`~PredictionFormat.write`, in a task), the client commits it
(:meth:`~PredictionFormat.commit`: the object it puts is what makes a write at a URL count)
and reads it back lazily (:meth:`~PredictionFormat.read`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dasklbfgs.data.location import FILES_COMMIT, Location
from dasklbfgs.errors import ConfigurationError

__all__ = ["FORMATS", "PREDICTIONS", "PREDICTIONS_KEY", "ROW", "ParquetPredictions", "PredictionFormat",
           "ZarrPredictions", "prediction_columns", "prediction_format"]

#: the array of a predictions store
PREDICTIONS = "predictions"
#: the description of written predictions: the Zarr group's attribute, the Parquet folder's manifest key
PREDICTIONS_KEY = "dasklbfgs_predictions"
#: a row's index in the input: the Zarr array's first dimension, the Parquet files' first column
ROW = "row"
#: the stem of the prediction columns, by kind (see :func:`prediction_columns`)
COLUMN_STEMS = {"predict": "prediction", "proba": "proba", "decision": "decision"}


def prediction_columns(kind: str, tail: tuple[int, ...]) -> list[str]:
    """The column names of one row's prediction of ``kind`` whose shape is ``tail``: one
    value is ``prediction`` (a label or value) or ``decision``; a vector is
    ``proba_0..proba_{K-1}``, ``decision_0..`` or ``prediction_0..`` (a reconstruction)."""
    stem = COLUMN_STEMS[kind]
    if not tail:
        return [stem]
    if len(tail) > 1:
        raise ConfigurationError(f"{kind!r} predictions of shape {tail} per row do not fit columns; write them with "
                                 "format='zarr'")
    return [f"{stem}_{j}" for j in range(tail[0])]


@dataclass(frozen=True)
class PredictionFormat(ABC):
    """The layout of the predictions of ``kind``, ``tail`` (one row's shape) of ``dtype``, for
    ``n_rows`` rows in shards of ``shard_rows``; picklable (the tasks take it)."""

    kind: str
    tail: tuple[int, ...]
    dtype: np.dtype
    n_rows: int
    shard_rows: int
    #: the object whose presence commits a write at a URL (put last)
    commit_key: ClassVar[str]

    @abstractmethod
    def prepare(self, where: Location) -> Location:
        """Create the empty output at ``where``; the file or folder every worker must see."""

    @abstractmethod
    def write(self, where: Location, index: int, values: np.ndarray) -> None:
        """(In a task) write shard ``index``'s predictions ``values`` into the output at ``where``."""

    @abstractmethod
    def commit(self, where: Location, description: dict[str, Any]) -> None:
        """Record ``description`` in the output at ``where``, last: the write's commit."""

    @abstractmethod
    def read(self, target: Location) -> Any:
        """The committed output at ``target``, read lazily."""


class ZarrPredictions(PredictionFormat):
    """A Zarr group whose array ``predictions`` has a chunk per shard, row for row, with
    dimensions ``row`` (and ``column``); the description is the group's attribute."""

    commit_key = "zarr.json"

    def prepare(self, where: Location) -> Location:
        import zarr

        group = zarr.create_group(store=where.zarr_store(read_only=False), zarr_format=3)
        group.create_array(PREDICTIONS, shape=(self.n_rows, *self.tail), chunks=(self.shard_rows, *self.tail),
                           dtype=self.dtype, dimension_names=(ROW, *(["column"] if self.tail else [])))
        return where / "zarr.json"

    def write(self, where: Location, index: int, values: np.ndarray) -> None:
        import zarr

        array = zarr.open_array(where.zarr_store(read_only=False), path=PREDICTIONS, mode="r+", zarr_format=3)
        start = index * self.shard_rows
        array[start:start + len(values)] = values

    def commit(self, where: Location, description: dict[str, Any]) -> None:
        import zarr

        from dasklbfgs.data._writer import commit_group

        group = zarr.open_group(store=where.zarr_store(read_only=False), mode="r+", zarr_format=3)
        # one put of the root zarr.json, the array's metadata consolidated in it (xarray.open_zarr looks for it)
        commit_group(group, {PREDICTIONS_KEY: description})

    def read(self, target: Location) -> Any:
        import dask.array as da

        return da.from_zarr(target.zarr_store(read_only=True), component=PREDICTIONS)


@dataclass(frozen=True)  # its own __init__, which calls its __post_init__
class ParquetPredictions(PredictionFormat):
    """A folder of Parquet files, ``part-00000.parquet`` and on, one per shard in order, each
    with the int64 column ``row`` (the row's index in the input), then the prediction
    columns (:func:`prediction_columns`); the description is the manifest
    :data:`~dasklbfgs.data.location.FILES_COMMIT`, which Parquet readers skip."""

    commit_key = FILES_COMMIT

    @property
    def columns(self) -> list[str]:
        return prediction_columns(self.kind, self.tail)

    @property
    def files(self) -> list[str]:
        """The file of each shard, named so that their order by name is the rows' order."""
        n_shards = -(-self.n_rows // self.shard_rows)
        width = max(5, len(str(n_shards - 1)))
        return [f"part-{index:0{width}d}.parquet" for index in range(n_shards)]

    def __post_init__(self) -> None:
        prediction_columns(self.kind, self.tail)  # predictions that fit no columns: refused before any work

    def prepare(self, where: Location) -> Location:
        if where.is_local:  # an object store has no folders
            where.path.mkdir(parents=True)
        return where

    def write(self, where: Location, index: int, values: np.ndarray) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        start = index * self.shard_rows
        values = values.reshape(len(values), -1)
        table = pa.table({ROW: np.arange(start, start + len(values), dtype=np.int64),
                          **{name: values[:, j] for j, name in enumerate(self.columns)}})
        fs, path = where.filesystem()
        with fs.open(f"{path}/{self.files[index]}", "wb") as file:
            pq.write_table(table, file)

    def commit(self, where: Location, description: dict[str, Any]) -> None:
        where.put(FILES_COMMIT, json.dumps({PREDICTIONS_KEY: {**description, "columns": [ROW, *self.columns],
                                                              "files": self.files}}, indent=2).encode())

    def read(self, target: Location) -> Any:
        import dask.dataframe as dd

        return dd.read_parquet(target.url, storage_options=target.storage_options or None)


#: the formats of written predictions, by name
FORMATS: dict[str, type[PredictionFormat]] = {"zarr": ZarrPredictions, "parquet": ParquetPredictions}


def prediction_format(name: str) -> type[PredictionFormat]:
    """The format called ``name``; another name is a :class:`ConfigurationError`."""
    if name not in FORMATS:
        raise ConfigurationError(f"format must be one of {list(FORMATS)}, got {name!r}")
    return FORMATS[name]
