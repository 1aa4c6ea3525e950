"""What ``dasklbfgs train`` and ``dasklbfgs demo`` print and save about a run."""

from __future__ import annotations

from typing import Any

from scipy.optimize import OptimizeResult

from dasklbfgs._format import human_bytes
from dasklbfgs.models.base import Model
from dasklbfgs.models.metrics import SCORES, evaluate_model, score_name
from dasklbfgs.solvers.registry import get_solver

__all__ = ["format_report", "interrupted_report", "train_report"]


def train_report(model: Model, result: OptimizeResult, data: Any, test: Any) -> dict[str, Any]:
    """The run's facts as plain data (the JSON of ``--json`` and the ``.npz`` report)."""
    report: dict[str, Any] = {
        "model": repr(model),
        "n_params": model.n_params,
        "solver": result.solver,
        "success": bool(result.success),
        "message": result.message,
        "train": evaluate_model(model, result.x, data),
    }
    if get_solver(result.solver).iterative:
        report.update({
            "objective": result.fun,
            "iterations": result.nit,
            "evaluations": result.nfev,
            "seconds": result.timing["total_seconds"],
            "seconds_per_evaluation": result.timing["eval_seconds_median"],
            "backup_tasks": {"launched": result.timing["backups_launched"], "won": result.timing["backups_won"]},
        })
    else:
        stats = result.stats
        report.update({
            "objective": report["train"]["objective"],
            "steps": result.nit,
            "seconds": stats["wall_seconds"],
            "updates_per_second": stats["updates_per_second"],
            "examples_per_second": stats["examples_per_second"],
            "steps_per_replica": stats["steps_per_replica"],
        })
        if result.solver == "downpour":
            report["staleness"] = stats["staleness"]
        else:
            report["between_replicas"] = {"messages": stats["messages_between_replicas"],
                                          "bytes": stats["bytes_between_replicas"],
                                          "center_exchanges": stats["center_exchanges"]}
            if stats["chosen_replica"] is not None:
                report["chosen_replica"] = stats["chosen_replica"]
    partitions = _partitions(result)
    if partitions is not None:
        report["partitions"] = partitions
    if test is not None:
        report["test"] = evaluate_model(model, result.x, test)
    return report


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
    chosen = get_solver(result.solver)
    losses = [entry[chosen.loss_key] for entry in result.history if chosen.loss_key in entry]
    return {
        "model": repr(model),
        "n_params": model.n_params,
        "solver": result.solver,
        "success": False,
        "message": result.message,
        "iterations" if chosen.iterative else "steps": int(result.nit),
        "objective": losses[-1] if losses else None,
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"model      {report['model']} ({report['n_params']} parameters)",
        f"objective  {report['objective']:.10g}",
        f"stopped    {report['message']} (success={report['success']})",
    ]
    if get_solver(report["solver"]).iterative:
        lines += [
            f"work       {report['iterations']} iterations, {report['evaluations']} evaluations, "
            f"{report['seconds']:.2f} s ({1e3 * report['seconds_per_evaluation']:.1f} ms per evaluation)",
            f"backups    {report['backup_tasks']['launched']} launched, {report['backup_tasks']['won']} won",
        ]
    else:
        lines.append(
            f"work       {report['steps']} steps over replicas {report['steps_per_replica']} in "
            f"{report['seconds']:.2f} s ({report['updates_per_second']:.0f} updates/s, "
            f"{report['examples_per_second']:.0f} examples/s)")
        if "staleness" in report:
            lines.append(f"staleness  {report['staleness']} (pushes by how many updates they lagged)")
        else:
            between = report["between_replicas"]
            lines.append(f"exchange   {between['messages']} messages, {human_bytes(between['bytes'])} between "
                         f"replicas; {between['center_exchanges']} center exchanges")
        if "chosen_replica" in report:
            lines.append(f"returned   replica {report['chosen_replica']} (best held-out objective, else recent loss)")
    if "partitions" in report:
        parts = report["partitions"]
        lines.append(f"partitions {parts['per_replica']} per replica, {parts['replicas']} replica(s); "
                     f"{human_bytes(parts['bytes_sent'])} sent between partitions; "
                     f"re-created {parts['recoveries']} time(s) after a lost worker")
    for split in ("train", "test"):
        if split in report:
            m = report[split]
            score = SCORES[score_name(m)].format(**m)
            lines.append(f"{split:<10} {m['n_samples']} rows: {score}, objective {m['objective']:.6g}")
    return "\n".join(lines)
