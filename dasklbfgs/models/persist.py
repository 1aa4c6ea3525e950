"""Saving fitted parameters with their model configuration, atomically, and loading them."""

from __future__ import annotations

import io
import json
import os
import uuid
from typing import Any

import numpy as np

from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, DaskLBFGSError
from dasklbfgs.models.base import Model
from dasklbfgs.models.registry import CLASSES


def model_config(model: Model) -> dict[str, Any]:
    return {"name": model.name, **model._config()}


def model_from_config(config: dict[str, Any]) -> Model:
    config = dict(config)
    name = config.pop("name", None)
    if name not in CLASSES:
        raise ConfigurationError(f"unknown model name {name!r}; expected one of {sorted(CLASSES)}")
    try:
        return CLASSES[name](**config)
    except TypeError as exc:
        raise ConfigurationError(f"bad configuration for model {name!r}: {exc}") from None


def save_params(where: Location | os.PathLike[str] | str, model: Model, params: np.ndarray,
                info: dict[str, Any] | None = None, *, storage_options: dict[str, Any] | None = None,
                arrays: dict[str, np.ndarray] | None = None) -> Location:
    """Write ``params`` and the model configuration as one ``.npz`` file at ``where``, a
    local path or a URL (``s3://bucket/model.npz``, reached with ``storage_options``), with
    ``arrays`` beside them if given (a regularization path's: its penalties and coefficients).

    Atomic either way: a local file is written beside its target and renamed into place;
    at a URL the file is one object put (atomic on S3, GCS and Azure: readers find the old
    object or the whole new one), so a cluster with no shared filesystem can keep its
    models in the object store its data lives in. Returns the file's location.
    """
    reserved = sorted(set(arrays or ()) & {"params", "model", "info"})
    if reserved:
        raise ConfigurationError(f"arrays saved beside a model cannot be named {', '.join(reserved)}: the model's "
                                 "own entries are")
    target = Location.of(where, storage_options)
    buffer = io.BytesIO()
    contents: dict[str, Any] = {**(arrays or {}), "params": np.asarray(params, dtype=np.float64),
                                "model": np.array(json.dumps(model_config(model))),
                                "info": np.array(json.dumps(info or {}, default=float))}
    np.savez(buffer, **contents)
    if not target.is_local:
        target.put("", buffer.getvalue())
        return target
    path = target.path
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.npz"
    try:
        temp.write_bytes(buffer.getvalue())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return target


def load_params(where: Location | os.PathLike[str] | str, *, storage_options: dict[str, Any] | None = None
                ) -> tuple[Model, np.ndarray, dict[str, Any]]:
    """Read a file written by :func:`save_params` (a local path or a URL): ``(model, params, info)``."""
    location = Location.of(where, storage_options)
    try:
        with np.load(io.BytesIO(location.read()), allow_pickle=False) as f:
            model = model_from_config(json.loads(str(f["model"])))
            params = model.check_params(f["params"], name=f"params in {location.url!r}")
            info = json.loads(str(f["info"]))
    except (OSError, KeyError, ValueError) as exc:
        if isinstance(exc, DaskLBFGSError):
            raise
        raise DaskLBFGSError(f"{location.url!r} is not a dasklbfgs parameter file: {exc}") from exc
    return model, params, info
