"""``dasklbfgs data make KIND PATH``: write a recipe's train/test datasets."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from dasklbfgs.data.recipes import RECIPES
    from dasklbfgs.data.workloads import PATCH_SOURCES

    data = sub.add_parser("data", help="dataset commands")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    make = data_sub.add_parser(
        "make",
        help="write a recipe's train/test datasets",
        description="Write PATH/train and PATH/test for a synthetic, bundled or workload recipe.",
    )
    make.add_argument("kind", choices=RECIPES)
    make.add_argument("path")
    make.add_argument("--rows", type=int, help="training rows (synthetic recipes)")
    make.add_argument("--features", type=int, help="features (synthetic recipes)")
    make.add_argument("--shard-rows", type=int, default=50_000)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--classes", type=int,
                      help="classes (multinomial recipe: default 3; acoustic: default 128)")
    make.add_argument("--ill-conditioned", action="store_true",
                      help="scale features over four orders of magnitude")
    make.add_argument("--test-fraction", type=float, default=0.2)
    make.add_argument("--patch-size", type=int, help="patch side (patches recipe: default 6)")
    make.add_argument("--image-source", choices=PATCH_SOURCES,
                      help="images to cut patches from (patches recipe: default synthetic)")
    make.add_argument("--vocab", type=int, help="vocabulary size (text recipe: default 2000)")
    make.add_argument("--context", type=int, help="previous words per pair (text recipe: default 3)")
    make.add_argument("--overwrite", action="store_true")
    make.add_argument("--quiet", action="store_true")
    make.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.format import format_description
    from dasklbfgs.data import make_dataset
    from dasklbfgs.monitor.progress import Progress

    bars: dict[str, Progress] = {}

    def show(split: str, rows: int) -> None:
        if split not in bars:
            for bar in bars.values():
                bar.close()
            bars[split] = Progress(None, f"writing {split}", enabled=False if args.quiet else None)
        bars[split].update(rows, unit="rows")

    try:
        splits = make_dataset(
            args.kind, args.path, rows=args.rows, features=args.features, shard_rows=args.shard_rows,
            seed=args.seed, n_classes=args.classes, ill_conditioned=args.ill_conditioned,
            test_fraction=args.test_fraction, patch_size=args.patch_size, image_source=args.image_source,
            vocab_size=args.vocab, context=args.context, overwrite=args.overwrite, on_progress=show,
        )
    finally:
        for bar in bars.values():
            bar.close()
    if not args.quiet:
        print("\n\n".join(format_description(d.describe()) for d in splits.values()))
    return 0
