"""Atomic, verified checkpoints: named numpy arrays and JSON attributes in one Zarr group,
at a local path or any fsspec URL (:class:`~dasklbfgs.data.location.Location`).

A reader finds the previous checkpoint or the new one, never a mixture, and a process
killed mid-write leaves the previous one intact:

* at a local path the checkpoint is written beside its target and renamed into place;
* an object store has no rename, so each write goes under a fresh version prefix
  (``<checkpoint>/v-<id>/``) and is committed by one small object put last, the manifest
  (``<checkpoint>/dasklbfgs-checkpoint.json``, one put: atomic on S3, GCS and Azure), which
  names the current version. Readers read only the version the manifest names; the
  previous version is deleted only after the new manifest is in place; a killed writer
  leaves an unreferenced prefix, which no reader looks at and the next write deletes.

Every array's SHA-256 is stored with it and checked on reading, so a truncated or
corrupted checkpoint is refused as a whole instead of half-loaded. One writer per
checkpoint at a time (a run writes its own); docs/guide.md, "Checkpoints and reports on
object stores".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import zarr

from dasklbfgs.data._writer import written_aside
from dasklbfgs.data.location import Location
from dasklbfgs.errors import CheckpointError, DatasetExistsError, ModelDataMismatchError, StoreError

__all__ = ["CheckpointError", "write_checkpoint", "read_checkpoint", "checkpoint_exists", "checkpoint_root"]

FORMAT = 1
KEY = "dasklbfgs_checkpoint"
#: the object that commits a checkpoint on an object store: it names the current version
MANIFEST = "dasklbfgs-checkpoint.json"
_VERSION = re.compile(r"^v-[0-9a-f]{12}$")

#: where a checkpoint is: a local path, a URL, or a Location (a URL with its storage_options)
Where = Location | os.PathLike[str] | str


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def write_checkpoint(where: Where, arrays: dict[str, np.ndarray], *, kind: str, attrs: dict[str, Any],
                     parts: Callable[[Location], None] | None = None) -> Location:
    """Write ``arrays`` (names may contain ``/`` for groups) and ``attrs`` to ``where``.

    ``parts(group)`` may write more into the checkpoint's group before it is committed (for
    instance, other processes' own checkpoints below it, each reaching ``group`` with its
    storage options): the commit then publishes everything at once, or nothing if ``parts``
    fails.
    """
    target = Location.of(where)
    if target.is_local:
        # Replaces an older checkpoint, never anything else.
        with written_aside(target.path, overwrite=True) as temp:
            _write_group(Location(str(temp)), arrays, kind, attrs, parts)
        return target
    _check_replaceable(target)
    version = f"v-{uuid.uuid4().hex[:12]}"
    try:
        _write_group(target / version, arrays, kind, attrs, parts)
    except BaseException:
        with contextlib.suppress(Exception):  # the write's own error is the one to hear
            (target / version).remove()
        raise
    manifest = {KEY: {"format": FORMAT, "kind": kind, "version": version}}
    target.put(MANIFEST, json.dumps(manifest).encode())  # the commit
    for name in target.children():  # the previous version, and what killed writers left
        if name not in (MANIFEST, version):
            with contextlib.suppress(StoreError, FileNotFoundError):  # left for the next write
                target.remove(name)
    return target


def _write_group(group_at: Location, arrays: dict[str, np.ndarray], kind: str, attrs: dict[str, Any],
                 parts: Callable[[Location], None] | None) -> None:
    group = zarr.create_group(store=group_at.zarr_store(read_only=False), zarr_format=3)
    if parts is not None:
        parts(group_at)
    digests = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        group.create_array(name, data=value, compressors=None)
        digests[name] = [_digest(value), str(value.dtype), list(value.shape)]
    # one metadata write (attrs.update rewrites zarr.json once per key: a request each on an object store)
    group.update_attributes({KEY: {"format": FORMAT, "kind": kind, "arrays": digests}, **attrs})


def _check_replaceable(target: Location) -> None:
    """Refuse to write a checkpoint over objects that are not one (at a URL): only a
    manifest and version prefixes may be there."""
    others = [name for name in target.children() if name != MANIFEST and not _VERSION.match(name)]
    if others:
        raise DatasetExistsError(f"refusing to overwrite {target.url!r} with a checkpoint: it holds objects that "
                                 f"are not a dasklbfgs checkpoint ({others[:5]}); choose another checkpoint URL")


def checkpoint_exists(where: Where) -> bool:
    """Whether there is a checkpoint at ``where`` to resume from: the folder (local), or a
    committed manifest (URL: a write killed before its commit leaves none)."""
    location = Location.of(where)
    return location.exists(MANIFEST if not location.is_local else "")


def checkpoint_root(where: Where) -> Location:
    """The Zarr group of the checkpoint at ``where``: the folder itself (local), or the
    version its manifest names (URL)."""
    location = Location.of(where)
    if location.is_local:
        return location
    try:
        meta = json.loads(location.read(MANIFEST))[KEY]
        version = meta["version"]
    except FileNotFoundError:
        raise CheckpointError(f"no readable checkpoint at {location.url!r}: it has no {MANIFEST} (a write that did "
                              "not finish leaves none)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{location.url}/{MANIFEST} is not a dasklbfgs checkpoint manifest "
                              f"({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(version, str) \
            or not _VERSION.match(version):
        raise CheckpointError(f"{location.url}/{MANIFEST} is not a dasklbfgs checkpoint manifest of format {FORMAT}")
    return location / version


def read_checkpoint(where: Where, *, kind: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and attributes of a checkpoint of ``kind``, every array verified."""
    root = checkpoint_root(where)
    at = root.url
    try:
        group = zarr.open_group(root.zarr_store(read_only=True), mode="r", zarr_format=3)
        attrs = dict(group.attrs)
    except Exception as exc:
        raise CheckpointError(f"no readable checkpoint at {at!r}: {exc}") from exc
    meta = attrs.pop(KEY, None)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{at!r} is not a dasklbfgs checkpoint")
    if meta.get("kind") != kind:
        raise CheckpointError(f"{at!r} is a {meta.get('kind')} checkpoint, not a {kind} checkpoint")
    arrays = {}
    for name, (digest, dtype, shape) in meta["arrays"].items():
        try:
            # a name the checkpoint lists as an array; a group there fails here, as a read error
            value = np.asarray(cast(zarr.Array, group[name])[...])
        except Exception as exc:
            raise CheckpointError(f"checkpoint {at!r}: array {name!r} cannot be read ({exc})") from exc
        if str(value.dtype) != dtype or list(value.shape) != shape or _digest(value) != digest:
            raise CheckpointError(
                f"checkpoint {at!r}: array {name!r} does not match its recorded checksum "
                "(truncated or corrupted); refusing to load any of it"
            )
        arrays[name] = value
    return arrays, attrs


def check_same_model(where: Where, attrs: dict[str, Any], model_config: dict[str, Any], **expected: Any) -> None:
    """Refuse a checkpoint written for another model or other settings."""
    if attrs.get("model") != model_config:
        raise ModelDataMismatchError(f"checkpoint {str(where)!r} is of model {attrs.get('model')}, not {model_config}")
    for key, value in expected.items():
        if attrs.get(key) != value:
            raise ModelDataMismatchError(
                f"checkpoint {str(where)!r} was written with {key}={attrs.get(key)!r}, not {value!r}"
            )
