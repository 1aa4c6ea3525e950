"""Running a solver from a command, with a progress line when a person is watching."""

from __future__ import annotations

from typing import Any

from distributed import Client
from scipy.optimize import OptimizeResult

from dasklbfgs.models.base import Model
from dasklbfgs.options import Options
from dasklbfgs.solvers.common_options import without_held_out
from dasklbfgs.solvers.registry import get_solver, minimize

__all__ = ["train_with_progress"]


def train_with_progress(client: Client, model: Model, data: Any, solver: str, options: Options, *,
                        eval_data: Any = None, quiet: bool = False) -> OptimizeResult:
    """``minimize`` with a one-line progress display on a terminal (none when ``quiet``)."""
    from dasklbfgs.monitor.progress import Progress

    iterative = get_solver(solver).unit == "iteration"
    total = options.maxiter if iterative else options.max_steps
    progress = Progress(total, solver, enabled=False if quiet else None)

    def show(entry: OptimizeResult) -> None:
        if iterative:
            progress.update(entry.nit, objective=entry.fun)
        else:
            progress.update(entry.step, **{k: entry[k] for k in ("train_loss", "eval_accuracy") if k in entry})

    options = without_held_out(options, eval_data)
    try:
        return minimize(model, data, solver, options, client=client, callback=show, eval_data=eval_data)
    finally:
        progress.close()
