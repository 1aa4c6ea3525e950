"""Sandblaster checkpoints: the whole L-BFGS state (iterate, gradient, history) after an
iteration, so a restarted coordinator continues to the same result.

Stored through :mod:`dasklbfgs.checkpoint_store` (atomic, checksummed Zarr). With the state
sharded (``state="sharded"``), the coordinator writes the Gram matrix and the scalars,
and each vector shard writes its own slices from its worker into ``shards/<i>`` of the
same checkpoint before it is committed (renamed into place, or named by the manifest at a
URL): the vectors never pass through the coordinator, and a reader sees the whole
checkpoint or the previous one. The workers must reach the checkpoint: a local path on a
local cluster or a shared filesystem, or a URL (they get its storage_options).
"""

from __future__ import annotations

from typing import Any

from dasklbfgs.checkpoint_store import Where, check_same_model, read_checkpoint, write_checkpoint
from dasklbfgs.optim import LBFGSState, LocalBasis
from dasklbfgs.optim.basis import GramMatrix

__all__ = ["save_state", "load_state", "save_sharded_state", "load_sharded_state", "SHARD_KIND"]

KIND = "sandblaster"
SHARDED_KIND = "sandblaster-sharded"
SHARD_KIND = "sandblaster-vector-shard"


def _attrs(state: LBFGSState, model_config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {"model": model_config, **settings, "f": state.f, "nit": state.nit, "nfev": state.nfev,
            "previous_f": state.previous_f, "last_step": state.last_step, "history": state.history,
            "pairs": state.basis.k}


def _state(attrs: dict[str, Any], basis: GramMatrix, x: Any = None, g: Any = None) -> LBFGSState:
    """The inverse of :func:`_attrs`, around a restored ``basis`` (and vectors, when local)."""
    return LBFGSState(
        x=x, f=float(attrs["f"]), g=g, basis=basis, nit=int(attrs["nit"]), nfev=int(attrs["nfev"]),
        previous_f=float(attrs["previous_f"]), last_step=float(attrs["last_step"]), history=list(attrs["history"]),
    )


def save_state(path: Where, state: LBFGSState, *, model_config: dict[str, Any],
               settings: dict[str, Any]) -> None:
    basis, x, g = state.basis, state.x, state.g
    assert isinstance(basis, LocalBasis) and x is not None and g is not None, \
        "a local state holds its vectors (a sharded one is saved by save_sharded_state)"
    write_checkpoint(path, {"x": x, "g": g, "S": basis.S, "Y": basis.Y, "gram": basis._G},
                     kind=KIND, attrs={**_attrs(state, model_config, settings), "slots": basis.slots})


def load_state(path: Where, *, model_config: dict[str, Any], settings: dict[str, Any]) -> LBFGSState:
    """The state saved at ``path``; refuses a checkpoint of another model or settings."""
    arrays, attrs = read_checkpoint(path, kind=KIND)
    check_same_model(path, attrs, model_config, **settings)
    S = arrays["S"]
    basis = LocalBasis(S.shape[1], S.shape[0])
    basis.S, basis.Y, basis._G = S, arrays["Y"], arrays["gram"].copy()  # S and Y are copied into its rows
    basis.k = int(attrs["pairs"])
    basis.slots = [int(i) for i in attrs.get("slots", range(basis.k))]  # written before rows were reused: in order
    basis.g = arrays["g"].copy()
    return _state(attrs, basis, x=arrays["x"].copy(), g=arrays["g"].copy())


def save_sharded_state(path: Where, state: LBFGSState, space: Any, *,
                       model_config: dict[str, Any], settings: dict[str, Any]) -> None:
    """The coordinator's part (Gram matrix, scalars) here; the shards write their slices."""
    write_checkpoint(path, {"gram": state.basis._G}, kind=SHARDED_KIND,
                     attrs={**_attrs(state, model_config, settings), "bounds": space.bounds},
                     parts=space.save_shards)


def load_sharded_state(path: Where, *, model_config: dict[str, Any], settings: dict[str, Any]
                       ) -> tuple[LBFGSState, list[list[int]]]:
    """The coordinator's part of a sharded checkpoint and the shards' bounds; the shards
    read their own parts (:meth:`ShardedSpace.restore`)."""
    arrays, attrs = read_checkpoint(path, kind=SHARDED_KIND)
    check_same_model(path, attrs, model_config, **settings)
    gram = arrays["gram"]
    basis = GramMatrix((gram.shape[0] - 1) // 2)
    basis._G, basis.k = gram.copy(), int(attrs["pairs"])
    return _state(attrs, basis), attrs["bounds"]
