"""Hostile input, one table: every case gets a specific error that names the problem and
where it is, and leaves existing stores and checkpoints as they were."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import MLP, EmbeddingLM, ShardedDataset, connect, downpour_sgd, sandblaster_lbfgs
from dasklbfgs.data import make_dataset
from dasklbfgs.errors import (
    CheckpointError,
    ClusterConnectionError,
    ConfigurationError,
    CorruptDatasetError,
    DatasetExistsError,
    InvalidDataError,
    ModelDataMismatchError,
    NotADatasetError,
)
from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.pipeline import load_config, validate_config
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import load_state

rng = np.random.default_rng(0)
X = rng.normal(size=(400, 4))
Y = (X[:, 0] > 0).astype(np.int64)


def fingerprint(path: Path) -> str:
    """Hash of every file under ``path``: equal before and after means untouched."""
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return digest.hexdigest()


@pytest.fixture()
def store(tmp_path) -> ShardedDataset:
    return ShardedDataset.create(tmp_path / "good", X, Y, shard_rows=100)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, client) -> Path:
    root = tmp_path_factory.mktemp("hostile-ckpt")
    data = ShardedDataset.create(root / "d", X, Y, shard_rows=100)
    path = root / "ckpt"
    sandblaster_lbfgs(Logistic(4), data, client=client, maxiter=3, checkpoint_path=path)
    return path


def chunk(store: ShardedDataset, name: str, shard: int) -> Path:
    return store.path / name / "c" / str(shard) / ("0" if name == "X" else "")


def x_chunk(store: ShardedDataset, shard: int) -> Path:
    return store.path / "X" / "c" / str(shard) / "0"


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])


# -- the table: (id, action(tmp_path, store, checkpoint, client), error, message) ------------------


def nan_in_one_shard(tmp, store, ckpt, client):
    bad = X.copy()
    bad[250, 2] = np.nan
    ShardedDataset.create(tmp / "nan", bad, Y, shard_rows=100)


def inf_in_y(tmp, store, ckpt, client):
    ShardedDataset.create(tmp / "inf", X, np.where(np.arange(400) == 7, np.inf, 1.0), shard_rows=100)


def truncated_chunk(tmp, store, ckpt, client):
    truncate(x_chunk(store, 2))
    store.load_shard(2)


def garbage_chunk(tmp, store, ckpt, client):
    x_chunk(store, 1).write_bytes(b"not a zarr chunk" * 64)
    sandblaster_lbfgs(Logistic(4), store, client=client, maxiter=2)


def missing_chunk(tmp, store, ckpt, client):
    x_chunk(store, 3).unlink()
    store.load_rows(0, 400)


def missing_array(tmp, store, ckpt, client):
    shutil.rmtree(store.path / "y")
    ShardedDataset.open(store.path)


def not_a_dataset(tmp, store, ckpt, client):
    (tmp / "plain").mkdir()
    ShardedDataset.open(tmp / "plain")


def string_features(tmp, store, ckpt, client):
    ShardedDataset.create(tmp / "str", np.array([["a", "b"]] * 4), np.zeros(4), shard_rows=2)


def labels_out_of_range(tmp, store, ckpt, client):
    data = ShardedDataset.create(tmp / "labels", X, np.arange(400) % 5, shard_rows=100)
    sandblaster_lbfgs(Logistic(4), data, client=client)


def empty_dataset(tmp, store, ckpt, client):
    ShardedDataset.create(tmp / "empty", np.zeros((0, 4)), np.zeros(0), shard_rows=10)


def mismatched_lengths(tmp, store, ckpt, client):
    ShardedDataset.create(tmp / "len", X, Y[:-1], shard_rows=100)


def wrong_feature_count(tmp, store, ckpt, client):
    sandblaster_lbfgs(Logistic(5), store, client=client)


def existing_path(tmp, store, ckpt, client):
    ShardedDataset.create(store.path, X[:10], Y[:10], shard_rows=5)


def overwrite_a_plain_folder(tmp, store, ckpt, client):
    (tmp / "docs").mkdir()
    (tmp / "docs" / "notes.txt").write_text("mine")
    ShardedDataset.create(tmp / "docs", X, Y, shard_rows=100, overwrite=True)


def negative_shard_rows(tmp, store, ckpt, client):
    ShardedDataset.create(tmp / "neg", X, Y, shard_rows=-5)


def unknown_config_key(tmp, store, ckpt, client):
    validate_config({"pipeline": {"name": "p"}, "data": {"recipe": "wine", "rowz": 5}, "model": {"name": "softmax"}},
                    where="job.yaml")


def config_wrong_type(tmp, store, ckpt, client):
    (tmp / "job.yaml").write_text("pipeline: {name: p}\ndata: {recipe: wine}\nmodel: {name: softmax}\n"
                                  "train: {maxiter: lots}\n")
    load_config(tmp / "job.yaml")


def scheduler_not_there(tmp, store, ckpt, client):
    connect("tcp://127.0.0.1:9", timeout=2)


def checkpoint_of_another_model(tmp, store, ckpt, client):
    sandblaster_lbfgs(Logistic(4, l2=0.5), ShardedDataset.create(tmp / "d", X, Y, shard_rows=100),
                      client=client, checkpoint_path=ckpt, resume=True)


def corrupted_checkpoint(tmp, store, ckpt, client):
    copy = tmp / "ckpt"
    shutil.copytree(ckpt, copy)
    victim = next(p for p in sorted(copy.rglob("*")) if p.is_file() and "/c/" in str(p))
    victim.write_bytes(b"\x00" * len(victim.read_bytes()))
    load_state(copy, model_config={"name": "logistic", "n_features": 4, "l2": 0.0, "l1": 0.0, "fit_intercept": True},
               settings={})


def truncated_checkpoint(tmp, store, ckpt, client):
    copy = tmp / "ckpt"
    shutil.copytree(ckpt, copy)
    victim = next(p for p in sorted(copy.rglob("*")) if p.is_file() and "/c/" in str(p))
    truncate(victim)
    load_state(copy, model_config={"name": "logistic", "n_features": 4, "l2": 0.0, "l1": 0.0, "fit_intercept": True},
               settings={})


def x0_wrong_length(tmp, store, ckpt, client):
    sandblaster_lbfgs(Logistic(4), store, client=client, x0=np.zeros(3))


def x0_not_finite(tmp, store, ckpt, client):
    sandblaster_lbfgs(Logistic(4), store, client=client, x0=np.array([0, 0, np.nan, 0, 0]))


def batch_larger_than_a_replica(tmp, store, ckpt, client):
    downpour_sgd(Logistic(4), store, client=client, n_replicas=2, batch_size=500)


def zero_fetch_interval(tmp, store, ckpt, client):
    downpour_sgd(Logistic(4), store, client=client, n_fetch=0)


def negative_learning_rate(tmp, store, ckpt, client):
    downpour_sgd(Logistic(4), store, client=client, learning_rate=-0.1)


def word_ids_beyond_vocabulary(tmp, store, ckpt, client):
    ids = ShardedDataset.create(tmp / "ids", rng.integers(0, 50, size=(100, 2)).astype(np.int32),
                                rng.integers(0, 10, 100), shard_rows=50, dtype=np.int32)
    downpour_sgd(EmbeddingLM(10, 4, 2, 4), ids, client=client, batch_size=10)


def unknown_recipe_option(tmp, store, ckpt, client):
    make_dataset("text", tmp / "t", patch_size=6)


def mlp_with_bad_layer(tmp, store, ckpt, client):
    MLP(4, (8, -2), 2)


def softmax_with_one_class(tmp, store, ckpt, client):
    Softmax(4, 1)


CASES = [
    (nan_in_one_shard, InvalidDataError, r"X holds a non-finite value \(nan\) in shard 2 at row 250, column 2"),
    (inf_in_y, InvalidDataError, r"y holds a non-finite value \(inf\) in shard 0 at row 7"),
    (truncated_chunk, CorruptDatasetError, r"cannot decode X of the dataset at .*good' in shard\(s\) \[2\]"),
    (garbage_chunk, CorruptDatasetError, r"cannot decode X of the dataset at .*good' in shard\(s\) \[1\]"),
    (missing_chunk, CorruptDatasetError, r"missing the chunk file X/c/3/0 \(shard 3, rows 300-400\)"),
    (missing_array, NotADatasetError, r"good"),
    (not_a_dataset, NotADatasetError, r"plain"),
    (string_features, InvalidDataError, r"X must hold real numbers, got dtype <U1"),
    (labels_out_of_range, ModelDataMismatchError, r"Logistic needs integer labels in 0..1, but y at .*labels' "
                                                  r"ranges over \[0, 4\]"),
    (empty_dataset, InvalidDataError, r"the dataset is empty"),
    (mismatched_lengths, InvalidDataError, r"X has 400 rows, y has 399"),
    (wrong_feature_count, ModelDataMismatchError, r"expects 5 features but the dataset at .*good' has 4"),
    (existing_path, DatasetExistsError, r"good"),
    (overwrite_a_plain_folder, DatasetExistsError, r"docs"),
    (negative_shard_rows, ConfigurationError, r"shard_rows must be a positive integer, got -5"),
    (unknown_config_key, ConfigurationError, r"job.yaml: unknown key\(s\) \['data.rowz'\]"),
    (config_wrong_type, ConfigurationError,
     r"job.yaml: train: sandblaster option maxiter must be an integer >= 1, got 'lots'"),
    (scheduler_not_there, ClusterConnectionError, r"tcp://127.0.0.1:9"),
    (checkpoint_of_another_model, ModelDataMismatchError, r"ckpt"),
    (corrupted_checkpoint, CheckpointError, r"ckpt"),
    (truncated_checkpoint, CheckpointError, r"ckpt"),
    (x0_wrong_length, ModelDataMismatchError, r"x0 must have shape \(5,\) for Logistic\(.*\), got \(3,\)"),
    (x0_not_finite, ModelDataMismatchError, r"x0 is not finite: x0\[2\] = nan"),
    (batch_larger_than_a_replica, ConfigurationError, r"batch_size \(500\) is larger than a replica's data \(200 rows"),
    (zero_fetch_interval, ConfigurationError, r"n_fetch must be an integer >= 1, got 0"),
    (negative_learning_rate, ConfigurationError, r"learning_rate must be a positive number, got -0.1"),
    (word_ids_beyond_vocabulary, ModelDataMismatchError, r"vocab_size=10 got word ids in \[\d+, 4\d\] in X"),
    (unknown_recipe_option, ConfigurationError, r"patch_size"),
    (mlp_with_bad_layer, ConfigurationError, r"hidden\[1\] must be an integer >= 1, got -2"),
    (softmax_with_one_class, ConfigurationError, r"n_classes must be an integer >= 2, got 1"),
]


@pytest.mark.parametrize(("action", "error", "message"), CASES, ids=[c[0].__name__ for c in CASES])
def test_hostile_input(tmp_path, store, checkpoint, client, action, error, message) -> None:
    checkpoint_before = fingerprint(checkpoint)
    with pytest.raises(error, match=message):
        action(tmp_path, store, checkpoint, client)
    assert fingerprint(checkpoint) == checkpoint_before  # never written to
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no half-written store or checkpoint beside the targets


def test_the_table_is_long_enough() -> None:
    assert len(CASES) >= 20
    assert len({c[1] for c in CASES}) >= 8  # specific types, not one catch-all
    json.dumps([c[0].__name__ for c in CASES])
