"""Sandblaster checkpoints: the whole L-BFGS state (iterate, gradient, history) after an
iteration, so a restarted coordinator continues to the same result.

Stored through :mod:`dasklbfgs.checkpoints` (atomic, checksummed Zarr).
"""

from __future__ import annotations

import os
from typing import Any

from dasklbfgs.checkpoints import check_same_model, read_checkpoint, write_checkpoint
from dasklbfgs.optim import LBFGSState, LocalBasis

__all__ = ["save_state", "load_state"]

KIND = "sandblaster"


def save_state(path: os.PathLike[str] | str, state: LBFGSState, *, model_config: dict[str, Any],
               settings: dict[str, Any]) -> None:
    basis = state.basis
    write_checkpoint(
        path,
        {"x": state.x, "g": state.g, "S": basis.S, "Y": basis.Y, "gram": basis._G},
        kind=KIND,
        attrs={
            "model": model_config, **settings,
            "f": state.f, "nit": state.nit, "nfev": state.nfev,
            "previous_f": state.previous_f, "last_step": state.last_step,
            "pairs": basis.k, "history": state.history,
        },
    )


def load_state(path: os.PathLike[str] | str, *, model_config: dict[str, Any], settings: dict[str, Any]) -> LBFGSState:
    """The state saved at ``path``; refuses a checkpoint of another model or settings."""
    arrays, attrs = read_checkpoint(path, kind=KIND)
    check_same_model(path, attrs, model_config, **settings)
    S = arrays["S"]
    basis = LocalBasis(S.shape[1], S.shape[0])
    basis.S, basis.Y, basis._G = S.copy(), arrays["Y"].copy(), arrays["gram"].copy()
    basis.k = int(attrs["pairs"])
    basis.g = arrays["g"].copy()
    return LBFGSState(
        x=arrays["x"].copy(), f=float(attrs["f"]), g=arrays["g"].copy(), basis=basis,
        nit=int(attrs["nit"]), nfev=int(attrs["nfev"]), previous_f=float(attrs["previous_f"]),
        last_step=float(attrs["last_step"]), history=list(attrs["history"]),
    )
