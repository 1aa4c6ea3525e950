"""``dasklbfgs predict --params FILE --data PATH --output PATH``: a saved model's predictions
for every row of a dataset, written by the workers as a Zarr store or Parquet files beside
the data, with a progress line on a terminal."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from dasklbfgs.cli.cluster_args import add_cluster_arguments, cluster_from_args
from dasklbfgs.cli.saved_model_args import add_saved_model_arguments, saved_model_and_data
from dasklbfgs.cli.storage_args import storage_options_from_args

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    from dasklbfgs.scoring.predictions import FORMATS, KINDS, PREDICTIONS

    command_parser = sub.add_parser(
        "predict", help="write a saved model's predictions for a dataset (by the workers)",
        description="Compute the predictions of the model saved in --params for every row of --data on the "
                    "cluster's workers, a shard each, and write them to --output, committed atomically: a Zarr "
                    f"store (array '{PREDICTIONS}', chunked like the dataset's shards, row for row), or a folder of "
                    "Parquet files, one per shard in order, with the column 'row' (the row's index in --data) then "
                    "the predictions.")
    add_saved_model_arguments(command_parser)
    command_parser.add_argument("--output", required=True, metavar="PATH",
                                help="where to write the predictions (a path the workers share, or a URL)")
    command_parser.add_argument("--kind", choices=list(KINDS), default="predict",
                                help="labels or values (predict), class probabilities (proba) or scores before "
                                     "the link (decision) (default: predict)")
    command_parser.add_argument("--format", choices=list(FORMATS), default="zarr",
                                help="a Zarr store, or a folder of Parquet files part-00000.parquet... with the "
                                     "columns row, then prediction, proba_0.., decision or decision_0.. (default: "
                                     "zarr)")
    command_parser.add_argument("--overwrite", action="store_true", help="replace predictions already at --output")
    command_parser.add_argument("--quiet", action="store_true",
                                help="no progress line (it only shows on a terminal) and no summary")
    add_cluster_arguments(command_parser)
    command_parser.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED
    from dasklbfgs.data.location import Location
    from dasklbfgs.scoring.predictions import predict

    model, params, data = saved_model_and_data(args, labels=False)  # before a cluster starts
    output = Location.of(args.output, storage_options_from_args(args, args.output))
    started = time.perf_counter()
    with cluster_from_args(args) as client:
        try:
            with WriteProgress(data.n_shards, "predicting", quiet=args.quiet) as progress:
                written = predict(model, params, data, output=output, kind=args.kind, format=args.format,
                                  client=client, overwrite=args.overwrite, on_progress=progress)
        except KeyboardInterrupt:  # the tasks are cancelled, and what they wrote removed once they have ended
            print(f"interrupted; nothing written to {output.url}", file=sys.stderr)
            return EXIT_INTERRUPTED
    if not args.quiet:
        print(summary(args.kind, args.format, data.n_samples, written, output.url, time.perf_counter() - started))
    return 0


#: what the rows written hold, by --kind
KIND_WORDS = {"predict": "predictions", "proba": "class probabilities", "decision": "decision scores"}


def summary(kind: str, format: str, n_rows: int, written: Any, url: str, seconds: float) -> str:
    """The line that says what was written: ``wrote 50,000 predictions (columns row,
    prediction) to URL in 1.2 s``; a Zarr store's array and its shape in the parentheses."""
    from dasklbfgs.scoring.predictions import PREDICTIONS

    rows = f"{n_rows:,} row{'' if n_rows == 1 else 's'}"
    what = rows.replace("row", "prediction") if kind == "predict" else f"the {KIND_WORDS[kind]} of {rows}"
    layout = f"array '{PREDICTIONS}' of shape {tuple(written.shape)}" if format == "zarr" else \
        f"columns {', '.join(map(str, written.columns))}"
    return f"wrote {what} ({layout}) to {url} in {seconds:.1f} s"


class WriteProgress:
    """The progress line of a write by the workers a shard at a time (on a terminal, unless
    ``quiet``): shards written against the total, rows written a second, the time left.
    ``with WriteProgress(...) as progress:`` call ``progress(shards, rows)``; the line ends
    on leaving."""

    def __init__(self, n_shards: int, label: str, *, quiet: bool = False) -> None:
        from dasklbfgs.monitor.progress import Progress

        self.line = Progress(n_shards, label, enabled=False if quiet else None)
        self.started = time.perf_counter()

    def __call__(self, shards: int, rows: int) -> None:
        self.line.update(shards, **{"rows/s": round(rows / max(time.perf_counter() - self.started, 1e-9))})

    def __enter__(self) -> WriteProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.line.close()
