"""Run a validated pipeline config: build or open the data, train, evaluate, report.

The report folder (``<output>/<pipeline.name>``, or ``<name>-2``, ... when that exists and
``overwrite`` is off; a local folder or a URL, see :mod:`dasklbfgs.pipeline.report`) holds ``metrics.json`` (the
resolved config, run id, versions, start time, durations, solver facts and final
train/held-out metrics), ``curves.json`` and ``curves.png`` (see
:mod:`dasklbfgs.pipeline.curves`; ``curves.json`` also holds the score curves by split),
``scores.png`` (ROC, precision-recall and reliability for a classifier, the residuals of a
regression: :mod:`dasklbfgs.pipeline.score_plots`) and ``model.npz``. Data built from a recipe goes to the
data home (:mod:`dasklbfgs.data.cache`) or ``data.path``, not into the report. The
config's ``storage_options`` reach the URLs among the datasets, the checkpoint and the
output.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from distributed import Client

from dasklbfgs._format import human_bytes
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.cache import recipe_datasets
from dasklbfgs.data.location import options_for
from dasklbfgs.data.recipes import RecipeOptions
from dasklbfgs.models import model_for_dataset
from dasklbfgs.models.persist import save_params
from dasklbfgs.models.registry import model_options
from dasklbfgs.pipeline.curves import learning_curves, plot_curves
from dasklbfgs.pipeline.report import resolved_config, staged_report, utc_now, versions
from dasklbfgs.pipeline.score_plots import plot_scores
from dasklbfgs.scoring import evaluate
from dasklbfgs.scoring.names import held_out_names
from dasklbfgs.solvers import minimize
from dasklbfgs.solvers.common_options import with_checkpoint_storage, without_held_out

__all__ = ["run_pipeline", "open_datasets", "PreparedData", "DURATIONS"]

logger = logging.getLogger(__name__)

#: metrics.json "durations": each one's meaning (pipelines/README.md lists them; a test keeps them equal)
DURATIONS = {
    "data_seconds": "opening the datasets, or building them from the recipe (near 0 when reused), and "
                    "checking that the workers can read them",
    "train_seconds": "the solver's run, from the call to its result (shard loading included)",
    "evaluate_seconds": "scoring the final parameters on the training and held-out data",
    "total_seconds": "the whole pipeline, from getting the data to the report written",
}


class PreparedData(NamedTuple):
    """A pipeline's datasets and when and how long getting them took (a front end may get
    them before it connects to a cluster; the report still counts that time)."""

    train: ShardedDataset
    test: ShardedDataset | None
    started: float  # time.perf_counter() when preparing began
    started_at: str  # the same moment, ISO 8601 UTC
    seconds: float


def open_datasets(config: dict[str, Any]) -> PreparedData:
    """The config's training and held-out datasets: opened, or built from its recipe (or
    reused, when built before with the same options)."""
    started_at, started = utc_now(), time.perf_counter()
    data, storage = config["data"], config.get("storage_options")
    if data["recipe"] is None:
        test = ShardedDataset.open(data["test"], options_for(data["test"], storage)) if data["test"] else None
        train = ShardedDataset.open(data["train"], options_for(data["train"], storage))
    else:
        options = {key: data[key] for key in RecipeOptions.fields()}
        splits, reused = recipe_datasets(data["recipe"], options, data["path"])
        logger.info("%s the %r recipe's datasets in %s", "reusing" if reused else "built", data["recipe"],
                    splits["train"].path.parent)
        train, test = splits["train"], splits.get("test")
    return PreparedData(train, test, started, started_at, time.perf_counter() - started)


def _describe(data: ShardedDataset) -> str:
    return (f"{data.n_samples} x {data.n_features} {data.dtype} in {data.n_shards} shards "
            f"({human_bytes(data.nbytes_in_memory)} in memory, {human_bytes(data.nbytes_stored())} stored)")


def run_pipeline(config: dict[str, Any], output: os.PathLike[str] | str, *, client: Client,
                 overwrite: bool = False, callback: Callable[[Any], Any] | None = None,
                 data: PreparedData | None = None) -> dict[str, Any]:
    """Run ``config`` (from :func:`load_config`) on ``client``; write the report under
    ``output`` and return the metrics (``metrics["report"]`` is the folder written).
    ``callback`` goes to the solver (:func:`dasklbfgs.minimize`): raising ``StopIteration``
    ends the run with what it reached. ``data``: the datasets from :func:`open_datasets`
    when the caller got them already (their time still counts as the pipeline's)."""
    name, storage = config["pipeline"]["name"], config.get("storage_options")
    with staged_report(output, name, overwrite=overwrite, storage_options=options_for(output, storage)) as folders:
        prepared = data if data is not None else open_datasets(config)
        train, test, started, started_at = prepared.train, prepared.test, prepared.started, prepared.started_at
        checking = time.perf_counter()
        for dataset in (train, test) if test is not None else (train,):
            dataset.check_workers_can_read(client)
        logger.info("train: %s", _describe(train))
        if test is not None:
            logger.info("held out: %s", _describe(test))
        data_ready = time.perf_counter()
        spec, solver = config["model"], config["train"]["solver"]
        model = model_for_dataset(spec["name"], train, **model_options(spec))
        run = _path_run if config["path"] is not None else _single_run
        staging = folders["staging"]
        found, trained, evaluated = run(config, model, train, test, client, staging, callback)
        metrics: dict[str, Any] = {
            "pipeline": name, "solver": solver, "model": repr(model), "score": held_out_names(model)[0], **found,
            "config": resolved_config(config),
            "datasets": {split: d.url for split, d in (("train", train), ("test", test)) if d is not None},
            "cluster": {"scheduler": client.scheduler.address,
                        "workers": len(client.scheduler_info(n_workers=-1)["workers"])},
            "versions": versions(), "started_at": started_at,
            "durations": {"data_seconds": prepared.seconds + (data_ready - checking),
                          "train_seconds": trained - data_ready,
                          "evaluate_seconds": evaluated - trained},
            "files": sorted(["metrics.json", *(f.name for f in staging.iterdir())]),
        }
        metrics["durations"]["total_seconds"] = time.perf_counter() - started
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2, default=float) + "\n")
    metrics["report"] = str(folders["path"])  # a folder, or a URL
    logger.info("report written to %s", folders["path"])
    return metrics


