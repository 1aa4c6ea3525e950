"""``dasklbfgs data import SOURCE... DEST``: Parquet, CSV or svmlight files into a dataset,
read and written by the workers (local paths, URLs, globs)."""

from __future__ import annotations

import argparse
import re
from typing import Any

__all__ = ["add_parser"]

FORMATS = {"parquet": (".parquet", ".pq"), "csv": (".csv", ".csv.gz", ".tsv"),
           "svmlight": (".svm", ".svmlight", ".libsvm", ".svm.gz", ".libsvm.gz")}
DEFAULT_SHARD_ROWS = 50_000
ZERO_BASED: dict[str, bool | str] = {"auto": "auto", "true": True, "false": False}


def add_parser(data_sub: Any) -> None:
    from dasklbfgs.cli.cluster_args import add_cluster_arguments
    from dasklbfgs.cli.storage_args import add_storage_arguments
    from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS, LABEL_TASKS, MAX_INTEGER_CLASSES

    command_parser = data_sub.add_parser(
        "import", help="write Parquet, CSV or svmlight files as a dataset, read by the workers",
        description="Read SOURCE files (paths, URLs or globs; a folder of Parquet files) on the cluster's workers "
                    "and write them as a sharded dataset at DEST (a path or a URL). Numeric columns are features "
                    "as they are; text columns with few levels are one-hot encoded, with many levels hashed "
                    "(--hash-features); the choice is recorded in the dataset's schema. So is the task of the "
                    "labels, which 'dasklbfgs train' chooses its model by: text labels (stored as 0..K-1, the "
                    "class names recorded), and integers that are class indices 0..K-1 with K at most "
                    f"{MAX_INTEGER_CLASSES}, are classes: binary (logistic) or multiclass (softmax); floats and "
                    "many integers are regression; a few integers that are not class indices (-1 and 1) record "
                    "none (--task to choose).")
    command_parser.add_argument("source", nargs="+", help="files, globs or a Parquet folder (local or URLs)")
    command_parser.add_argument("dest", help="where to write the dataset (a path or a URL)")
    command_parser.add_argument("--format", choices=sorted(FORMATS), help="the files' format (default: from the "
                                                                          "first source's suffix)")
    table = command_parser.add_argument_group("tables (parquet, csv)")
    table.add_argument("--label", metavar="COL", help="the column of labels (no default: required for tables)")
    table.add_argument("--task", choices=LABEL_TASKS,
                       help="what the labels are for, recorded for 'dasklbfgs train' to choose its model: "
                            "classification (binary or multiclass by the classes found) takes numeric labels that "
                            "are class indices 0..K-1 as classes; regression, counts (Poisson) or amounts (Gamma) "
                            "keeps integer labels numbers (default: decided by the labels, as above)")
    table.add_argument("--features", metavar="COL,COL", help="the feature columns (default: all but label, weight "
                                                             "and offset)")
    table.add_argument("--weight", metavar="COL", help="a column of sample weights (default: none, every row weighs 1)")
    table.add_argument("--offset", metavar="COL",
                       help="a column of offsets, added to each row's linear predictor with no coefficient, in "
                            "training, evaluation and prediction: the log of each row's exposure for a Poisson "
                            "rate (default: none)")
    table.add_argument("--one-hot-max-levels", type=int, metavar="N", default=DEFAULT_ONE_HOT_MAX_LEVELS,
                       help=f"one-hot encode text columns of at most N levels (default: {DEFAULT_ONE_HOT_MAX_LEVELS})")
    table.add_argument("--hash-features", type=_power_or_int, metavar="N",
                       help="hash text columns with more levels (and crosses) into N columns, e.g. 2**22 "
                            "(default: none: such a column is an error)")
    table.add_argument("--cross", action="append", default=[], metavar="COL,COL",
                       help="hash the combined values of two columns as one feature (repeatable; default: none)")
    svm = command_parser.add_argument_group("svmlight")
    svm.add_argument("--n-features", type=int, metavar="N", help="number of columns (default: the largest index)")
    svm.add_argument("--zero-based", choices=("auto", "true", "false"), default="auto",
                     help="whether column indices start at 0 (default: auto, as scikit-learn decides)")
    command_parser.add_argument("--shard-rows", type=int, default=DEFAULT_SHARD_ROWS,
                                help=f"rows per shard (default: {DEFAULT_SHARD_ROWS})")
    command_parser.add_argument("--dtype", choices=("float64", "float32"), default=None,
                                help="stored dtype of X (default: float64)")
    command_parser.add_argument("--overwrite", action="store_true", help="replace a dataset already at DEST")
    command_parser.add_argument("--quiet", action="store_true", help="no summary")
    add_storage_arguments(command_parser)
    add_cluster_arguments(command_parser)
    command_parser.set_defaults(func=command)


