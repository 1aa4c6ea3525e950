"""``dasklbfgs train``: any registered solver on a sharded dataset."""

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
from dasklbfgs.cli.report import format_report, interrupted_report, train_report
from dasklbfgs.cli.solver_flags import add_option_flags, add_solver_flags, given_options, options_from_args
from dasklbfgs.cli.storage_args import add_storage_arguments, storage_options_from_args
from dasklbfgs.cli.training import train_with_progress
from dasklbfgs.data.location import Location
from dasklbfgs.errors import OutputExistsError

__all__ = ["EXAMPLES", "add_parser"]

#: the end of ``dasklbfgs train --help``
EXAMPLES = """\
examples:
  dasklbfgs data make multinomial data/mn --rows 100000 --features 20 --classes 5
  dasklbfgs train --data data/mn/train --test data/mn/test --l2 1e-4 --output mn.npz
  dasklbfgs train --data data/mn/train --solver downpour --replicas 4 --learning-rate 0.1 --epochs 2
  dasklbfgs train --data s3://bucket/mn/train --scheduler tcp://10.0.0.5:8786 --storage-option profile=ml"""


def add_parser(sub: Any) -> None:
    from dasklbfgs.models.registry import MODEL_CHOICES, TORCH_PREFIX, ModelOptions
    from dasklbfgs.solvers import get_solver, solver_names

    names = solver_names()
    train = sub.add_parser("train", help="train a model on a sharded dataset with any solver",
                           usage="%(prog)s --data PATH [options]", epilog=EXAMPLES,
                           description="Train a model on a sharded dataset. Solvers: " + "; ".join(
                               f"{n} ({get_solver(n).options.__name__})" for n in names))
    train.add_argument("--data", required=True, help="training dataset (a ShardedDataset's path or URL)")
    train.add_argument("--test", help="held-out dataset to score (default: none)")
    add_storage_arguments(train)
    train.add_argument("--model", choices=MODEL_CHOICES, default=None, metavar="MODEL",
                       help=f"the model: one of {', '.join(MODEL_CHOICES)}, or {TORCH_PREFIX}package.module:factory "
                            "for a torch module of yours (--loss, --input-shape) (default: what the dataset's "
                            "recorded task implies: binary -> logistic, multiclass -> softmax, regression -> "
                            "least_squares, unsupervised -> sparse_autoencoder, a vocabulary -> embedding_lm)")
    add_option_flags(train.add_argument_group("model options"), ModelOptions)
    train.add_argument("--solver", choices=names, default=names[0], help=f"default {names[0]}")
    add_solver_flags(train)
    train.add_argument("--output", default="dasklbfgs-model.npz",
                       help="where to save the parameters and the run's report as one .npz file: a local path or a "
                            "URL (s3://bucket/model.npz, written with one put) (default dasklbfgs-model.npz)")
    train.add_argument("--overwrite", action="store_true", help="replace an existing --output file or object")
    train.add_argument("--json", action="store_true", help="print the report as JSON")
    train.add_argument("--quiet", action="store_true",
                       help="no dashboard line, and no progress line (it only shows on a terminal)")
    add_cluster_arguments(train)
    train.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.models import model_for_dataset
    from dasklbfgs.models.persist import save_params
    from dasklbfgs.models.registry import ModelOptions, default_model
    from dasklbfgs.solvers import get_solver
    from dasklbfgs.solvers.common_options import with_checkpoint_storage

    # Bad flags, missing datasets and a model that does not fit the data fail before a cluster starts.
    check_cluster_arguments(args)
    # --storage-option reaches a checkpoint at a URL too (the datasets get theirs below)
    options = with_checkpoint_storage(options_from_args(args, args.solver), storage_options_from_args(args))
    output = Location.of(args.output, storage_options_from_args(args, args.output))  # a file, or an object at a URL
    if output.exists() and not args.overwrite:
        raise OutputExistsError(f"--output {args.output!r} exists (an earlier run's parameters); pass --overwrite to "
                                "replace it or choose another --output")
    if not output.is_local:  # refused credentials or a missing bucket cost no training
        output.parent.check_writable(f"--output {args.output!r}")
    data = ShardedDataset.open(args.data, storage_options_from_args(args, args.data))
    test = ShardedDataset.open(args.test, storage_options_from_args(args, args.test)) if args.test else None
    model = model_for_dataset(args.model or default_model(data), data, **given_options(args, ModelOptions.fields()))
    # Ctrl-C until the command returns (a second one aborts the saving too); the cluster until
    # then as well, for --keep-open
    with Interrupt() as interrupt, cluster_from_args(args, interrupt) as client:
        for dataset in (data, test) if test is not None else (data,):
            dataset.check_workers_can_read(client)
        if not args.quiet:
            print(dashboard_line(client), file=sys.stderr, flush=True)
        result = train_with_progress(client, model, data, args.solver, options, eval_data=test,
                                     quiet=args.quiet or args.json, interrupt=interrupt)
        if result.message == INTERRUPTED:
            report = interrupted_report(model, result)
        else:
            report = train_report(model, result, data, test, client)
        report["dataset"] = data.url
        report["options"] = options.to_json()
        save_params(output, model, result.x, report)
        report["output"] = output.url
        if result.message == INTERRUPTED:
            print(interrupted_line(result.nit, get_solver(args.solver).unit, args.output), file=sys.stderr)
            return EXIT_INTERRUPTED
        if args.json:
            print(json_text(report))
        else:
            print(format_report(report))
            print(f"saved      {args.output}")
        if args.keep_open:
            keep_open(client, interrupt, sys.stderr)
        return 0 if result.success else 1
