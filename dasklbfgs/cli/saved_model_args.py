"""``--params FILE --data PATH``: the saved model and the dataset of the commands that score
one (``evaluate``, ``predict``), loaded and checked against each other before a cluster
starts, each reached with the ``--storage-option`` flags when it is a URL."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dasklbfgs.cli.storage_args import add_storage_arguments, storage_options_from_args

if TYPE_CHECKING:
    import numpy as np

    from dasklbfgs.data.sharded import ShardedDataset
    from dasklbfgs.models.base import Model

__all__ = ["add_saved_model_arguments", "saved_model_and_data"]


def add_saved_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--params``, ``--data`` and ``--storage-option``."""
    parser.add_argument("--params", required=True, metavar="FILE",
                        help="the model file (.npz, by 'dasklbfgs train --output' or a pipeline; a local path or a "
                             "URL)")
    parser.add_argument("--data", required=True, metavar="PATH", help="the dataset (a local path or a URL)")
    add_storage_arguments(parser)


def saved_model_and_data(args: argparse.Namespace, *, labels: bool) -> tuple[Model, np.ndarray, ShardedDataset]:
    """The model and parameters in ``--params`` and the dataset ``--data``, checked: the
    model reads its rows (and with ``labels``, takes its labels and weights: scoring);
    a mismatch is a :class:`~dasklbfgs.errors.ModelDataMismatchError` naming both."""
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.models.persist import load_params

    model, params, _ = load_params(args.params, storage_options=storage_options_from_args(args, args.params))
    data = ShardedDataset.open(args.data, storage_options=storage_options_from_args(args, args.data))
    if labels:
        model.check_data(data)
    else:
        model.check_features(data)
    return model, params, data
