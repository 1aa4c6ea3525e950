"""What ``dasklbfgs train`` and ``dasklbfgs demo`` print and save about a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dasklbfgs._format import human_bytes

if TYPE_CHECKING:
    from distributed import Client
    from scipy.optimize import OptimizeResult

    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model

__all__ = ["format_report", "interrupted_report", "objective_terms", "split_line", "train_report"]

#: what a report's train and test lines add to the task's score (the JSON has every metric)
MORE_SCORES = ("log_loss", "roc_auc", "mae")


def train_report(model: Model, result: OptimizeResult, data: Dataset, test: Dataset | None, client: Client
                 ) -> dict[str, Any]:
    """The run's facts as plain data (the JSON of ``--json`` and the ``.npz`` report): the
    model, the outcome, the train (and test) scores (computed by ``client``'s workers), the solver family's summary
    (:meth:`~dasklbfgs.solvers.stats.RunStats.summary`) and its rendered ``work`` lines."""
    from dasklbfgs.scoring import evaluate  # numpy and the models: not for --help

    # scored at the end of the run (Sandblaster: on its cached shards), else now, by the workers; a run
    # whose scoring failed (it warned) reports without scores
    scores = dict(result.scores) if "scores" in result else {}
    if "scores" not in result or scores:
        for split, dataset in (("train", data), ("test", test)):
            if dataset is not None and split not in scores:
                scores[split] = evaluate(model, result.x, dataset, client=client)
    from dasklbfgs.scoring.names import held_out_names

    report: dict[str, Any] = {
        "model": repr(model),
        "n_params": model.n_params,
        "solver": result.solver,
        "success": bool(result.success),
        "message": result.message,
        "score": held_out_names(model)[0],  # what the score line leads with: a GLM's deviance, not its RMSE
        **scores,
    }
    summary = result.stats.summary(result)
    report.update(summary)
    # the run's own (Sandblaster's: with OWL-QN's L1 term), else scored on the data (no L1 term there)
    report["objective_terms"] = objective_terms(model, with_l1="objective" in summary)
    if "objective" not in report:
        report["objective"] = report["train"]["objective"] if "train" in report else float("nan")
    report["work"] = result.stats.lines(result)
    partitions = _partitions(result)
    if partitions is not None:
        report["partitions"] = partitions
    return report


def objective_terms(model: Model, *, with_l1: bool = True) -> str:
    """What a run's objective adds up, in words: ``"log-loss + L2 penalty"`` (the mean loss on
    the training rows, plus the model's penalties that are not zero; ``with_l1``: the L1 term
    too, which the solver's own objective holds and a scored one does not)."""
    if model.task == "classification":
        loss = "class-weighted log-loss" if getattr(model, "class_weight", None) is not None else "log-loss"
    else:
        loss = {"reconstruction": "reconstruction loss"}.get(model.task, "mean loss")
    penalties = [name for attribute, name in (("l2", "L2 penalty"), ("l1", "L1 penalty"), ("beta", "sparsity penalty"))
                 if float(getattr(model, attribute, 0.0) or 0.0) > 0.0 and (with_l1 or attribute != "l1")]
    return " + ".join([loss, *penalties])


def _partitions(result: OptimizeResult) -> dict[str, Any] | None:
    """Partitions per replica, replicas, bytes sent between partitions and replicas re-created
    after a lost partition, from ``result.partitions`` (:func:`~dasklbfgs.parallel.replica.partitions_report`,
    runs with ``model_partitions`` > 1); None for other runs."""
    partitions = getattr(result, "partitions", None)
    if partitions is None:
        return None
    return {"per_replica": partitions["model_partitions"], "replicas": len(partitions["replicas"]),
            "bytes_sent": sum(p["bytes_sent"] for r in partitions["replicas"] for p in r),
            "recoveries": len(partitions["recoveries"])}


def interrupted_report(model: Model, result: OptimizeResult) -> dict[str, Any]:
    """The facts of a run stopped by Ctrl-C, without the pass over the data that scoring
    takes (the person who pressed it wants the command back)."""
    losses = [entry["loss"] for entry in result.history if "loss" in entry]
    return {
        "model": repr(model),
        "n_params": model.n_params,
        "solver": result.solver,
        "success": False,
        "message": result.message,
        "objective": losses[-1] if losses else None,
        **result.stats.summary(result),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"model      {report['model']} ({report['n_params']} parameters)",
        f"objective  {report['objective']:.10g}"
        + (f" (what the solver minimised: {report['objective_terms']}, on the training rows)"
           if report.get("objective_terms") else ""),
        f"stopped    {report['message']} (success={report['success']})",
    ]
    lines += report.get("work", [])
    if "partitions" in report:
        parts = report["partitions"]
        lines.append(f"partitions {parts['per_replica']} per replica, {parts['replicas']} replica(s); "
                     f"{human_bytes(parts['bytes_sent'])} sent between partitions; "
                     f"re-created {parts['recoveries']} time(s) after a lost worker")
    lines += [split_line(split, report[split], report.get("score")) for split in ("train", "test") if split in report]
    return "\n".join(lines)


def split_line(split: str, metrics: dict[str, Any], score: str | None = None) -> str:
    """``test       400 rows: accuracy 0.7375, log-loss 0.5041, ROC AUC 0.8199, objective 0.520967``:
    the task's score (``score`` where the metrics hold it, else the first of theirs), the
    metrics of :data:`MORE_SCORES` they hold, and the objective on these rows."""
    from dasklbfgs.scoring.names import SCORES, metric_label, score_name

    name = score if score in SCORES and score in metrics else score_name(metrics)
    shown = [SCORES[name].format(**metrics)] if name is not None else []
    shown += [f"{metric_label(key)} {metrics[key]:.4g}" for key in MORE_SCORES if key in metrics]
    shown.append(f"objective {metrics['objective']:.6g}")
    return f"{split:<10} {metrics['n_samples']} rows: {', '.join(shown)}"
