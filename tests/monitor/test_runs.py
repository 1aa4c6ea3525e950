"""What the Training page reads from the events: runs newest first, status, labelled curves."""

from __future__ import annotations

import math

from dasklbfgs.monitor.runs import CURVES, HELD_OUT_KEYS, runs_newest_first, shown
from dasklbfgs.scoring.names import HELD_OUT, METRIC_LABELS, held_out_label
from dasklbfgs.scoring.summaries import METRICS

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
    assert CURVES["eval_reconstruction_mse"].label(run) == "held-out reconstruction error (MSE)"
    assert CURVES["eval_objective"].label(run) == "held-out objective" and CURVES["gnorm"].label(run) == ""
    assert CURVES["eval_accuracy"].label(run) == ""  # not recorded by this run: no plot
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


def test_every_figure_a_run_reports_has_a_label() -> None:
    """What evaluate and result.scores give (every task's metrics, the objective, the rows),
    and each held-out figure a run records, has its human name in scoring.names."""
    reported = {"objective", "n_samples", *(name for names in METRICS.values() for name in names)}
    assert reported == set(METRIC_LABELS)
    assert HELD_OUT_KEYS[0] == "eval_objective"
    assert {f"eval_{name}" for names in HELD_OUT.values() for name in names} == set(HELD_OUT_KEYS[1:])
    assert [held_out_label(key) for key in ("eval_objective", "eval_r2", "eval_rmse")] == [
        "held-out objective", "held-out R²", "held-out RMSE"]


def _regression_run(scores: dict | None) -> list[dict]:
    """A Sandblaster regression run with held-out data: every iteration scores it."""
    start = {**START, "unit": "iteration", "loss_name": "objective", "has_replicas": False}
    steps = [{"step": i, "time": 0.1 * i, "loss": 1.0 / i, "eval_objective": 2.0 / i, "eval_rmse": 3.0 / i,
              "eval_r2": 1 - 1.0 / (i + 1)} for i in range(1, 4)]
    steps[-1]["eval_rmse"] = math.nan  # the latest finite value is shown
    end = {"kind": "end", "status": "CONVERGED", "success": True, "message": "converged",
           **({} if scores is None else {"scores": scores})}
    return [{"run": "r", "solver": "sandblaster", **e} for e in [start, *({"kind": "step", **e} for e in steps), end]]


def test_the_held_out_figures_are_named_with_their_latest_values() -> None:
    [run] = runs_newest_first(_regression_run(None))
    assert run.held_out() == [("held-out objective", 2.0 / 3, 3), ("held-out RMSE", 1.5, 2), ("held-out R²", 0.75, 3)]
    assert CURVES["eval_r2"].label(run) == "held-out R²"
    assert run.points(CURVES["eval_rmse"], "step") == {"x": [1, 2], "y": [3.0, 1.5]}
    assert run.final_scores() == []  # not scored at the end: no table


def test_the_final_scores_are_named_train_beside_test() -> None:
    regression = {"train": {"objective": 0.5, "n_samples": 6000, "rmse": 0.25, "r2": 0.9},
                  "test": {"objective": 0.6, "n_samples": 1500, "rmse": 0.3, "r2": 0.8}}
    [run] = runs_newest_first(_regression_run(regression))
    assert run.final_scores() == [("objective", 0.5, 0.6), ("rows", 6000, 1500), ("RMSE", 0.25, 0.3),
                                  ("R²", 0.9, 0.8)]
    # A classification run without held-out data: no test column; the confusion matrix a row per true class
    # (its rows tuples, as Dask delivers the event).
    classification = {"train": {"log_loss": 0.3, "f1": 0.75, "confusion_matrix": ((50, 3), (7, 40))}}
    [run] = runs_newest_first(_regression_run(classification))
    assert run.final_scores() == [("log-loss", 0.3, None), ("F1", 0.75, None),
                                  ("confusion matrix, true class 0", (50, 3), None),
                                  ("confusion matrix, true class 1", (7, 40), None)]
    assert [shown(v) for v in (0.123456789, 6000, [50, 3], None, math.nan)] == ["0.123457", "6,000", "50 | 3", "",
                                                                               "nan"]
