"""Dataset recipes: synthetic planted models and scikit-learn's bundled real datasets.

Every recipe writes a *dataset folder* holding two sharded datasets, ``train`` and
``test``; open them with ``ShardedDataset.open(path / "train")``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dasklbfgs.data._validate import check_shard_rows
from dasklbfgs.data._writer import check_target, written_aside
from dasklbfgs.data.sharded import ShardedDataset
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.errors import ConfigurationError

SYNTHETIC = {"logistic": "binary", "multinomial": "multiclass", "regression": "regression"}
BUNDLED = {"digits": "multiclass", "breast_cancer": "binary", "wine": "multiclass"}
RECIPES = tuple(SYNTHETIC) + tuple(BUNDLED)
TEST_BLOCK_OFFSET = 1_000_000  # test rows come from generator blocks no train row uses


def make_dataset(
    kind: str,
    path: os.PathLike[str] | str,
    *,
    rows: int | None = None,
    features: int | None = None,
    shard_rows: int = 50_000,
    seed: int = 0,
    n_classes: int = 3,
    ill_conditioned: bool = False,
    test_fraction: float = 0.2,
    overwrite: bool = False,
) -> dict[str, ShardedDataset]:
    """Write the ``train`` and ``test`` datasets of recipe ``kind`` under ``path``.

    Parameters
    ----------
    kind
        ``"logistic"``, ``"multinomial"``, ``"regression"`` (synthetic, any size) or
        ``"digits"``, ``"breast_cancer"``, ``"wine"`` (scikit-learn's bundled data).
    rows, features
        Size of the synthetic training set (test rows are ``test_fraction`` of it on top).
        The bundled datasets have a fixed size; giving either is an error.
    shard_rows
        Rows per shard.
    seed
        Seeds the generator and the train/test split.
    n_classes
        Classes of the multinomial recipe.
    ill_conditioned
        Scale synthetic features over four orders of magnitude.
    test_fraction
        Fraction held out (bundled) or generated on top (synthetic), in [0, 1).
    overwrite
        Replace an existing folder at ``path``.

    Returns
    -------
    dict
        ``{"train": ShardedDataset, "test": ShardedDataset}`` (no ``test`` when
        ``test_fraction`` is 0).
    """
    if kind not in RECIPES:
        raise ConfigurationError(f"dataset kind must be one of {RECIPES!r}, got {kind!r}")
    shard_rows = check_shard_rows(shard_rows)
    if not (0.0 <= test_fraction < 1.0):
        raise ConfigurationError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    target = Path(path)
    check_target(target, overwrite)  # before generating any data
    if kind in SYNTHETIC:
        splits = _synthetic_splits(kind, rows, features, seed, n_classes, ill_conditioned, test_fraction)
    else:
        if rows is not None or features is not None:
            raise ConfigurationError(
                f"the {kind!r} dataset has a fixed size; do not pass rows or features"
            )
        splits = _bundled_splits(kind, seed, test_fraction)

    with written_aside(target, overwrite=overwrite) as staging:
        for name, (blocks, attrs, feature_names) in splits.items():
            ShardedDataset.from_blocks(
                staging / name, blocks, shard_rows=shard_rows, attrs=attrs,
                feature_names=feature_names,
            )
    return {name: ShardedDataset.open(target / name) for name in splits}


def _synthetic_splits(kind, rows, features, seed, n_classes, ill_conditioned, test_fraction):
    if rows is None or features is None:
        raise ConfigurationError(f"the {kind!r} recipe needs rows and features")
    problem = SyntheticProblem(
        {"logistic": "logistic", "multinomial": "multinomial", "regression": "regression"}[kind],
        n_features=int(features),
        n_classes=n_classes if kind == "multinomial" else 2,
        seed=seed,
        ill_conditioned=ill_conditioned,
    )
    attrs: dict[str, Any] = {
        "task": SYNTHETIC[kind],
        "source": f"synthetic:{kind}",
        "seed": seed,
        "ill_conditioned": ill_conditioned,
    }
    if kind != "regression":
        attrs["n_classes"] = problem.n_classes
    splits = {"train": (problem.blocks(int(rows)), attrs, None)}
    test_rows = int(round(rows * test_fraction))
    if test_rows:
        splits["test"] = (problem.blocks(test_rows, first_block=TEST_BLOCK_OFFSET), attrs, None)
    return splits


def _bundled_splits(kind, seed, test_fraction):
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    bunch = getattr(datasets, f"load_{kind}")()
    X, y = bunch.data.astype(np.float64), bunch.target.astype(np.int64)
    names = [str(n) for n in getattr(bunch, "feature_names", [])] or None
    attrs = {
        "task": BUNDLED[kind],
        "n_classes": int(len(np.unique(y))),
        "source": f"sklearn.datasets.load_{kind}",
        "seed": seed,
    }
    if test_fraction == 0:
        return {"train": ([(X, y)], attrs, names)}
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return {"train": ([(X_tr, y_tr)], attrs, names), "test": ([(X_te, y_te)], attrs, names)}
