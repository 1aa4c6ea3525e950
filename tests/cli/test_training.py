"""The progress line's plan for the replica methods matches what the solvers then do."""

from __future__ import annotations

import pytest

from dasklbfgs.models import Softmax
from dasklbfgs.solvers import get_solver, minimize


@pytest.mark.parametrize("solver", ["downpour", "sync"])
def test_the_planned_global_steps_are_the_steps_the_run_takes(client, datasets, solver) -> None:
    data = datasets["multinomial"]  # 6000 rows: 2000 per replica, 7 batches of 300 (the last short)
    chosen = get_solver(solver)
    options = chosen.options(n_replicas=3, batch_size=300, epochs=2)
    total, per_epoch, is_limit = options.planned_work(data.n_samples)
    assert (total, per_epoch, is_limit) == (42, 21, False)
    result = minimize(Softmax(data.n_features, 3), data, solver, options, client=client)
    assert result.nit == total
    capped = options.replace(max_steps=30)
    assert capped.planned_work(data.n_samples) == (30, 21, False)


def test_sandblaster_plans_its_iteration_limit(datasets) -> None:
    chosen = get_solver("sandblaster")
    assert chosen.options(maxiter=70).planned_work(datasets["multinomial"].n_samples) == (70, None, True)
