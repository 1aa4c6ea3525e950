"""Running a solver from a command, with a progress line when a person is watching."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dasklbfgs.cli.interrupt import Interrupt
from dasklbfgs.errors import ConvergenceWarning
from dasklbfgs.solvers.common_options import without_held_out
from dasklbfgs.solvers.registry import get_solver, minimize

if TYPE_CHECKING:
    from distributed import Client
    from scipy.optimize import OptimizeResult

    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model
    from dasklbfgs.options import Options

__all__ = ["endings_in_the_report", "train_with_progress"]


@contextlib.contextmanager
def endings_in_the_report() -> Iterator[None]:
    """A run that did not succeed says so in the command's report (its ``stopped`` line or
    ``message``) and its exit code, not in a Python warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def train_with_progress(client: Client, model: Model, data: Dataset, solver: str, options: Options, *,
                        eval_data: Dataset | None = None, quiet: bool = False, interrupt: Interrupt | None = None
                        ) -> OptimizeResult:
    """``minimize`` with a one-line progress display on a terminal (none when ``quiet``),
    stopped at the next iteration or step once ``interrupt`` has seen Ctrl-C (and its
    ending told in the report: :func:`endings_in_the_report`)."""
    from dasklbfgs.monitor.progress import Progress
    from dasklbfgs.scoring.names import held_out_names

    chosen = get_solver(solver)
    planned = options.planned_work(data.n_samples)
    progress = Progress(planned.total, solver, per_epoch=planned.per_epoch, total_is_limit=planned.total_is_limit,
                        enabled=False if quiet else None)
    # label -> history key; the loss is what the solver's statistics call it (the objective, or
    # the mean loss of recent mini-batches)
    shown = {chosen.stats.loss_name.replace(" ", "_").replace("-", "_"): "loss",
             **{f"eval_{name}": f"eval_{name}" for name in held_out_names(model)}}  # a GLM's: its deviance and D²

    def show(entry: OptimizeResult) -> None:
        if interrupt is not None:
            interrupt.check()
        fields = {label: entry[key] for label, key in shown.items() if key in entry}
        progress.update(entry["step"], **fields)

    options = without_held_out(options, eval_data)
    try:
        with endings_in_the_report():
            return minimize(model, data, solver, options, client=client, callback=show, eval_data=eval_data,
                            score=True)
    finally:
        progress.close()
