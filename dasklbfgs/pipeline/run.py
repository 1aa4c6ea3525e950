"""Run a validated pipeline config: build or open the data, train, evaluate, report.

The report folder holds ``metrics.json`` (final train/held-out metrics and run facts),
``curves.json`` (objective and held-out metric per iteration or step, with wall time),
``curves.png`` (both against iteration and against wall time) and ``model.npz``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distributed import Client

from dasklbfgs.data import ShardedDataset, make_dataset
from dasklbfgs.data.recipes import RecipeOptions
from dasklbfgs.models import model_for_dataset
from dasklbfgs.models.metrics import evaluate_model, score_name
from dasklbfgs.models.persist import save_params
from dasklbfgs.models.registry import model_options
from dasklbfgs.solvers import get_solver, minimize
from dasklbfgs.solvers.common_options import without_held_out

__all__ = ["run_pipeline"]

logger = logging.getLogger(__name__)


def _datasets(config: dict[str, Any], out: Path) -> tuple[ShardedDataset, ShardedDataset | None]:
    data = config["data"]
    if data["recipe"] is not None:
        recipe = {key: data[key] for key in RecipeOptions.fields()}
        splits = make_dataset(data["recipe"], out / "data", **recipe, overwrite=True)
        return splits["train"], splits.get("test")
    test = ShardedDataset.open(data["test"]) if data["test"] else None
    return ShardedDataset.open(data["train"]), test


def _curve_point(entry: dict[str, Any], iteration: int, objective: float | None) -> dict[str, Any]:
    """One point of curves.json from a solver's history entry."""
    point: dict[str, Any] = {"iteration": iteration, "time": entry["time"]}
    if objective is not None:
        point["objective"] = objective
    score = score_name(entry, "eval_")
    if score is not None:
        point["heldout"] = entry["eval_" + score]
    return point


def run_pipeline(config: dict[str, Any], output: Path | str, *, client: Client,
                 callback: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """Run ``config`` (from :func:`load_config`) on ``client``; write the report under
    ``output/<pipeline.name>`` and return the metrics. ``callback`` goes to the solver
    (:func:`dasklbfgs.minimize`): raising ``StopIteration`` ends the run with what it reached."""
    name = config["pipeline"]["name"]
    out = Path(output) / name
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train, test = _datasets(config, out)
    for dataset in (train, test) if test is not None else (train,):
        dataset.check_workers_can_read(client)
    logger.info("data ready: %r (test: %r)", train, test)
    spec, solver, options = config["model"], config["train"]["solver"], config["train"]["options"]
    model = model_for_dataset(spec["name"], train, **model_options(spec))
    result = minimize(model, train, solver, without_held_out(options, test), client=client, eval_data=test,
                      callback=callback)
    chosen = get_solver(solver)
    curve = [_curve_point(e, e[chosen.count_key], e.get(chosen.loss_key)) for e in result.history]
    if chosen.iterative:
        facts = {"iterations": result.nit, "evaluations": result.nfev, **result.timing}
    else:
        facts = {"steps": result.nit, **result.stats}

    metrics: dict[str, Any] = {
        "pipeline": name,
        "solver": solver,
        "options": {k: str(v) if hasattr(v, "__fspath__") else v for k, v in options.to_dict().items()},
        "model": repr(model),
        "success": bool(result.success),
        "message": result.message,
        "train": evaluate_model(model, result.x, train),
        "run": facts,
        "seconds": time.perf_counter() - started,
    }
    if test is not None:
        metrics["test"] = evaluate_model(model, result.x, test)
    save_params(out / "model.npz", model, result.x, {"pipeline": name})
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    (out / "curves.json").write_text(json.dumps(curve, indent=2, default=float) + "\n")
    held_label = "held-out " + (score_name(metrics["test"]) if test is not None else "metric")
    plot_curves(curve, out / "curves.png", title=f"{name} ({solver})", heldout_label=held_label)
    return metrics


def plot_curves(curve: list[dict[str, Any]], path: Path, *, title: str, heldout_label: str) -> Path:
    """Objective and held-out metric against iteration and against wall time, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for row, (key, label) in enumerate((("objective", "objective"), ("heldout", heldout_label))):
        points = [p for p in curve if key in p]
        for col, (x_key, x_label) in enumerate((("iteration", "iteration / global step"), ("time", "wall time (s)"))):
            ax = axes[row][col]
            if points:
                ax.plot([p[x_key] for p in points], [p[key] for p in points], marker=".")
            else:
                ax.text(0.5, 0.5, "no held-out data", ha="center", va="center", transform=ax.transAxes)
            ax.set_xlabel(x_label)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
