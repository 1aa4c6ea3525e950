"""Make a checkpoint write fail partway, deterministically, for the atomicity tests.

A checkpoint is staged in a temporary Zarr group beside its target and renamed into place
(:func:`dasklbfgs.data._writer.written_aside`). The failures below hit that sequence at
its steps: while the arrays are being created, and at either rename of the final swap.
Only file-level calls in this process are replaced; nothing of Dask is.
"""

from __future__ import annotations

import os
from pathlib import Path

import zarr

# (where, n): fail the n-th zarr array creation, or one of the two renames that publish it
FAILURES = [
    ("create_array", 1),    # nothing of the new checkpoint written yet but its group
    ("create_array", 3),    # some arrays written, the rest and the attributes not
    ("rename", "aside"),    # the previous checkpoint cannot be moved aside
    ("rename", "publish"),  # moved aside, but the new one cannot take its place
]
FAILURE_IDS = ["array-1", "array-3", "rename-aside", "rename-publish"]


class InjectedFailure(OSError):
    """The failure a test injected (an OSError, as a full disk or a lost mount would give)."""


def fail_writes(monkeypatch, target: Path, where: str, n: int | str) -> None:
    """Make the next write of a checkpoint to ``target`` fail at ``(where, n)``."""
    if where == "create_array":
        original = zarr.Group.create_array
        calls = {"n": 0}

        def create_array(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == n:
                raise InjectedFailure(f"array creation {n} failed")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(zarr.Group, "create_array", create_array)
        return
    rename = os.rename

    # "aside" renames the target itself away; "publish" renames the staged copy onto it
    def failing_rename(src, dst, *args, **kwargs):
        name = Path(src).name
        if (n == "aside" and Path(src) == target) or (n == "publish" and name.startswith(f".{target.name}.writing-")):
            raise InjectedFailure(f"rename of {name} failed")
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing_rename)


def tree_bytes(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> contents): the checkpoint bit for bit."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
