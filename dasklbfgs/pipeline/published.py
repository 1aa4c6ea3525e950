"""A staged report folder published to an object store (``--output s3://...``).

An object store has no rename, so the folder cannot appear at once. Each file is one
object put (atomic on S3, GCS and Azure: a reader finds the whole file or none), and
``metrics.json`` goes last: a report at a URL counts once its ``metrics.json`` is there.
Replacing a report (``overwrite``) deletes the old ``metrics.json`` first, so the old
report stops counting before any of its files change; a killed publish leaves files and
no ``metrics.json``, which the next run to that name replaces.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from dasklbfgs.data.location import Location

__all__ = ["COMMIT", "check_writable", "publish"]

#: the file a report at a URL is committed by (written last)
COMMIT = "metrics.json"


def check_writable(parent: Location) -> None:
    """Before the run: a store that refuses writes under ``parent`` (credentials, a missing
    bucket) costs no training."""
    parent.check_writable(f"the report folder {parent.url!r}")


def publish(staging: Path, parent: Location, name: str, *, overwrite: bool) -> Location:
    """Put every file of ``staging`` under ``parent/<name>`` (or the next free ``<name>-N``
    without ``overwrite``), :data:`COMMIT` last; the report's location."""
    target = _destination(parent, name, overwrite)
    if target.exists():  # with overwrite: the old report stops counting first, then goes
        target.remove(COMMIT)
        target.remove()
    files = sorted((p for p in staging.rglob("*") if p.is_file()), key=lambda p: p.name == COMMIT)
    try:
        for path in files:
            target.put(path.relative_to(staging).as_posix(), path.read_bytes())
    except BaseException:
        with contextlib.suppress(Exception):  # the failed put's own error is the one to hear
            target.remove()
        raise
    return target


def _destination(parent: Location, name: str, overwrite: bool) -> Location:
    """``parent/<name>``, or without ``overwrite`` the first ``<name>-N`` holding nothing."""
    if overwrite:
        return parent / name
    number = 1
    while True:
        target = parent / (name if number == 1 else f"{name}-{number}")
        if not target.exists():
            return target
        number += 1