def _single_run(config: dict[str, Any], model: Any, train: ShardedDataset, test: ShardedDataset | None, client: Client,
                staging: Any, callback: Callable[[Any], Any] | None) -> tuple[dict[str, Any], float, float]:
    """One fit by the config's solver, scored by the workers: the model, its learning and
    score curves written to ``staging``; the metrics of the run, and when training and
    scoring ended (``time.perf_counter()``)."""
    name, solver, storage = config["pipeline"]["name"], config["train"]["solver"], config.get("storage_options")
    options = with_checkpoint_storage(config["train"]["options"], storage)
    result = minimize(model, train, solver, without_held_out(options, test), client=client, eval_data=test,
                      callback=callback, score=True)  # scored by the workers before the run lets go of them
    evaluated = time.perf_counter()
    save_params(staging / "model.npz", model, result.x, {"pipeline": name, "run_id": result.run_id})
    curves = learning_curves(result.history, solver)
    curves["scores"] = result.score_curves  # by split: ROC, precision-recall, reliability, residuals
    (staging / "curves.json").write_text(json.dumps(curves, indent=2) + "\n")
    plot_curves(curves, staging / "curves.png", title=f"{name}: {solver}, {result.message}")
    plot_scores(result.score_curves, staging / "scores.png", title=f"{name}: {model!r} at the end of the run")
    metrics = {"run_id": result.run_id, "success": bool(result.success), "message": result.message, **result.scores,
               "solver_stats": {**result.stats, **result.stats.summary(result)}}
    return metrics, evaluated - result.stats["score_seconds"], evaluated


def _path_run(config: dict[str, Any], model: Any, train: ShardedDataset, test: ShardedDataset | None, client: Client,
              staging: Any, callback: Callable[[Any], Any] | None) -> tuple[dict[str, Any], float, float]:
    """The config's ``path:`` section: the model along a regularization path, its penalty
    chosen on the held-out data or by cross-validation (:func:`~dasklbfgs.selection.chosen.choose_penalty`),
    the chosen model scored by the workers: the model with the path beside it, the path's
    figure and the score curves written to ``staging``; the metrics of the run."""
    from dasklbfgs.pipeline.path_plot import plot_path
    from dasklbfgs.selection.chosen import choose_penalty
    from dasklbfgs.selection.options import PathOptions
    from dasklbfgs.selection.path import PathPlan

    name, section = config["pipeline"]["name"], config["path"]
    penalties = PathOptions.from_mapping({key: value for key, value in section.items() if key != "cv"})
    plan = PathPlan.checked(model, penalties, config["train"]["options"])
    # Ctrl-C ends a path with the fits reached (cross-validation cannot choose without every fold)
    chosen = choose_penalty(plan, train, test=test, cv=section["cv"], client=client,
                            callback=callback if section["cv"] is None else None)
    trained = time.perf_counter()
    scores = {split: evaluate(chosen.model, chosen.params, data, client=client, curves=True)
              for split, data in (("train", train), ("test", test)) if data is not None}
    score_curves = {split: found.pop("curves") for split, found in scores.items()}
    evaluated = time.perf_counter()
    run_id = f"path-{uuid.uuid4().hex[:12]}"
    save_params(staging / "model.npz", chosen.model, chosen.params, {"pipeline": name, "run_id": run_id},
                arrays=chosen.arrays)
    report = chosen.report
    fit = report["fits"][report["chosen"]]
    message = report.get("stopped") or (f"chose alpha {fit['alpha']:.4g} ({report['penalty']}) of "
                                        f"{len(report['fits'])} by {report['chosen_by'] or 'the last fit'}")
    plot_path(report, staging / "path.png", title=f"{name}: {model!r}")
    plot_scores(score_curves, staging / "scores.png", title=f"{name}: {chosen.model!r}, the chosen penalty")
    metrics = {"run_id": run_id, "model": repr(chosen.model), "success": chosen.success and not report.get("stopped"),
               "message": message, **scores, "path": report,
               "solver_stats": {"iterations": sum(f["iterations"] for f in report["fits"]),
                                "fits": len(report["fits"])}}
    return metrics, trained, evaluated
