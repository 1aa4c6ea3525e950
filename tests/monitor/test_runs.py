"""What the Training page reads from the events: runs newest first and named, status, labelled curves, the
axis two runs share, their settings side by side, the panels reserved, honest axes and the best held-out point."""

from __future__ import annotations

import math

import pytest

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.monitor.curve_rules import best_point, honest_limits
from dasklbfgs.monitor.runs import (
    CURVES,
    DATASET_CHARS,
    HELD_OUT_KEYS,
    RATE_CLIP,
    axis_range,
    dataset_label,
    runs_newest_first,
    settings_side_by_side,
    shared_axis,
    shown,
)
from dasklbfgs.scoring.names import HELD_OUT, METRIC_LABELS, held_out_label
from dasklbfgs.scoring.summaries import METRICS
from dasklbfgs.solvers import get_solver, solver_names

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


def _named(run: str, solver: str, **facts) -> list[dict]:
    """A run's start event with these facts (a name, steps per epoch, options, ...) and a few steps."""
    start = {**START, "started_at": 1_700_000_000.0, **facts}
    steps = [{"step": 10 * i, "time": 0.5 * i, "loss": 1.0 / i} for i in range(1, 4)]
    return [{"run": run, "solver": solver, **start}, *({"run": run, "solver": solver, "kind": "step", **e}
                                                       for e in steps)]


def test_the_name_option_is_checked_for_every_solver() -> None:
    for solver in solver_names():
        options = get_solver(solver).options
        assert options(name="baseline").name == "baseline" and options().name is None
        for bad in ("", "  ", 3):
            with pytest.raises(ConfigurationError, match=rf"{solver} option name must be a non-empty string or None, "
                                                         rf"got {bad!r}"):
                options(name=bad)


def test_the_picker_names_a_run_by_its_name_start_solver_dataset_and_settings() -> None:
    options = {"optimizer": "sgd", "learning_rate": 0.5, "batch_size": 20, "n_replicas": 2, "epochs": 3,
               "max_steps": None, "name": "sgd-fast"}
    named, unnamed = runs_newest_first(_named("a", "downpour", name="sgd-fast", options=options)
                                       + _named("b", "downpour", options={"epochs": 1}))[::-1]
    assert named.name == "sgd-fast" and named.label() == (
        "sgd-fast · 22:13:20 UTC · downpour · /d · optimizer=sgd learning_rate=0.5 batch_size=20 n_replicas=2 "
        "epochs=3 (running)")
    assert unnamed.name == "b" and unnamed.label().startswith("b · 22:13:20 UTC · downpour · /d · epochs=1")


def test_the_picker_tells_apart_datasets_whose_last_parts_are_the_same() -> None:
    home = "/home/someone/.cache/dasklbfgs/recipes"  # every recipe's training split is "train"
    logit, linear = runs_newest_first(
        _named("a", "sandblaster", name="fit", dataset={**START["dataset"], "path": f"{home}/logit/train"})
        + _named("b", "sandblaster", name="fit", dataset={**START["dataset"], "path": f"{home}/linear/train/"}))[::-1]
    assert logit.label() != linear.label()  # two runs alike but for their datasets
    # long paths: their ends, in whole parts
    assert logit.label() == "fit · 22:13:20 UTC · sandblaster · …/.cache/dasklbfgs/recipes/logit/train (running)"
    assert linear.label() == "fit · 22:13:20 UTC · sandblaster · …/.cache/dasklbfgs/recipes/linear/train (running)"
    # Short paths and URLs whole; a long one by its last two parts at least, each part whole.
    assert [dataset_label(path) for path in ("/d", "s3://bucket/logit/train.zarr", "s3://bucket/linear/train.zarr/",
                                             f"/data/{'x' * 40}/logit/train.zarr")] == [
        "/d", "s3://bucket/logit/train.zarr", "s3://bucket/linear/train.zarr", "…/logit/train.zarr"]
    assert all(len(dataset_label(f"{home}/{name}/train")) <= DATASET_CHARS for name in ("logit", "linear"))


