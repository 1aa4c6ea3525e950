"""``dasklbfgs evaluate --params FILE --data PATH``: a saved model's metrics on a dataset,
computed by the workers."""

from __future__ import annotations

import argparse
from typing import Any

from dasklbfgs.cli.cluster_args import add_cluster_arguments, cluster_from_args
from dasklbfgs.cli.format import json_text
from dasklbfgs.cli.saved_model_args import add_saved_model_arguments, saved_model_and_data

__all__ = ["add_parser", "format_metrics"]


def add_parser(sub: Any) -> None:
    command_parser = sub.add_parser(
        "evaluate", help="score a saved model on a dataset (metrics by the workers)",
        description="Score the model saved in --params (by 'dasklbfgs train --output' or a pipeline) on the "
                    "dataset --data: the objective and the metrics of the model's task under scikit-learn's "
                    "names, weighted where the data has weights, computed by the cluster's workers a shard each.")
    add_saved_model_arguments(command_parser)
    command_parser.add_argument("--metrics", metavar="NAME,NAME",
                                help="the metrics to compute (default: all of the model's task)")
    command_parser.add_argument("--json", action="store_true",
                                help="print JSON instead of text (a metric the data leaves undefined, such as the "
                                     "ROC AUC of one class, is null)")
    add_cluster_arguments(command_parser)
    command_parser.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.scoring.evaluation import chosen_metrics, evaluated

    model, params, data = saved_model_and_data(args, labels=True)  # before a cluster starts
    names = chosen_metrics(model.task, args.metrics.split(",") if args.metrics else None)
    with cluster_from_args(args) as client:
        found = evaluated(model, params, data, names, client)
    print(json_text(found) if args.json else format_metrics(found))
    return 0


def format_metrics(metrics: dict[str, Any]) -> str:
    """One line per metric, the confusion matrix as its rows."""
    width = max(len(name) for name in metrics)
    lines = []
    for name, value in metrics.items():
        if name == "confusion_matrix":
            lines.append(f"{name:<{width}}  (rows: true class, columns: predicted)")
            lines += [f"{'':<{width}}  " + " ".join(f"{v:>10.6g}" for v in row) for row in value]
        elif isinstance(value, float):
            lines.append(f"{name:<{width}}  {value:.6g}")
        else:
            lines.append(f"{name:<{width}}  {value}")
    return "\n".join(lines)
