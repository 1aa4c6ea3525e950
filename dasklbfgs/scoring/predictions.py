"""Predictions of a fitted model for every row of a dataset, computed by the workers a
shard each: a lazy dask array (one chunk per shard), or an output written where the data
is, row for row in its order, atomically: a Zarr store chunked like the input's shards, or
a folder of Parquet files, one per shard (:mod:`dasklbfgs.scoring.prediction_formats`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.data._client import client_for
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, OutputExistsError, StoreError
from dasklbfgs.models.contract import as_model
from dasklbfgs.scoring.prediction_formats import (
    FORMATS,
    PREDICTIONS,
    PREDICTIONS_KEY,
    PredictionFormat,
    prediction_format,
)

if TYPE_CHECKING:
    from dasklbfgs.data.sharded import ShardedDataset
    from dasklbfgs.models.base import Model

__all__ = ["FORMATS", "KINDS", "PREDICTIONS", "PREDICTIONS_KEY", "predict"]

#: what ``kind`` asks of the model: its method
KINDS = {"predict": "predict", "proba": "predict_proba", "decision": "decision_function"}


def predict(model: Model, params: Any, data: ShardedDataset | str | os.PathLike[str], *, output: Any = None,
            kind: str = "predict", format: str = "zarr", client: Any = None,
            storage_options: dict[str, Any] | None = None, overwrite: bool = False,
            on_progress: Callable[[int, int], Any] | None = None) -> Any:
    """``model``'s predictions at ``params`` for every row of ``data``, by the workers.

    Parameters
    ----------
    data
        A :class:`~dasklbfgs.data.ShardedDataset`, or the path or URL of one.
    kind
        ``"predict"`` (class labels, values or reconstructions, by the model's task),
        ``"proba"`` (class probabilities, ``(n, K)``) or ``"decision"`` (the scores before
        the link).
    output
        Where to write them: a local path the workers share, or a URL with
        ``storage_options``. Written by the workers (a task per shard) and committed
        atomically: a failed or interrupted write leaves nothing there (and an existing
        output as it was); an existing output needs ``overwrite``. Without it, nothing is
        written.
    format
        The output's format: ``"zarr"``, a Zarr group whose array ``predictions`` is
        chunked like the input's shards, row for row in its order (dimensions ``row``, and
        ``column``); ``"parquet"``, a folder of files ``part-00000.parquet``... one per
        shard, in order, each with the int64 column ``row`` (the row's index in the input)
        then the predictions: ``prediction`` (labels, values), ``proba_0..proba_{K-1}``,
        ``decision`` or ``decision_0..``, ``prediction_0..`` (a reconstruction).
    on_progress
        With ``output``: called as ``on_progress(shards_written, rows_written)`` as each
        shard's task ends (``dasklbfgs predict`` draws its progress line with it).

    Returns
    -------
    Without ``output``, a lazy dask array, one chunk per shard, computed where it is used.
    With it, the written output read lazily: a dask array (``"zarr"``) or a dask DataFrame
    of the Parquet files, one partition per file, in row order (``"parquet"``).

    Raises
    ------
    ConfigurationError
        An unknown ``kind`` or ``format``, a kind the model does not give, or ``format``
        other than ``"zarr"`` without ``output``.
    OutputExistsError
        ``output`` exists and ``overwrite`` was not given (or it is not predictions nor a
        dataset, whatever ``overwrite`` says).
    ModelDataMismatchError
        The model does not read the data's rows, or ``params`` does not fit it.
    """
    import dask
    import dask.array as da

    from dasklbfgs.data.sharded import as_dataset

    model = as_model(model)  # a model of the contract's, wrapped
    method_name = _method_name(model, kind)
    layout = prediction_format(format)
    if output is None and format != "zarr":
        raise ConfigurationError(f"format={format!r} is the format of an output; pass output= (without it the "
                                 "predictions are a lazy dask array)")
    data = as_dataset(data)
    model.check_features(data)
    params = model.check_params(params, "params")
    tail, dtype = _output_shape(model, params, data, method_name)
    if output is None:
        params_ = dask.delayed(params, traverse=False)
        blocks = [da.from_delayed(dask.delayed(_shard_predictions, pure=True)(model, params_, data, index,
                                                                                method_name),
                                  shape=(stop - start, *tail), dtype=dtype)
                  for index, (start, stop) in enumerate(data.shard_bounds)]
        return da.concatenate(blocks, axis=0)
    target = Location.of(output, storage_options)
    output_format = layout(kind=kind, tail=tail, dtype=dtype, n_rows=data.n_samples, shard_rows=data.shard_rows)
    write_predictions(model, params, data, target, method_name, output_format,
                      client=client_for(client, "writing predictions"), overwrite=overwrite, on_progress=on_progress)
    return output_format.read(target)


def write_predictions(model: Model, params: np.ndarray, data: ShardedDataset, target: Location, method_name: str,
                      output_format: PredictionFormat, *, client: Any, overwrite: bool,
                      on_progress: Callable[[int, int], Any] | None = None) -> None:
    """Write the predictions at ``target`` in ``output_format``: the empty output first,
    then a task per shard writes its rows, then the description is committed (see
    :func:`predict`)."""
    import dask

    from dasklbfgs.data._writer import written_atomically
    from dasklbfgs.data.shared_paths import workers_not_seeing
    from dasklbfgs.data.worker_writes import results_once_all_ended

    model.check_workers(client)  # code the workers import (a torch module's factory), before anything is written
    with written_atomically(target, overwrite=overwrite, commit=output_format.commit_key,
                            exists_error=OutputExistsError) as open_target:
        where = open_target()
        blind = workers_not_seeing(client, output_format.prepare(where))
        if blind:
            raise StoreError(f"worker {blind[0]} cannot see the folder this process writes {target.url!r} in: the "
                             "workers write the predictions themselves, so a local path must be on a filesystem "
                             "they share with this process; on a cluster without one, write to a URL (s3://, ...)")
        params_ = dask.delayed(params, traverse=False)
        tasks = [dask.delayed(_write_shard_predictions, pure=False)(model, params_, data, index, method_name,
                                                                    output_format, where)
                 for index in range(data.n_shards)]
        results_once_all_ended(client, client.compute(tasks),
                               None if on_progress is None else _ShardTally(data, on_progress))
        output_format.commit(where, {"kind": output_format.kind, "model": repr(model), "data": data.url,
                                     "n_rows": data.n_samples, "shard_rows": data.shard_rows})


class _ShardTally:
    """Calls ``on_progress(shards, rows)`` with the shards ended so far and their rows, as each ends."""

    def __init__(self, data: ShardedDataset, on_progress: Callable[[int, int], Any]) -> None:
        self.bounds, self.on_progress = data.shard_bounds, on_progress
        self.shards = self.rows = 0

    def __call__(self, index: int) -> None:
        start, stop = self.bounds[index]
        self.shards += 1
        self.rows += stop - start
        self.on_progress(self.shards, self.rows)


def _method_name(model: Model, kind: str) -> str:
    if kind not in KINDS:
        raise ConfigurationError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if not hasattr(model, KINDS[kind]):
        offered = [k for k, name in KINDS.items() if hasattr(model, name)]
        raise ConfigurationError(f"{type(model).__name__} has no {kind!r} predictions (a {model.task} model); its "
                                 f"kinds are {offered}")
    return KINDS[kind]


def _output_shape(model: Model, params: np.ndarray, data: ShardedDataset, method_name: str) -> tuple[tuple[int, ...],
                                                                                             np.dtype]:
    """The shape of one row's prediction and its dtype, from a row of zeros."""
    probe = np.asarray(getattr(model, method_name)(params, np.zeros((1, data.n_features), dtype=data.dtype)))
    return tuple(probe.shape[1:]), probe.dtype


def _shard_predictions(model: Model, params: np.ndarray, data: ShardedDataset, index: int, method_name: str
                       ) -> np.ndarray:
    """Task: the predictions of shard ``index``'s rows (with their offsets, when the data have them)."""
    X, _ = data.load_shard(index)
    offset = data.load_offsets(*data.shard_bounds[index])
    predicted = getattr(model, method_name)
    return np.asarray(predicted(params, X) if offset is None else predicted(params, X, offset))


def _write_shard_predictions(model: Model, params: np.ndarray, data: ShardedDataset, index: int, method_name: str,
                             output_format: PredictionFormat, where: Location) -> int:
    """Task: write shard ``index``'s predictions into the output at ``where``; its rows."""
    values = _shard_predictions(model, params, data, index, method_name)
    output_format.write(where, index, values)
    return len(values)
