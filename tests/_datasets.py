"""Datasets shared by the solver tests, written once per session."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.data.synthetic import SyntheticProblem


def write(path, kind, *, rows, features, shard_rows, ill=False, decades=4.0, n_classes=3, seed=0):
    problem = SyntheticProblem(kind, n_features=features, n_classes=n_classes, seed=seed,
                               ill_conditioned=ill, condition_decades=decades)
    return ShardedDataset.from_blocks(path, problem.blocks(rows), shard_rows=shard_rows)


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> dict[str, ShardedDataset]:
    root = tmp_path_factory.mktemp("sandblaster-data")
    out = {}
    for kind in ("logistic", "multinomial", "regression"):
        out[kind] = write(root / kind, kind, rows=6000, features=8, shard_rows=1000)
        out[f"{kind}-ill"] = write(root / f"{kind}-ill", kind, rows=6000, features=8, shard_rows=1000,
                                   ill=True, decades=2.0)
    out["logistic-very-ill"] = write(root / "very-ill", "logistic", rows=6000, features=8,
                                     shard_rows=1000, ill=True, decades=4.0)
    return out


def load_all(data: ShardedDataset) -> tuple[np.ndarray, np.ndarray]:
    return data.load_rows(0, data.n_samples)
