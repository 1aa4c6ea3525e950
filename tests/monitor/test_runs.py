"""What the Training page reads from the events: runs newest first, status, labelled curves."""

from __future__ import annotations

import math

from dasklbfgs.monitor.runs import CURVES, runs_newest_first

START = {"kind": "start", "unit": "global step", "loss_name": "mini-batch loss", "has_replicas": True,
         "model": "Autoencoder(...)", "n_params": 10, "options": {},
         "dataset": {"path": "/d", "n_samples": 100, "n_features": 4}, "n_workers": 2, "started_at": 0.0}


def _peer_run(run: str) -> list[dict]:
    """Events as a peer method sends them: start, progress polls, the finished poll, end."""
    steps = [{"step": 10 * i, "time": 0.5 * i, "loss": 1.0 / i, "eval_reconstruction_mse": 0.1 / i,
              "eval_objective": 2.0 / i} for i in range(1, 5)]
    return [{"run": run, "solver": "sync", **START},
            *({"run": run, "solver": "sync", "kind": "step", **e} for e in steps),
            {"run": run, "solver": "sync", "kind": "step", "step": 40, "time": 2.5, "finished": True},
            {"run": run, "solver": "sync", "kind": "end", "status": "CONVERGED", "success": True,
             "message": "all replicas finished their epochs"}]


def test_runs_are_listed_newest_first_with_their_state() -> None:
    failed = [{"run": "b", "solver": "sync", **START},
              {"run": "b", "solver": "sync", "kind": "end", "status": "FAILED", "success": False,
               "error": "OSError", "message": "data <gone>"}]
    running = [{"run": "c", "solver": "sync", **START}]
    runs = runs_newest_first(_peer_run("a") + failed + running)
    assert [(r.run, r.state) for r in runs] == [("c", "running"), ("b", "failed"), ("a", "finished")]
    assert "OSError: data &lt;gone&gt;" in runs[1].status()
    assert "CONVERGED" in runs[2].status() and "global step 40" in runs[2].status()
    assert dict(runs[2].settings())["dataset"] == "/d (100 x 4)"


def test_curves_are_named_by_their_keys_and_hold_finite_points() -> None:
    [run] = runs_newest_first(_peer_run("a"))
    assert CURVES["loss"].label(run) == "mini-batch loss"
    assert CURVES["heldout_metric"].label(run) == "held-out reconstruction error (MSE)"
    assert CURVES["heldout_loss"].label(run) == "held-out loss" and CURVES["gnorm"].label(run) == ""
    # The finished poll has no loss: it is not drawn (no nan point).
    assert run.points(CURVES["loss"], "step") == {"x": [10, 20, 30, 40], "y": [1.0, 0.5, 1 / 3, 0.25]}
    assert run.points(CURVES["loss"], "time")["x"] == [0.5, 1.0, 1.5, 2.0]
    # Updates per second: the global step's change over the time between polls.
    assert run.points(CURVES["rate"], "step") == {"x": [20, 30, 40, 40], "y": [20.0, 20.0, 20.0, 0.0]}


def test_a_log_axis_drops_points_that_are_zero_or_nan() -> None:
    start = {**START, "unit": "iteration", "loss_name": "objective", "has_replicas": False}
    events = [{"run": "s", "solver": "sandblaster", **start}]
    events += [{"run": "s", "solver": "sandblaster", "kind": "step", "step": i, "time": float(i), "loss": 1.0,
                "gnorm": g} for i, g in enumerate([1e-2, 0.0, math.nan, 1e-4], start=1)]
    [run] = runs_newest_first(events)
    assert run.x_label == "iteration" and not run.has_replicas and CURVES["loss"].label(run) == "objective"
    assert run.points(CURVES["gnorm"], "step") == {"x": [1, 4], "y": [1e-2, 1e-4]}
