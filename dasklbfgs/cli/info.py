"""``dasklbfgs info PATH``: describe a sharded dataset or a train/test folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    info = sub.add_parser("info", help="describe a sharded dataset (or a train/test folder)")
    info.add_argument("path", help="a ShardedDataset, or a folder of them (a recipe's train/ and test/)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.format import format_description
    from dasklbfgs.data import ShardedDataset

    path = Path(args.path)
    folder = path.is_dir() and not (path / "zarr.json").exists()  # train/test of a recipe, say
    splits = sorted(p for p in path.iterdir() if (p / "zarr.json").exists()) if folder else []
    datasets = [ShardedDataset.open(p) for p in splits] or [ShardedDataset.open(path)]
    infos = [d.describe() for d in datasets]
    if args.json:
        print(json.dumps(infos if len(infos) > 1 else infos[0], indent=2))
    else:
        print("\n\n".join(format_description(i) for i in infos))
    return 0
