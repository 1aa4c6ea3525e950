"""``dasklbfgs demo``: build a sample dataset and train on an embedded cluster."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from dasklbfgs.cli.cluster_args import dashboard_line
from dasklbfgs.cli.report import format_report, train_report
from dasklbfgs.cli.training import train_with_progress

__all__ = ["add_parser"]


def _at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="build a sample dataset and train on an embedded cluster")
    demo.add_argument("--rows", type=_at_least(100), default=200_000)
    demo.add_argument("--features", type=int, default=50)
    demo.add_argument("--shard-rows", type=int, default=25_000)
    demo.add_argument("--l2", type=float, default=1e-4)
    demo.add_argument("--workers", type=int, default=None)
    demo.add_argument("--dashboard-address", default="127.0.0.1:8787")
    demo.add_argument("--keep", metavar="DIR", help="keep the sample dataset under DIR")
    demo.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cluster import connect
    from dasklbfgs.data import make_dataset
    from dasklbfgs.models import Logistic
    from dasklbfgs.solvers import SandblasterOptions

    with contextlib.ExitStack() as stack:
        folder = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        started = time.perf_counter()
        splits = make_dataset(
            "logistic", folder / "demo-data", rows=args.rows, features=args.features,
            shard_rows=args.shard_rows, seed=0, ill_conditioned=True, overwrite=True,
        )
        train, test = splits["train"], splits["test"]
        print(f"data       {train.n_samples} x {train.n_features} logistic rows "
              f"(features scaled over 4 decades) in {train.n_shards} Zarr shard{'' if train.n_shards == 1 else 's'}, "
              f"{test.n_samples} held out; written in {time.perf_counter() - started:.1f} s")
        client = connect(n_workers=args.workers, dashboard_address=args.dashboard_address)
        stack.callback(client.close)
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        print(f"cluster    embedded LocalCluster, {n_workers} workers x 1 thread")
        print(dashboard_line(client))
        model = Logistic(train.n_features, l2=args.l2)
        options = SandblasterOptions(standardize=True, maxiter=200, gtol=1e-6)
        result = train_with_progress(client, model, train, "sandblaster", options)
        print(format_report(train_report(model, result, train, test)))
        if args.keep:
            print(f"kept       {folder / 'demo-data'}")
    return 0 if result.success else 1
