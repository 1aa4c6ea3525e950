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
from dasklbfgs.cli.format import json_text
from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED, INTERRUPTED, Interrupt, interrupted_line
from dasklbfgs.cli.logs import show_our_logs
from dasklbfgs.cli.storage_args import add_storage_arguments, merged_storage_options, storage_options_from_args
from dasklbfgs.cli.training import endings_in_the_report

__all__ = ["add_parser"]


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
            summary = {k: metrics[k] for k in ("pipeline", "run_id", "solver", "success", "message")}
            summary |= {s: metrics[s] for s in ("train", "test") if s in metrics} | {"durations": metrics["durations"]}
            print(json_text(summary))
            print(f"report in {metrics['report']}/ ({', '.join(metrics['files'])})")
        if args.keep_open:
            keep_open(client, interrupt, sys.stderr)
        return 0 if metrics["success"] else 1


def _interrupted(metrics: dict[str, Any], saved: str) -> int:
    from dasklbfgs.solvers import get_solver

    unit = get_solver(metrics["solver"]).unit
    count = metrics["solver_stats"]["iterations" if unit == "iteration" else "steps"]
    print(interrupted_line(count, unit, saved), file=sys.stderr)
    return EXIT_INTERRUPTED


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run a pipeline from a YAML config (see pipelines/)")
    run.add_argument("config", help="YAML pipeline config")
    run.add_argument("--output", default="pipeline-output",
                     help="where report folders go, a local folder or a URL (s3://...): OUTPUT/<pipeline name>, or "
                          "<name>-2, -3, ... when that exists (default ./pipeline-output)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace OUTPUT/<pipeline name> (once the new report is complete) instead of "
                          "writing the next free <name>-N")
    run.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                     help="override a config value, e.g. --set data.rows=5000 (repeatable; default: the config "
                          "as written)")
    run.add_argument("--quiet", action="store_true", help="no log lines, dashboard line or summary")
    add_storage_arguments(run)
    add_cluster_arguments(run)
    run.set_defaults(func=command)
