"""``dasklbfgs demo``: build a sample dataset and train on an embedded cluster."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dasklbfgs.cli.cluster_args import (
    add_embedded_cluster_arguments,
    check_cluster_arguments,
    dashboard_line,
    dashboard_link,
    embedded_dashboard_address,
    keep_open,
    started_client,
)
from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED, INTERRUPTED, Interrupt, interrupted_line
from dasklbfgs.cli.report import format_report, train_report
from dasklbfgs.cli.training import train_with_progress

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["NEXT_STEPS", "add_parser"]

#: the end of what the demo prints: the same on one's own data, on a cluster, and where to read on
NEXT_STEPS = """\
next steps
  your data  dasklbfgs data import rows.csv mydata --label clicked    (CSV, Parquet or svmlight files)
             dasklbfgs train --data mydata --l2 1e-4 --standardize --output model.npz    (the model from the labels)
  a cluster  dasklbfgs cluster start    (then add --scheduler-file dasklbfgs-cluster.json to train)
  the guide  docs/guide.md in the dasklbfgs repository; dasklbfgs COMMAND --help lists every flag"""


def _at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="build a sample dataset and train on an embedded cluster",
                          description="Write an ill-conditioned logistic dataset, start an embedded cluster "
                                      "with its dashboard and train on it with Sandblaster L-BFGS.",
)
    demo.add_argument("--rows", type=_at_least(100), default=200_000, help="training rows to generate")
    demo.add_argument("--features", type=int, default=50, help="features per row")
    demo.add_argument("--shard-rows", type=int, default=25_000, help="rows per Zarr shard")
    demo.add_argument("--l2", type=float, default=1e-4, help="L2 penalty of the logistic model")
    add_embedded_cluster_arguments(demo)
    demo.add_argument("--keep", metavar="DIR", default=None,
                      help="keep the sample dataset (and, after Ctrl-C, the parameters) under DIR "
                           "(default: a temporary folder, removed)")
    demo.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cluster import connect

    check_cluster_arguments(args)
    with contextlib.ExitStack() as stack:
        folder = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        train, test, written = _write_data(args, folder / "demo-data")
        interrupt = stack.enter_context(Interrupt())
        print(written, flush=True)  # Ctrl-C from here on is the Interrupt's, during the start too
        client = stack.enter_context(started_client(
            lambda: connect(n_workers=args.workers, dashboard_address=embedded_dashboard_address(args)), interrupt))
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        print(f"cluster    embedded LocalCluster, {n_workers} workers x 1 thread")
        print(dashboard_line(client))
        if dashboard_link(client):
            print("           stays up after the demo, until Ctrl-C (--keep-open)" if args.keep_open else
                  "           closes when the demo ends; --keep-open keeps it up until Ctrl-C", flush=True)
        code = _train(args, client, train, test, interrupt)
        if args.keep:
            print(f"kept       {folder / 'demo-data'}")
        if code == EXIT_INTERRUPTED:
            return code
        print(f"\n{NEXT_STEPS}", flush=True)
        if args.keep_open:
            keep_open(client, interrupt)
    return code


def _write_data(args: argparse.Namespace, path: Path) -> tuple[Any, Any, str]:
    """The sample dataset's train and test splits, and the line that tells of them."""
    from dasklbfgs.data import make_dataset

    started = time.perf_counter()
    splits = make_dataset("logistic", path, rows=args.rows, features=args.features, shard_rows=args.shard_rows,
                          seed=0, ill_conditioned=True, overwrite=True)
    train, test = splits["train"], splits["test"]
    return train, test, (f"data       {train.n_samples} x {train.n_features} logistic rows (features scaled over 4 "
                         f"decades) in {train.n_shards} Zarr shard{'' if train.n_shards == 1 else 's'}, "
                         f"{test.n_samples} held out; written in {time.perf_counter() - started:.1f} s")


def _train(args: argparse.Namespace, client: Client, train: Any, test: Any, interrupt: Interrupt) -> int:
    """Train, print the report (or the one line of a Ctrl-C) and return the exit code."""
    from dasklbfgs.models import Logistic
    from dasklbfgs.models.persist import save_params
    from dasklbfgs.solvers import SandblasterOptions

    model = Logistic(train.n_features, l2=args.l2)
    options = SandblasterOptions(standardize=True, maxiter=200, gtol=1e-6)
    result = train_with_progress(client, model, train, "sandblaster", options, interrupt=interrupt)
    if result.message == INTERRUPTED:
        saved = save_params(Path(args.keep) / "demo-model.npz", model, result.x) if args.keep else None
        print(interrupted_line(result.nit, "iteration", None if saved is None else str(saved)), file=sys.stderr)
        return EXIT_INTERRUPTED
    print(format_report(train_report(model, result, train, test, client)))
    return 0 if result.success else 1

