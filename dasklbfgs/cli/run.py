"""``dasklbfgs run CONFIG.yaml``: one end-to-end pipeline."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dasklbfgs.cli.cluster_args import (
    add_cluster_arguments,
    check_cluster_arguments,
    cluster_from_args,
    dashboard_line,
    keep_open,
)
from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED, INTERRUPTED, Interrupt, interrupted_line
from dasklbfgs.cli.logs import show_our_logs
from dasklbfgs.cli.report import split_line
from dasklbfgs.cli.storage_args import add_storage_arguments, merged_storage_options, storage_options_from_args
from dasklbfgs.cli.training import endings_in_the_report

__all__ = ["DEFAULT_OUTPUT", "add_parser", "summary_lines"]

#: where report folders go unless --output says: reports/<pipeline name>/ (ignored by the repository's .gitignore)
DEFAULT_OUTPUT = "reports"


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.pipeline import load_config, run_pipeline
    from dasklbfgs.pipeline.run import open_datasets

    check_cluster_arguments(args)
    config = load_config(args.config, args.set or ())
    # the flags over the config's storage_options: for its datasets, checkpoint and --output
    config["storage_options"] = merged_storage_options(config["storage_options"],
                                                       storage_options_from_args(args)) or {}
    if args.workers is None:
        args.workers = config["cluster"]["workers"]
    if not args.quiet:
        show_our_logs()
    # The data before the cluster: a missing dataset fails without waiting for a scheduler,
    # and a recipe's datasets are built here, once (the report counts that time).
    data = open_datasets(config)
    with Interrupt() as interrupt, cluster_from_args(args, interrupt) as client, endings_in_the_report():
        # the cluster stays up to the end: for --keep-open
        if not args.quiet:
            print(dashboard_line(client), file=sys.stderr, flush=True)
        metrics = run_pipeline(config, args.output, client=client, overwrite=args.overwrite,
                               callback=interrupt.check, data=data)
        if metrics["message"] == INTERRUPTED:
            return _interrupted(metrics, f"{metrics['report']}/model.npz")  # a folder or a URL
        if not args.quiet:
            print("\n".join(summary_lines(metrics, metrics["score"])), flush=True)
        if args.keep_open:
            keep_open(client, interrupt, sys.stderr)
        return 0 if metrics["success"] else 1


def summary_lines(metrics: dict[str, Any], score: str | None = None) -> list[str]:
    """A few lines on a finished pipeline (``metrics.json`` holds the rest): what ran, how
    it ended, each split's headline metrics (``score`` first, as ``train`` prints them), the
    time taken and the report folder."""
    durations = metrics["durations"]
    stats = metrics.get("solver_stats", {})
    count = next((f"{stats[key]} {key}" for key in ("fits", "iterations", "steps") if key in stats), None)
    return [
        f"pipeline   {metrics['pipeline']}: {metrics['model']}, {metrics['solver']}"
        + (f", {count}" if count else ""),
        f"stopped    {metrics['message']} (success={metrics['success']})",
        *(split_line(split, metrics[split], score) for split in ("train", "test") if split in metrics),
        f"took       {durations['total_seconds']:.1f} s (data {durations['data_seconds']:.1f} s, training "
        f"{durations['train_seconds']:.1f} s, scoring {durations['evaluate_seconds']:.1f} s)",
        f"report     {metrics['report']}/ ({', '.join(metrics['files'])}); every metric in metrics.json",
    ]


def _interrupted(metrics: dict[str, Any], saved: str) -> int:
    from dasklbfgs.solvers import get_solver

    unit = get_solver(metrics["solver"]).unit
    count = metrics["solver_stats"]["iterations" if unit == "iteration" else "steps"]
    print(interrupted_line(count, unit, saved), file=sys.stderr)
    return EXIT_INTERRUPTED


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run a pipeline from a YAML config (see pipelines/)")
    run.add_argument("config", help="YAML pipeline config")
    run.add_argument("--output", default=DEFAULT_OUTPUT,
                     help="where report folders go, a local folder or a URL (s3://...): OUTPUT/<pipeline name>, or "
                          f"<name>-2, -3, ... when that exists (default ./{DEFAULT_OUTPUT})")
    run.add_argument("--overwrite", action="store_true",
                     help="replace OUTPUT/<pipeline name> (once the new report is complete) instead of "
                          "writing the next free <name>-N")
    run.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                     help="override a config value, e.g. --set data.rows=5000 (repeatable; default: the config "
                          "as written)")
    run.add_argument("--quiet", action="store_true", help="no log lines, dashboard line or summary (metrics.json "
                                                          "in the report folder holds every figure)")
    add_storage_arguments(run)
    add_cluster_arguments(run)
    run.set_defaults(func=command)
