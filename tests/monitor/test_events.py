"""Training metrics reach the scheduler as events, one stream per run."""

from __future__ import annotations

from dasklbfgs import Logistic, Softmax, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.monitor.events import TOPIC


def _events(client, run_id):
    return [message for _, message in client.get_events(TOPIC) if message["run"] == run_id]


def test_sandblaster_logs_every_iteration(client, datasets) -> None:
    result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client)
    events = _events(client, result.run_id)
    assert [e["nit"] for e in events] == list(range(1, result.nit + 1))
    assert events[-1]["fun"] == result.fun
    assert {"gnorm", "step_length", "nfev", "time", "n_portions"} <= set(events[0])


def test_downpour_logs_progress_and_the_end(client, datasets) -> None:
    result = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=50, epochs=2)
    events = _events(client, result.run_id)
    assert events and events[-1]["finished"] and events[-1]["step"] == result.nit
    assert list(events[-1]["pushes_per_shard"]) == result.stats["pushes_per_shard"]
    steps = [e["step"] for e in events]
    assert steps == sorted(steps)
