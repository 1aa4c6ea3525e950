"""Write every dataset recipe, at a small size, under the folder given on the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from dasklbfgs.data import make_dataset
from dasklbfgs.data.recipes import RECIPES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()
    for kind in ("logistic", "multinomial", "regression", "counts", "amounts"):  # the synthetic recipes, at any size
        classes = {"n_classes": 10} if "n_classes" in RECIPES[kind].takes else {}
        make_dataset(kind, args.root / kind, rows=args.rows, features=args.features,
                     shard_rows=25_000, overwrite=args.overwrite, **classes)
        print(f"wrote {args.root / kind}")
    for kind in ("digits", "breast_cancer", "wine"):  # scikit-learn's bundled data
        make_dataset(kind, args.root / kind, overwrite=args.overwrite)
        print(f"wrote {args.root / kind}")
    workloads = [  # (folder, kind, options)
        ("claims", "claims", {"rows": args.rows}),
        ("acoustic", "acoustic", {"rows": 20_000}),
        ("patches", "patches", {"image_source": "digits"}),  # 10,000 6x6 patches
        ("patches_synthetic", "patches", {"image_source": "synthetic", "rows": 20_000}),
        ("text", "text", {}),  # every pair of the docstring corpus
    ]
    for folder, kind, options in workloads:
        make_dataset(kind, args.root / folder, shard_rows=10_000, overwrite=args.overwrite, **options)
        print(f"wrote {args.root / folder}")


if __name__ == "__main__":
    main()
