"""Atomic, verified checkpoints: named numpy arrays and JSON attributes in one Zarr group.

A checkpoint is written beside its target and renamed into place, so a reader finds the
previous checkpoint or the new one, never a mixture; a process killed mid-write leaves
the previous one intact. Every array's SHA-256 is stored with it and checked on reading,
so a truncated or corrupted checkpoint is refused as a whole instead of half-loaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import zarr

from dasklbfgs.data._writer import written_aside
from dasklbfgs.errors import CheckpointError, ModelDataMismatchError

__all__ = ["CheckpointError", "write_checkpoint", "read_checkpoint"]

FORMAT = 1
KEY = "dasklbfgs_checkpoint"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def write_checkpoint(path: os.PathLike[str] | str, arrays: dict[str, np.ndarray], *, kind: str,
                     attrs: dict[str, Any], parts: Callable[[Path], None] | None = None) -> Path:
    """Write ``arrays`` (names may contain ``/`` for groups) and ``attrs`` to ``path``.

    ``parts(temp)`` may write more into the checkpoint before it is renamed into place
    (for instance, other processes' own checkpoints in sub-directories): the rename then
    publishes everything at once, or nothing if ``parts`` fails.
    """
    target = Path(path)
    # Replaces an older checkpoint, never anything else.
    with written_aside(target, overwrite=True) as temp:
        group = zarr.create_group(store=str(temp), zarr_format=3)
        if parts is not None:
            parts(temp)
        digests = {}
        for name, value in arrays.items():
            value = np.asarray(value)
            group.create_array(name, data=value, compressors=None)
            digests[name] = [_digest(value), str(value.dtype), list(value.shape)]
        group.attrs.update({KEY: {"format": FORMAT, "kind": kind, "arrays": digests}, **attrs})
    return target


def read_checkpoint(path: os.PathLike[str] | str, *, kind: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and attributes of a checkpoint of ``kind``, every array verified."""
    where = str(path)
    try:
        group = zarr.open_group(where, mode="r", zarr_format=3)
        attrs = dict(group.attrs)
    except Exception as exc:
        raise CheckpointError(f"no readable checkpoint at {where!r}: {exc}") from exc
    meta = attrs.pop(KEY, None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{where!r} is not a dasklbfgs checkpoint")
    if meta.get("kind") != kind:
        raise CheckpointError(f"{where!r} is a {meta.get('kind')} checkpoint, not a {kind} checkpoint")
    arrays = {}
    for name, (digest, dtype, shape) in meta["arrays"].items():
        try:
            # a name the checkpoint lists as an array; a group there fails here, as a read error
            value = np.asarray(cast(zarr.Array, group[name])[...])
        except Exception as exc:
            raise CheckpointError(f"checkpoint {where!r}: array {name!r} cannot be read ({exc})") from exc
        if str(value.dtype) != dtype or list(value.shape) != shape or _digest(value) != digest:
            raise CheckpointError(
                f"checkpoint {where!r}: array {name!r} does not match its recorded checksum "
                "(truncated or corrupted); refusing to load any of it"
            )
        arrays[name] = value
    return arrays, attrs


def check_same_model(path: os.PathLike[str] | str, attrs: dict[str, Any], model_config: dict[str, Any],
                     **expected: Any) -> None:
    """Refuse a checkpoint written for another model or other settings."""
    if attrs.get("model") != model_config:
        raise ModelDataMismatchError(f"checkpoint {str(path)!r} is of model {attrs.get('model')}, not {model_config}")
    for key, value in expected.items():
        if attrs.get(key) != value:
            raise ModelDataMismatchError(
                f"checkpoint {str(path)!r} was written with {key}={attrs.get(key)!r}, not {value!r}"
            )
