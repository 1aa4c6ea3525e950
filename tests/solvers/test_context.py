"""The run minimize owns: cadences, the callback's intermediate result, stop rules (one
result shape for every solver: tests/monitor/test_events.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import Logistic, Softmax, Status, minimize
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.solvers import get_solver
from dasklbfgs.solvers.context import Cadence, IntermediateResult, RunContext


def test_a_cadence_is_due_at_each_multiple_once_whatever_the_steps_jump() -> None:
    cadence = Cadence(10)
    assert [step for step in (3, 9, 10, 11, 25, 29, 30, 61) if cadence.due(step)] == [10, 25, 30, 61]
    resumed = Cadence(10, start=37)  # a resumed run: the next multiple after its start
    assert [resumed.due(step) for step in (38, 40, 41)] == [False, True, False]
    assert not any(Cadence(None).due(step) for step in range(100))


def test_an_intermediate_result_fetches_x_only_when_read() -> None:
    fetched = []
    entry = {"step": 3, "time": 0.5, "loss": 0.25}
    result = IntermediateResult(entry, lambda: fetched.append(1) or np.ones(2))
    assert (result.step, result.fun, result["loss"]) == (3, 0.25, 0.25) and not fetched
    np.testing.assert_array_equal(result.x, np.ones(2))
    np.testing.assert_array_equal(result["x"], np.ones(2))
    assert fetched == [1]  # once, then kept
    with pytest.raises(AttributeError, match="nfev"):
        _ = result.nfev
    unread = IntermediateResult(entry, lambda: np.ones(2))
    unread.settle()  # the callback returned without reading x: the run has moved on
    with pytest.raises(RuntimeError, match=r"the parameters of step 3 are read while the callback runs"):
        _ = unread.x


def test_a_callback_that_is_not_callable_is_refused(datasets) -> None:
    with pytest.raises(ConfigurationError, match=r"callback must be callable, got 3"):
        minimize(Logistic(8), datasets["logistic"], "sandblaster", callback=3)


@pytest.mark.parametrize("solver", ["sandblaster", "downpour"])
def test_a_stop_rule_ends_the_run_where_it_says(client, datasets, solver) -> None:
    """The hook early stopping plugs into: asked after every reported entry."""
    chosen = get_solver(solver)
    data = datasets["multinomial"]
    options = chosen.options(maxiter=50) if solver == "sandblaster" else chosen.options(
        epochs=5, batch_size=20, poll_interval=0.01)
    context = RunContext.checked(chosen, Softmax(8, 3), data, options)
    context.stop_rules.append(lambda entry: "enough" if entry["step"] >= 3 else None)
    planned = chosen.plan(context)
    with context.connected(client):
        result = planned.run()
        context.finish(result)
    assert (result.status, result.success, result.message) == (Status.CALLBACK_STOP, False, "enough")
    stopped_at = next(entry["step"] for entry in result.history if entry["step"] >= 3)
    assert stopped_at >= 3 and (solver != "sandblaster" or result.nit == 3)
    assert result.nit < (50 if solver == "sandblaster" else options.planned_work(data.n_samples).total)
