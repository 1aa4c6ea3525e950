"""Training metrics reach the scheduler as events, one stream per run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import Logistic, Softmax, minimize, sandblaster_lbfgs
from dasklbfgs.downpour import downpour_sgd
from dasklbfgs.monitor.events import TOPIC, plain_event
from dasklbfgs.solvers.registry import get_solver, solver_names
from dasklbfgs.solvers.stats import RunStats


def _events(client, run_id, kind="step"):
    return [message for _, message in client.get_events(TOPIC) if message["run"] == run_id and message["kind"] == kind]


def test_sandblaster_logs_every_iteration(client, datasets) -> None:
    result = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client)
    events = _events(client, result.run_id)
    assert [e["step"] for e in events] == list(range(1, result.nit + 1))
    assert events[-1]["loss"] == result.fun
    assert {"gnorm", "step_length", "nfev", "time", "n_portions"} <= set(events[0])


def test_downpour_logs_progress_and_the_end(client, datasets) -> None:
    result = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=50, epochs=2)
    events = _events(client, result.run_id)
    assert events and events[-1]["finished"] and events[-1]["step"] == result.nit
    assert list(events[-1]["pushes_per_shard"]) == result.stats["pushes_per_shard"]
    steps = [e["step"] for e in events]
    assert steps == sorted(steps)


@pytest.mark.parametrize("solver", solver_names())
def test_every_logged_step_reaches_the_scheduler(client, datasets, solver) -> None:
    """One event per history entry (iteration or progress poll), plus the replica methods'
    final one: none refused by Dask's serialization on the way. Every solver's result has
    one shape, and its callback sees each entry with the parameters."""
    batch = get_solver(solver).unit == "iteration"  # Sandblaster's procedures, L-BFGS's and Newton's
    options = {"maxiter": 5} if batch else {"epochs": 2, "batch_size": 20, "poll_interval": 0.01}
    seen = []
    result = minimize(Softmax(8, 3), datasets["multinomial"], solver, client=client,
                      callback=lambda intermediate: seen.append((intermediate, intermediate.x)), **options)
    assert {"x", "fun", "nit", "status", "success", "message", "history", "solver", "run_id", "stats"} <= set(result)
    assert isinstance(result.stats, RunStats) and result.stats.unit == get_solver(solver).unit
    assert all({"step", "time"} <= set(entry) for entry in result.history)
    losses = [entry["loss"] for entry in result.history if "loss" in entry]
    assert losses and result.fun == losses[-1]
    assert result.stats.lines(result)[0].startswith("work ") and result.stats.summary(result)
    assert [intermediate.step for intermediate, _ in seen] == [entry["step"] for entry in result.history]
    assert all(x.shape == (Softmax(8, 3).n_params,) and "_params" not in intermediate for intermediate, x in seen)
    events = _events(client, result.run_id)
    extra = 1 if get_solver(solver).stats.has_replicas else 0  # the replica methods' finished event
    assert len(result.history) >= 3 and len(events) == len(result.history) + extra
    # One start event with the run's settings as plain data, one end event with the outcome.
    [start] = _events(client, result.run_id, "start")
    assert start["unit"] == get_solver(solver).unit and start["n_params"] == Softmax(8, 3).n_params
    assert start["loss_name"] == get_solver(solver).stats.loss_name
    assert start["n_workers"] == 2
    assert set(start["options"]) == {name for name, _, _ in get_solver(solver).options.items()}
    assert all(start["options"][name] == value for name, value in options.items() if name != "poll_interval")
    assert start["dataset"]["n_samples"] == datasets["multinomial"].n_samples
    assert start["dataset"]["path"] == str(datasets["multinomial"].path)
    [end] = _events(client, result.run_id, "end")
    assert (end["status"], end["success"], end["message"]) == (result.status.name, result.success, result.message)


def test_the_end_event_carries_the_final_scores(client, datasets) -> None:
    """A run scored at the end (``score=True``) sends its ``result.scores`` with the end event,
    after the replica methods' finished poll, which comes before they exist; a run not scored sends none."""
    result = downpour_sgd(Softmax(8, 3), datasets["multinomial"], client=client, batch_size=50, epochs=1,
                          eval_data=datasets["multinomial-ill"], score=True)
    [end] = _events(client, result.run_id, "end")
    assert set(end["scores"]) == {"train", "test"}
    for split, scores in result.scores.items():
        sent = dict(end["scores"][split])
        assert [list(row) for row in sent.pop("confusion_matrix")] == scores["confusion_matrix"]  # (rows as tuples)
        assert sent == {name: value for name, value in scores.items() if name != "confusion_matrix"}
    assert _events(client, result.run_id)[-1]["finished"] and "scores" not in _events(client, result.run_id)[-1]
    plain = sandblaster_lbfgs(Logistic(8, l2=1e-3), datasets["logistic"], client=client, maxiter=2)
    [end] = _events(client, plain.run_id, "end")
    assert "scores" not in end and "scores" not in plain


def test_event_payloads_are_plain_json() -> None:
    assert plain_event({"a": np.float64(1.5), "b": [np.int64(2), None], "c": {"1": True}, "p": Path("/d")}) == {
        "a": 1.5, "b": [2, None], "c": {"1": True}, "p": "/d"}
    with pytest.raises(TypeError, match=r"event.staleness has the key 1 \(int\): event dicts take str keys only"):
        plain_event({"staleness": {1: 3}})
    with pytest.raises(TypeError, match=r"event.x is a ndarray: events hold only str, int, float"):
        plain_event({"x": np.zeros(2)})


def test_an_event_that_cannot_be_sent_is_a_visible_warning(client) -> None:
    from distributed import Client

    from dasklbfgs.errors import MetricsWarning
    from dasklbfgs.monitor.events import MetricsStream

    closed = Client(client.scheduler.address, set_as_default=False)
    stream = MetricsStream(closed, "downpour")
    closed.close()
    with pytest.warns(MetricsWarning, match=rf"a training event of run '{stream.run}' did not reach the scheduler "
                                            r"\(the dashboard will miss it\)"):
        stream.send(step=1)


EMBEDDED_RUN = """
from distributed import default_client
from dasklbfgs import Logistic, ShardedDataset, minimize
from dasklbfgs.monitor.events import TOPIC

if __name__ == "__main__":
    schedulers = []
    result = minimize(Logistic(8, l2=1e-3), ShardedDataset.open({path!r}), "sandblaster", maxiter=2,
                      callback=lambda intermediate: schedulers.append(default_client().cluster.scheduler))
    print(schedulers[0].status.name, *[m["kind"] for _, m in schedulers[0].get_events(TOPIC)
                                      if m["run"] == result.run_id])
"""


def test_a_run_on_an_embedded_cluster_sends_its_end_event_before_the_cluster_closes(datasets, tmp_path) -> None:
    """minimize owns the run: with no client (in a process without one) it starts an embedded
    cluster, and the end event reaches that cluster's scheduler before the cluster closes
    (the scheduler runs in the calling process, so its events stay readable after it closed)."""
    import subprocess
    import sys

    script = tmp_path / "embedded_run.py"
    script.write_text(EMBEDDED_RUN.format(path=str(datasets["logistic"].path)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["closed", "start", "step", "step", "end"]