def _power_or_int(text: str) -> int:
    """``2**22`` or ``4194304``."""
    match = re.fullmatch(r"\s*(\d+)\s*\*\*\s*(\d+)\s*", text)
    try:
        return int(match.group(1)) ** int(match.group(2)) if match else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a power such as 2**22, got {text!r}") from None


def source_format(sources: list[str], given: str | None) -> str:
    """The format ``--format`` gives, else the one the first source's suffix names."""
    from dasklbfgs.errors import ConfigurationError

    if given is not None:
        return given
    name = sources[0].rstrip("/").lower()
    for fmt, suffixes in FORMATS.items():
        if name.endswith(suffixes) or (fmt == "parquet" and name.endswith(".parquet/")):
            return fmt
    raise ConfigurationError(f"cannot tell the format of {sources[0]!r} from its name; pass --format "
                             f"({', '.join(sorted(FORMATS))})")


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.cluster_args import cluster_from_args
    from dasklbfgs.cli.format import format_description
    from dasklbfgs.cli.storage_args import storage_options_from_args
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.errors import ConfigurationError

    fmt = source_format(args.source, args.format)
    url_options = storage_options_from_args(args)
    written = dict(shard_rows=args.shard_rows, overwrite=args.overwrite, dtype=args.dtype,
                   storage_options=storage_options_from_args(args, args.dest))
    if fmt == "svmlight":
        table_flags = [f for f, v in (("--label", args.label), ("--features", args.features), ("--weight", args.weight),
                                      ("--offset", args.offset), ("--task", args.task),
                                      ("--hash-features", args.hash_features), ("--cross", args.cross)) if v]
        if table_flags:
            raise ConfigurationError(f"svmlight files take no {', '.join(table_flags)} (those are for tables: "
                                     "parquet, csv)")
    elif args.label is None:
        raise ConfigurationError(f"--label is required for {fmt} files: the column of labels")
    crosses = [_pair(text) for text in args.cross]
    with cluster_from_args(args) as client:
        if fmt == "svmlight":
            data = ShardedDataset.from_svmlight(
                args.dest, args.source, n_features=args.n_features, client=client,
                zero_based=ZERO_BASED[args.zero_based],
                **{**written, "storage_options": url_options})
        else:
            frame = _read_table(fmt, args.source, storage_options_from_args(args, args.source[0]))
            data = ShardedDataset.from_dataframe(
                args.dest, frame, label=args.label, weight=args.weight, offset=args.offset, client=client,
                features=args.features.split(",") if args.features else None, hash_features=args.hash_features,
                one_hot_max_levels=args.one_hot_max_levels, crosses=crosses, task=args.task, **written)
    if not args.quiet:
        print(format_description(data.describe()))
        if fmt != "svmlight" and "task" not in data.attrs:
            print(NO_TASK)
    return 0


#: what the import says of labels it records no task for: integers that are not class indices
NO_TASK = ("task      none recorded: the labels are integers that are not class indices 0..K-1; give --task "
           "(regression, counts, ...) or map them to 0..K-1 for classes, or name --model when training")


def _pair(text: str) -> tuple[str, str]:
    from dasklbfgs.errors import ConfigurationError

    parts = text.split(",")
    if len(parts) != 2 or not all(parts):
        raise ConfigurationError(f"--cross takes two columns as COL,COL, got {text!r}")
    return parts[0], parts[1]


def _read_table(fmt: str, sources: list[str], storage_options: dict[str, Any] | None) -> Any:
    """The Dask DataFrame of the files (read lazily: the workers read them)."""
    import dask.dataframe as dd

    from dasklbfgs.errors import InvalidDataError, StoreError

    paths = sources if len(sources) > 1 else sources[0]
    try:
        if fmt == "parquet":
            return dd.read_parquet(paths, storage_options=storage_options)
        return dd.read_csv(paths, storage_options=storage_options, sep="\t" if sources[0].endswith(".tsv") else ",",
                           blocksize="64MB")
    except FileNotFoundError as exc:
        raise InvalidDataError(f"no {fmt} file at {sources[0]!r}: {exc}") from exc
    except (OSError, ImportError) as exc:
        raise StoreError(f"cannot read {sources[0]!r}: {type(exc).__name__}: {exc}") from exc
