"""The progress line's plan for the replica methods matches what the solvers then do."""

from __future__ import annotations

import pytest

from dasklbfgs.cli.training import planned_work
from dasklbfgs.models import Softmax
from dasklbfgs.solvers import get_solver, minimize


@pytest.mark.parametrize("solver", ["downpour", "sync"])
def test_the_planned_global_steps_are_the_steps_the_run_takes(client, datasets, solver) -> None:
    data = datasets["multinomial"]  # 6000 rows: 2000 per replica, 7 batches of 300 (the last short)
    chosen = get_solver(solver)
    options = chosen.options(n_replicas=3, batch_size=300, epochs=2)
    total, per_epoch = planned_work(chosen, options, data)
    assert (total, per_epoch) == (42, 21)
    result = minimize(Softmax(data.n_features, 3), data, solver, options, client=client)
    assert result.nit == total
    capped = options.replace(max_steps=30)
    assert planned_work(chosen, capped, data) == (30, 21)


def test_sandblaster_plans_its_iteration_limit(datasets) -> None:
    chosen = get_solver("sandblaster")
    assert planned_work(chosen, chosen.options(maxiter=70), datasets["multinomial"]) == (70, None)
