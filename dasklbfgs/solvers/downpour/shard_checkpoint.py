"""Downpour checkpoints: every parameter shard's slice and optimizer state.

Stored through :mod:`dasklbfgs.checkpoint_store` (atomic, checksummed Zarr, at a path or a URL); loading checks
that the checkpoint belongs to the same model and update rule.
"""

from __future__ import annotations

from typing import Any

from dasklbfgs.checkpoint_store import Where, check_same_model, read_checkpoint, write_checkpoint
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ModelDataMismatchError

__all__ = ["write_shard_states", "read_shard_states"]

KIND = "downpour"
FIELDS = ("index", "start", "stop", "version", "steps")


def write_shard_states(path: Where, states: list[dict[str, Any]], *, model_config: dict[str, Any],
                       rule: str, hyper: dict[str, Any], extra: dict[str, Any]) -> Location:
    """Write the shard ``states`` (from ``ParameterShard.get_state``) to ``path``."""
    arrays = {}
    for state in states:
        arrays[f"shard-{state['index']}/values"] = state["values"]
        for key, value in state["optimizer_state"].items():
            arrays[f"shard-{state['index']}/state-{key}"] = value
    attrs = {
        "model": model_config, "rule": rule, "hyper": hyper,
        "shards": [{**{k: int(s[k]) for k in FIELDS}, "steps_by_replica": s.get("steps_by_replica", {})}
                   for s in states],
        "optimizer_keys": sorted(states[0]["optimizer_state"]), **extra,
    }
    return write_checkpoint(path, arrays, kind=KIND, attrs=attrs)


def read_shard_states(path: Where, *, model_config: dict[str, Any], rule: str
                      ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Shard states and attributes; refuses a checkpoint of another model or rule."""
    arrays, attrs = read_checkpoint(path, kind=KIND)
    check_same_model(path, attrs, model_config)
    if attrs["rule"] != rule:
        raise ModelDataMismatchError(
            f"checkpoint {str(path)!r} was trained with optimizer {attrs['rule']!r}, not {rule!r}"
        )
    states = []
    for fields in attrs["shards"]:
        i = fields["index"]
        states.append({
            **fields,
            "values": arrays[f"shard-{i}/values"],
            "optimizer_state": {k: arrays[f"shard-{i}/state-{k}"] for k in attrs["optimizer_keys"]},
        })
    return states, attrs
