"""``dasklbfgs data make KIND PATH``: write a recipe's train/test datasets (``data import``: see
:mod:`dasklbfgs.cli.data_import`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from dasklbfgs.cli.data_import import add_parser as add_import_parser
    from dasklbfgs.cli.solver_flags import add_option_flags
    from dasklbfgs.cli.storage_args import add_storage_arguments
    from dasklbfgs.data.recipes import RECIPES, RecipeOptions

    data = sub.add_parser("data", help="dataset commands")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    make = data_sub.add_parser(
        "make",
        help="write a recipe's train/test datasets",
        description="Write PATH/train and PATH/test for a synthetic, bundled or workload recipe.",
    )
    make.add_argument("kind", choices=RECIPES, help="the recipe")
    make.add_argument("path", help="folder to write train/ and test/ into (a path or a URL)")
    add_option_flags(make, RecipeOptions)
    make.add_argument("--overwrite", action="store_true", help="replace datasets already at PATH")
    make.add_argument("--quiet", action="store_true", help="no progress line or summary")
    add_storage_arguments(make)
    make.set_defaults(func=command)
    add_import_parser(data_sub)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.format import format_description
    from dasklbfgs.cli.solver_flags import given_options
    from dasklbfgs.cli.storage_args import storage_options_from_args
    from dasklbfgs.data import make_dataset
    from dasklbfgs.data.recipes import RecipeOptions
    from dasklbfgs.monitor.progress import Progress

    bars: dict[str, Progress] = {}

    def show(split: str, rows: int) -> None:
        if split not in bars:
            for bar in bars.values():
                bar.close()
            bars[split] = Progress(None, f"writing {split}", enabled=False if args.quiet else None)
        bars[split].update(rows, unit="rows")

    try:
        splits = make_dataset(args.kind, args.path, **given_options(args, RecipeOptions.fields()),
                              overwrite=args.overwrite, on_progress=show,
                              storage_options=storage_options_from_args(args, args.path))
    finally:
        for bar in bars.values():
            bar.close()
    if not args.quiet:
        print("\n\n".join(format_description(d.describe()) for d in splits.values()))
    return 0
