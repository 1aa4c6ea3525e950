"""Predictions of a fitted model for every row of a dataset, computed by the workers a
shard each: a lazy dask array (one chunk per shard), or a Zarr store written where the
data is, chunked like the input's shards, row for row in its order, atomically.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.data._client import client_for
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, StoreError

if TYPE_CHECKING:
    from dasklbfgs.data.sharded import ShardedDataset
    from dasklbfgs.models.base import Model

__all__ = ["KINDS", "PREDICTIONS", "PREDICTIONS_KEY", "predict"]

#: what ``kind`` asks of the model: its method
KINDS = {"predict": "predict", "proba": "predict_proba", "decision": "decision_function"}
#: the array of a predictions store, and the attribute describing it (committed last)
PREDICTIONS = "predictions"
PREDICTIONS_KEY = "dasklbfgs_predictions"


def predict(model: Model, params: Any, data: ShardedDataset | str | os.PathLike[str], *, output: Any = None,
            kind: str = "predict", client: Any = None, storage_options: dict[str, Any] | None = None,
            overwrite: bool = False) -> Any:
    """``model``'s predictions at ``params`` for every row of ``data``, by the workers.

    ``data``: a :class:`~dasklbfgs.data.ShardedDataset`, or the path or URL of one.
    ``kind``: ``"predict"`` (class labels, values or reconstructions, by the model's task),
    ``"proba"`` (class probabilities, ``(n, K)``) or ``"decision"`` (the scores before the
    link). Without ``output``: a lazy dask array, one chunk per shard, computed where it is
    used. With ``output`` (a local path the workers share, or a URL with
    ``storage_options``): a Zarr group whose array ``predictions`` is chunked like the
    input's shards, row for row in its order, written by the workers (a task per shard)
    and committed atomically (an existing store needs ``overwrite``); returned as a dask
    array reading it.
    """
    import dask
    import dask.array as da

    from dasklbfgs.data.sharded import as_dataset

    method_name = _method_name(model, kind)
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
    write_predictions(model, params, data, target, method_name, kind, tail, dtype,
                      client=client_for(client, "writing predictions"), overwrite=overwrite)
    return da.from_zarr(target.zarr_store(read_only=True), component=PREDICTIONS)


def write_predictions(model: Model, params: np.ndarray, data: ShardedDataset, target: Location, method_name: str,
                      kind: str, tail: tuple[int, ...], dtype: np.dtype, *, client: Any, overwrite: bool) -> None:
    """Write the predictions store at ``target``: the empty array first, then a task per
    shard fills its chunk, then the description is committed (see :func:`predict`)."""
    import dask
    import zarr

    from dasklbfgs.data._writer import written_atomically
    from dasklbfgs.data.shared_paths import workers_not_seeing
    from dasklbfgs.data.worker_writes import results_once_all_ended

    with written_atomically(target, overwrite=overwrite) as open_target:
        where = open_target()
        group = zarr.create_group(store=where.zarr_store(read_only=False), zarr_format=3)
        group.create_array(PREDICTIONS, shape=(data.n_samples, *tail), chunks=(data.shard_rows, *tail), dtype=dtype,
                           dimension_names=("row", *(["column"] if tail else [])))
        blind = workers_not_seeing(client, where / "zarr.json")
        if blind:
            raise StoreError(f"worker {blind[0]} cannot see the folder this process writes {target.url!r} in: the "
                             "workers write the predictions themselves, so a local path must be on a filesystem "
                             "they share with this process; on a cluster without one, write to a URL (s3://, ...)")
        params_ = dask.delayed(params, traverse=False)
        tasks = [dask.delayed(_write_shard_predictions, pure=False)(model, params_, data, index, method_name, where)
                 for index in range(data.n_shards)]
        results_once_all_ended(client, client.compute(tasks))
        group.update_attributes({PREDICTIONS_KEY: {
            "kind": kind, "model": repr(model), "data": data.url, "n_rows": data.n_samples,
            "shard_rows": data.shard_rows}})  # the commit, on an object store


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
    """Task: the predictions of shard ``index``'s rows."""
    X, _ = data.load_shard(index)
    return np.asarray(getattr(model, method_name)(params, X))


def _write_shard_predictions(model: Model, params: np.ndarray, data: ShardedDataset, index: int, method_name: str,
                             where: Location) -> int:
    """Task: write shard ``index``'s predictions into its chunk of the store at ``where``."""
    import zarr

    start, stop = data.shard_bounds[index]
    array = zarr.open_array(where.zarr_store(read_only=False), path=PREDICTIONS, mode="r+", zarr_format=3)
    array[start:stop] = _shard_predictions(model, params, data, index, method_name)
    return stop - start
