"""Write every dataset recipe, at a small size, under the folder given on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from dasklbfgs.data import make_dataset
from dasklbfgs.data.recipes import BUNDLED, SYNTHETIC


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()
    for kind in SYNTHETIC:
        make_dataset(kind, args.root / kind, rows=args.rows, features=args.features,
                     shard_rows=25_000, n_classes=10, overwrite=args.overwrite)
        print(f"wrote {args.root / kind}")
    for kind in BUNDLED:
        make_dataset(kind, args.root / kind, overwrite=args.overwrite)
        print(f"wrote {args.root / kind}")


if __name__ == "__main__":
    main()
