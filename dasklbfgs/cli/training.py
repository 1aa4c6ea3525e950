"""Running a solver from a command, with a progress line when a person is watching."""

from __future__ import annotations

from typing import Any

from distributed import Client
from scipy.optimize import OptimizeResult

from dasklbfgs.cli.interrupt import Interrupt
from dasklbfgs.models.base import Model
from dasklbfgs.options import Options
from dasklbfgs.solvers._replicas.batches import global_steps_per_epoch
from dasklbfgs.solvers.common_options import without_held_out
from dasklbfgs.solvers.registry import Solver, get_solver, minimize

__all__ = ["planned_work", "train_with_progress"]


def planned_work(chosen: Solver, options: Options, data: Any) -> tuple[int | None, int | None]:
    """``(total, per_epoch)`` of the progress line: Sandblaster's budget (``maxiter``, a
    limit); for the replica methods the global steps their epochs take (or ``max_steps``,
    if fewer) and the global steps of one epoch."""
    budget = getattr(options, chosen.budget)
    if chosen.iterative:
        return budget, None
    per_epoch = global_steps_per_epoch(data.n_samples, options.n_replicas, options.batch_size)
    planned = options.epochs * per_epoch
    return (planned if budget is None else min(budget, planned)), per_epoch


def train_with_progress(client: Client, model: Model, data: Any, solver: str, options: Options, *,
                        eval_data: Any = None, quiet: bool = False, interrupt: Interrupt | None = None
                        ) -> OptimizeResult:
    """``minimize`` with a one-line progress display on a terminal (none when ``quiet``),
    stopped at the next iteration or step once ``interrupt`` has seen Ctrl-C."""
    from dasklbfgs.monitor.progress import Progress

    chosen = get_solver(solver)
    total, per_epoch = planned_work(chosen, options, data)
    progress = Progress(total, solver, per_epoch=per_epoch, total_is_limit=chosen.iterative,
                        enabled=False if quiet else None)
    # label -> history key; the replica methods' loss is of recent mini-batches, not the objective
    shown = {"objective" if chosen.iterative else "batch_loss": chosen.loss_key, "eval_accuracy": "eval_accuracy"}

    def show(entry: OptimizeResult) -> None:
        if interrupt is not None:
            interrupt.check()
        fields = {label: entry[key] for label, key in shown.items() if key in entry}
        progress.update(entry[chosen.count_key], **fields)

    options = without_held_out(options, eval_data)
    try:
        return minimize(model, data, solver, options, client=client, callback=show, eval_data=eval_data)
    finally:
        progress.close()
