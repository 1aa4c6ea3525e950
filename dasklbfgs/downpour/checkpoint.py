"""Downpour checkpoints: every shard's slice and optimizer state in one Zarr group.

Written aside and renamed into place, so a reader sees the previous checkpoint or the new
one, never a mixture. Loading checks that the checkpoint belongs to the same model and
update rule before anything is used.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from dasklbfgs.data._writer import check_target, replace_path
from dasklbfgs.errors import DaskLBFGSError, ModelDataMismatchError

__all__ = ["write_checkpoint", "read_checkpoint", "CheckpointError"]

FORMAT = 1


class CheckpointError(DaskLBFGSError):
    """A checkpoint is missing, unreadable or inconsistent."""


def write_checkpoint(path: os.PathLike[str] | str, states: list[dict[str, Any]], *, model_config: dict[str, Any],
                     rule: str, hyper: dict[str, Any], extra: dict[str, Any]) -> Path:
    """Write the shard ``states`` (from ``ParameterShard.get_state``) to ``path`` atomically."""
    target = Path(path)
    check_target(target, overwrite=True)  # replaces an older checkpoint, never anything else
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.writing-{uuid.uuid4().hex[:8]}"
    try:
        group = zarr.create_group(store=str(temp), zarr_format=3)
        for state in states:
            shard = group.create_group(f"shard-{state['index']}")
            shard.create_array("values", data=state["values"])
            for key, value in state["optimizer_state"].items():
                shard.create_array(f"state-{key}", data=np.asarray(value))
            shard.attrs.update({k: int(state[k]) for k in ("index", "start", "stop", "version", "steps")})
        group.attrs.update({
            "dasklbfgs_checkpoint": FORMAT,
            "model": model_config, "rule": rule, "hyper": hyper,
            "n_shards": len(states), **extra,
        })
        replace_path(temp, target)
    except BaseException:
        import shutil

        shutil.rmtree(temp, ignore_errors=True)
        raise
    return target


def read_checkpoint(path: os.PathLike[str] | str, *, model_config: dict[str, Any], rule: str
                    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Shard states and group attributes; refuses a checkpoint of another model or rule."""
    try:
        group = zarr.open_group(str(path), mode="r", zarr_format=3)
        attrs = dict(group.attrs)
    except Exception as exc:
        raise CheckpointError(f"no readable checkpoint at {str(path)!r}: {exc}") from exc
    if attrs.get("dasklbfgs_checkpoint") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not a dasklbfgs Downpour checkpoint")
    if attrs["model"] != model_config:
        raise ModelDataMismatchError(
            f"checkpoint {str(path)!r} is of model {attrs['model']}, not {model_config}"
        )
    if attrs["rule"] != rule:
        raise ModelDataMismatchError(
            f"checkpoint {str(path)!r} was trained with optimizer {attrs['rule']!r}, not {rule!r}"
        )
    states = []
    for i in range(int(attrs["n_shards"])):
        shard = group[f"shard-{i}"]
        state = {k: int(v) for k, v in shard.attrs.items()}
        state["values"] = np.asarray(shard["values"][:])
        state["optimizer_state"] = {
            name[len("state-"):]: np.asarray(shard[name][...])
            for name in shard.array_keys() if name.startswith("state-")
        }
        states.append(state)
    return states, attrs
