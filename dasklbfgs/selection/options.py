"""The options of model selection, declared once (light: the command line's help reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dasklbfgs.options import Options, option

__all__ = ["PathOptions"]


@dataclass(frozen=True, kw_only=True)
class PathOptions(Options):
    """The penalties of a :func:`regularization_path` (its keywords, the ``dasklbfgs path``
    flags): the values of one penalty to fit at, or the path's own sequence's length and span."""

    solver: ClassVar[str] = "path"

    l1_values: tuple[float, ...] | None = option(
        None, "the l1 penalties to fit at (the model's l2 stays)", "floats", minimum=0, nullable=True,
        none_means="the path's own sequence")
    l2_values: tuple[float, ...] | None = option(
        None, "the l2 penalties to fit at (the model's l1 stays)", "floats", minimum=0, nullable=True,
        none_means="the path's own sequence")
    n_alphas: int = option(50, "penalties in the path's own sequence (no values given)", "int", minimum=1)
    eps: float = option(1e-3, "the smallest penalty of the path's own sequence, as a fraction of the largest",
                        "float", positive=True, below=1.0)
