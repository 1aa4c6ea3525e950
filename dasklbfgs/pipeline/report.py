"""A pipeline's report folder: what ``metrics.json`` records, and a folder that is written
whole or not at all and never silently replaces an earlier report.

A report is written into a hidden staging folder beside its destination and renamed into
place at the end. Without ``overwrite`` a report whose folder exists goes to the next free
``<name>-2``, ``<name>-3``, ...; with it, the earlier report is replaced only once the new
one is complete. At a URL (an object store, no rename) the report is staged in a local
temporary folder and published file by file, ``metrics.json`` last
(:mod:`dasklbfgs.pipeline.published`).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import platform
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.pipeline.published import check_writable, publish

__all__ = ["versions", "resolved_config", "utc_now", "staged_report"]


def versions() -> dict[str, str]:
    """Python's and every installed runtime dependency's version (from the package metadata,
    so the list follows ``pyproject.toml``), dasklbfgs first."""
    found = {"dasklbfgs": importlib.metadata.version("dasklbfgs"), "python": platform.python_version()}
    for requirement in importlib.metadata.requires("dasklbfgs") or ():
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


def resolved_config(config: dict[str, Any]) -> dict[str, Any]:
    """A validated config (:func:`~dasklbfgs.pipeline.load_config`) as JSON data: every key
    with its value or default, the solver's options all spelled out."""
    train = config["train"]
    resolved: dict[str, Any] = {**{section: None if values is None else dict(values)
                                   for section, values in config.items() if section != "train"},
                "train": {"solver": train["solver"], **train["options"].to_json()}}
    if "storage_options" in config:  # their names only: credentials stay out of reports
        resolved["storage_options"] = sorted(config["storage_options"])
    return resolved


def utc_now() -> str:
    """The time now, ISO 8601 in UTC to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def staged_report(output: Location | os.PathLike[str] | str, name: str, *, overwrite: bool,
                  storage_options: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Yield ``{"staging": folder}`` to write the report into; on a clean exit it is renamed
    to its destination (a URL: published there), stored under ``"path"`` (a ``Path``, or
    the URL); on an error it is removed."""
    location = Location.of(output, storage_options)
    if not location.is_local:
        with _staged_for_url(location, name, overwrite) as published:
            yield published
        return
    parent = location.path
    staging = parent / f".{name}.partial-{uuid.uuid4().hex[:8]}"
    try:  # before the run starts, so a folder that cannot be written costs no training
        parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
    except OSError as exc:
        raise ConfigurationError(
            f"the report folder {str(parent)!r} cannot be written: {exc.strerror or exc}") from None
    folders: dict[str, Any] = {"staging": staging}
    try:
        yield folders
        folders["path"] = _publish(staging, parent, name, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _staged_for_url(parent: Location, name: str, overwrite: bool) -> Iterator[dict[str, Any]]:
    check_writable(parent)  # before the run starts, like the local folder's check
    with tempfile.TemporaryDirectory(prefix=f"dasklbfgs-{name}-") as staging:
        folders: dict[str, Any] = {"staging": Path(staging)}
        yield folders
        folders["path"] = publish(Path(staging), parent, name, overwrite=overwrite).url


def _publish(staging: Path, parent: Path, name: str, overwrite: bool) -> Path:
    target = parent / name
    if overwrite and target.exists():
        old = parent / f".{name}.replaced-{uuid.uuid4().hex[:8]}"
        target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
        return target
    number = 1
    while True:  # rename fails if another run took the name first: try the next one
        target = parent / (name if number == 1 else f"{name}-{number}")
        if not target.exists():
            try:
                staging.rename(target)
                return target
            except OSError:
                if not target.exists():
                    raise
        number += 1
