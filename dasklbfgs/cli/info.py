"""``dasklbfgs info PATH``: describe a sharded dataset or a train/test folder."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dasklbfgs.cli.storage_args import add_storage_arguments, storage_options_from_args

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    info = sub.add_parser("info", help="describe a sharded dataset (or a train/test folder)")
    info.add_argument("path", help="a ShardedDataset, or a folder of them (a recipe's train/ and test/): a local "
                                   "path or a URL")
    add_storage_arguments(info)
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.format import format_description
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.data.location import Location
    from dasklbfgs.data.sharded import datasets_below

    location = Location.of(args.path, storage_options_from_args(args, args.path))
    # train/test of a recipe, say
    splits = datasets_below(location) if location.exists() and not location.exists("zarr.json") else []
    datasets = [ShardedDataset.open(location / name) for name in splits] or [ShardedDataset.open(location)]
    infos = [d.describe() for d in datasets]
    if args.json:
        print(json.dumps(infos if len(infos) > 1 else infos[0], indent=2))
    else:
        print("\n\n".join(format_description(i) for i in infos))
    return 0
