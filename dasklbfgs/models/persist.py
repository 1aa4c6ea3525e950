"""Saving fitted parameters with their model configuration, atomically, and loading them."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

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


def save_params(path: os.PathLike[str] | str, model: Model, params: np.ndarray, info: dict[str, Any] | None = None
                ) -> Path:
    """Write ``params`` and the model configuration to ``path`` (``.npz``); atomic rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.npz"
    try:
        np.savez(temp, params=np.asarray(params, dtype=np.float64),
                 model=np.array(json.dumps(model_config(model))),
                 info=np.array(json.dumps(info or {}, default=float)))
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    return target


def load_params(path: os.PathLike[str] | str) -> tuple[Model, np.ndarray, dict[str, Any]]:
    """Read a file written by :func:`save_params`: ``(model, params, info)``."""
    try:
        with np.load(path, allow_pickle=False) as f:
            model = model_from_config(json.loads(str(f["model"])))
            params = model.check_params(f["params"], name=f"params in {str(path)!r}")
            info = json.loads(str(f["info"]))
    except (OSError, KeyError, ValueError) as exc:
        if isinstance(exc, DaskLBFGSError):
            raise
        raise DaskLBFGSError(f"{str(path)!r} is not a dasklbfgs parameter file: {exc}") from exc
    return model, params, info