def test_two_runs_share_an_x_axis_that_means_the_same_for_both() -> None:
    sandblaster = {"unit": "iteration", "loss_name": "objective", "has_replicas": False, "steps_per_epoch": None}
    runs = runs_newest_first(_named("sb", "sandblaster", **sandblaster) + _named("dp", "downpour", steps_per_epoch=20)
                             + _named("dp2", "downpour", steps_per_epoch=40)
                             + _named("dp3", "downpour", steps_per_epoch=20, name="again"))
    again, dp2, dp, sb = runs
    assert shared_axis(sb, None, "step") == ("step", "iteration")
    assert shared_axis(sb, dp, "step") == ("time", "wall time (s) (shared: sb counts iterations, dp global steps)")
    assert shared_axis(dp, dp2, "step") == ("epoch", "epoch (shared: dp counts global steps, dp2 global steps of "
                                                     "other sizes)")
    assert dp.points(CURVES["loss"], "epoch")["x"] == [0.5, 1.0, 1.5]  # 10, 20, 30 global steps of 20 an epoch
    assert shared_axis(dp, again, "step") == ("step", "global step")  # the same steps: the same axis
    assert shared_axis(dp, again, "time") == ("time", "wall time (s)")
    # Each line says what it is, by the run's name.
    assert sb.series_label(CURVES["loss"]) == "sb: objective (full batch)"
    assert again.series_label(CURVES["loss"], smoothed=True) == "again: mini-batch loss (smoothed)"
    assert again.series_label(CURVES["loss"]) == "again: mini-batch loss (noisy)"  # too few points to smooth


def test_settings_side_by_side_mark_what_differs() -> None:
    a, b = runs_newest_first(_named("a", "sync", options={"epochs": 1, "seed": 0})
                             + _named("b", "sync", options={"epochs": 3, "seed": 0, "max_steps": 9}))[::-1]
    rows = {r[0]: r[1:] for r in settings_side_by_side(a, b)}
    assert rows["epochs"] == ("1", "3", True) and rows["seed"] == ("0", "0", False)
    assert rows["max_steps"] == ("", "9", True)  # only one run has it
    assert rows["started"][2] is False  # two runs always start at different times: not a difference worth marking
    assert not any(differs for *_, differs in settings_side_by_side(a, None))


def test_the_page_reserves_the_panels_a_run_fills_from_its_start() -> None:
    """The layout is known when the run starts: no panel appears mid-run."""
    [run] = runs_newest_first([{"run": "p", "solver": "sync", **START, "task": "reconstruction",
                                "held_out": True, "event_figures": [], "scored": False}])
    assert not run.steps  # nothing measured yet
    assert run.fills("loss") and run.fills("eval_objective") and run.fills("eval_reconstruction_mse")
    assert run.fills("held_out") and run.fills("rate")
    assert not any(run.fills(p) for p in ("eval_accuracy", "gnorm", "shards", "workers", "partitions", "scores"))
    [downpour] = runs_newest_first([{"run": "d", "solver": "downpour", **START, "held_out": False,
                                     "event_figures": ["pushes_per_shard", "staleness"],
                                     "options": {"model_partitions": 2}}])
    assert downpour.fills("shards") and downpour.fills("staleness") and downpour.fills("partitions")
    assert not downpour.fills("eval_objective")


def test_axes_follow_the_honest_limits_and_clip_rate_spikes() -> None:
    low, high, clipped = axis_range(CURVES["eval_accuracy"], [0.552, 0.559, 0.555])
    assert (low, high) == honest_limits([0.552, 0.559, 0.555], log=False) and not clipped
    assert high - low >= 0.0559  # a tenth of the values, not the 0.007 they span
    low, high, _ = axis_range(CURVES["gnorm"], [1e-3, 1.2e-3, 0.0])
    assert math.log10(high / low) >= 1.0  # a decade at least
    rates = [300.0 + (i % 5) * 10 for i in range(30)] + [2300.0]
    low, high, clipped = axis_range(CURVES["rate"], rates)
    assert low == 0 and clipped and high == RATE_CLIP * 340.0  # twice the 90th percentile: the spike is off the axis
    assert axis_range(CURVES["rate"], rates[:-1])[1:] == (pytest.approx(340 * 1.05), False)
    assert axis_range(CURVES["loss"], [math.nan]) is None


def test_the_best_held_out_point_is_found_by_its_direction() -> None:
    accuracy = [0.6, 0.8, 0.86, 0.83]
    steps = [{"step": i, "time": 0.1 * i, "loss": 1.0, "eval_accuracy": a, "eval_objective": 1.2 - a}
             for i, a in enumerate(accuracy, start=1)]
    start = {**START, "unit": "iteration", "loss_name": "objective", "name": "digits"}
    [run] = runs_newest_first([{"run": "s", "solver": "sandblaster", **start},
                               *({"run": "s", "solver": "sandblaster", "kind": "step", **e} for e in steps)])
    assert run.best(CURVES["eval_accuracy"], "step") == (3, 0.86, "digits: best held-out accuracy 0.86 at iteration 3")
    x, y, label = run.best(CURVES["eval_objective"], "time")
    assert (x, y) == (pytest.approx(0.3), pytest.approx(0.34)) and label.endswith("at iteration 3")  # the lowest
    assert run.best(CURVES["loss"], "step") is None  # not a held-out figure
    assert best_point([1, 2, 3], [0.5, math.nan, 0.4], "r2") == (1, 0.5)
    assert best_point([1, 2], [math.nan, math.nan], "rmse") is None
