"""Saving fitted parameters with their model configuration, atomically, and loading them."""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from typing import Any

import numpy as np

from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, DaskLBFGSError, ModelFileError
from dasklbfgs.models.base import Model
from dasklbfgs.models.contract import as_model
from dasklbfgs.models.registry import CLASSES
from dasklbfgs.models.torch_model import TorchModel

#: The models a parameter file or checkpoint may name: those built by name, and TorchModel
#: (rebuilt from its module factory's import path).
RECORDED = {**CLASSES, TorchModel.name: TorchModel}


def model_config(model: Model) -> dict[str, Any]:
    return {"name": model.name, **model._config()}


def recorded_config(model: Model) -> dict[str, Any]:
    """:func:`model_config` as a parameter file or checkpoint records it (JSON), or a
    :class:`ConfigurationError` when a part of it cannot be recorded (a torch module given
    as an object or a lambda rather than by the import path of its factory)."""
    config = model_config(as_model(model))
    try:
        json.dumps(config)
    except (TypeError, ValueError):
        unrecordable = sorted(k for k, v in config.items() if not _recordable(v))
        hint = (" (a TorchModel is recorded by its module factory's import path: give module='package.module:"
                "factory', a module-level function returning the nn.Module)" if "module" in unrecordable else "")
        raise ConfigurationError(f"{model!r}: its {', '.join(unrecordable)} cannot be written to a "
                                 f"parameter file or checkpoint, which record a model by its configuration"
                                 f"{hint}") from None
    return config


def _recordable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def model_from_config(config: dict[str, Any]) -> Model:
    config = dict(config)
    name = config.pop("name", None)
    if name not in RECORDED:
        raise ConfigurationError(f"unknown model name {name!r}; expected one of {sorted(RECORDED)}")
    try:
        return RECORDED[name](**config)
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
                                "model": np.array(json.dumps(recorded_config(model))),
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


#: what the messages about a file that is not a parameter file say one is
WHAT_A_PARAMETER_FILE_IS = ("a parameter file is the .npz archive that save_params, 'dasklbfgs train --output' and "
                            "the pipelines write: the model's configuration and its parameters")


def load_params(where: Location | os.PathLike[str] | str, *, storage_options: dict[str, Any] | None = None
                ) -> tuple[Model, np.ndarray, dict[str, Any]]:
    """Read a file written by :func:`save_params` (a local path or a URL): ``(model, params, info)``.

    Raises
    ------
    ModelFileError
        Nothing at ``where``, a folder there, or a file that is not a parameter file (another
        archive, a pickle, text), said so rather than in numpy's words.
    ConfigurationError
        A parameter file naming an unknown model, or one whose configuration it rejects.
    """
    location = Location.of(where, storage_options)
    raw = _file_bytes(location)
    not_npz = _not_an_npz(raw)
    if not_npz is not None:
        raise ModelFileError(f"{location.url!r} is not a dasklbfgs parameter file: {not_npz}; "
                             f"{WHAT_A_PARAMETER_FILE_IS}")
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as f:
            missing = [key for key in ("model", "params", "info") if key not in f.files]
            if missing:
                held = sorted(f.files)
                raise ModelFileError(
                    f"{location.url!r} is not a dasklbfgs parameter file: it is an .npz archive without the "
                    f"entries {missing} (it holds {held[:10]}{' ...' if len(held) > 10 else ''}); "
                    f"{WHAT_A_PARAMETER_FILE_IS}")
            model = model_from_config(json.loads(str(f["model"])))
            params = model.check_params(f["params"], name=f"params in {location.url!r}")
            info = json.loads(str(f["info"]))
    except DaskLBFGSError:
        raise
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as exc:
        # numpy's own words advise allow_pickle=True, which a parameter file never needs
        why = "an entry holds Python objects" if "pickle" in str(exc) or "Object arrays" in str(exc) else \
            f"{type(exc).__name__}: {exc}"
        raise ModelFileError(f"{location.url!r} is not a dasklbfgs parameter file: {why}; "
                             f"{WHAT_A_PARAMETER_FILE_IS}") from exc
    return model, params, info


def _file_bytes(location: Location) -> bytes:
    """The bytes of the file at ``location``; nothing there, or a folder, a :class:`ModelFileError`."""
    where = "path" if location.is_local else "URL"
    try:
        return location.read()
    except IsADirectoryError:
        raise ModelFileError(f"{location.url!r} is a folder, not a dasklbfgs parameter file; "
                             f"{WHAT_A_PARAMETER_FILE_IS}") from None
    except FileNotFoundError:
        if not location.is_local and location.children():  # objects below it: a prefix, a "folder"
            raise ModelFileError(f"{location.url!r} is a folder, not a dasklbfgs parameter file; "
                                 f"{WHAT_A_PARAMETER_FILE_IS}") from None
        raise ModelFileError(f"no parameter file at {location.url!r}: nothing is at that {where} (a model is "
                             "saved there by save_params or 'dasklbfgs train --output')") from None
    except PermissionError as exc:
        raise ModelFileError(f"cannot read the parameter file at {location.url!r}: {exc}") from None


def _not_an_npz(raw: bytes) -> str | None:
    """What ``raw`` is if it is not a zip archive (an .npz), in words; None if it is one."""
    if raw.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return None
    if not raw:
        return "it is empty"
    if raw.startswith(b"\x93NUMPY"):
        return "it is a single numpy array (.npy), not an .npz archive"
    if raw[:1] == b"\x80" or raw.startswith((b"(dp", b"(lp", b"}q", b"]q")):
        return "it is a Python pickle, not an .npz archive"
    try:
        raw[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return "it is not an .npz (zip) archive"
    return "it is a text file, not an .npz archive"
