"""``dasklbfgs predict --params FILE --data PATH --output PATH``: a saved model's predictions
for every row of a dataset, written by the workers as a Zarr store beside the data."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from dasklbfgs.cli.cluster_args import add_cluster_arguments, cluster_from_args
from dasklbfgs.cli.storage_args import add_storage_arguments, storage_options_from_args

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from dasklbfgs.scoring.predictions import KINDS, PREDICTIONS

    command_parser = sub.add_parser(
        "predict", help="write a saved model's predictions for a dataset (by the workers)",
        description="Compute the predictions of the model saved in --params for every row of --data on the "
                    "cluster's workers, a shard each, and write them to --output as a Zarr store (array "
                    f"'{PREDICTIONS}', chunked like the dataset's shards, row for row), committed atomically.")
    command_parser.add_argument("--params", required=True, metavar="FILE",
                                help="the model file (.npz; a local path or a URL)")
    command_parser.add_argument("--data", required=True, metavar="PATH", help="the dataset (a local path or a URL)")
    command_parser.add_argument("--output", required=True, metavar="PATH",
                                help="where to write the predictions (a path the workers share, or a URL)")
    command_parser.add_argument("--kind", choices=list(KINDS), default="predict",
                                help="labels or values (predict), class probabilities (proba) or scores before "
                                     "the link (decision) (default: predict)")
    command_parser.add_argument("--overwrite", action="store_true", help="replace a store already at --output")
    command_parser.add_argument("--quiet", action="store_true", help="no summary")
    add_storage_arguments(command_parser)
    add_cluster_arguments(command_parser)
    command_parser.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.data.location import Location
    from dasklbfgs.models.persist import load_params
    from dasklbfgs.scoring.predictions import predict

    model, params, _ = load_params(args.params, storage_options=storage_options_from_args(args, args.params))
    data = ShardedDataset.open(args.data, storage_options=storage_options_from_args(args, args.data))
    model.check_features(data)  # before a cluster starts
    output = Location.of(args.output, storage_options_from_args(args, args.output))
    started = time.perf_counter()
    with cluster_from_args(args) as client:
        try:
            written = predict(model, params, data, output=output, kind=args.kind, client=client,
                              overwrite=args.overwrite)
        except KeyboardInterrupt:  # the tasks are cancelled and what they wrote removed
            print(f"interrupted; nothing written to {output.url}", file=sys.stderr)
            return EXIT_INTERRUPTED
    if not args.quiet:
        print(f"wrote {args.kind} predictions, shape {tuple(written.shape)}, to {output.url} in "
              f"{time.perf_counter() - started:.1f} s")
    return 0
