"""The commands that score a saved model (``evaluate``, ``predict``): ``--params`` and
``--data`` reached alike, with the ``--storage-option`` flags when they are URLs, and
checked against each other before any cluster is contacted."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from dasklbfgs import ShardedDataset
from dasklbfgs.cli.main import main
from dasklbfgs.models import Logistic
from dasklbfgs.models.persist import save_params
from tests._s3 import storage_flags

rng = np.random.default_rng(5)
#: an address where no scheduler listens: a command that got as far as connecting fails on it
NO_SCHEDULER = ["--scheduler", "tcp://127.0.0.1:9", "--timeout", "1"]


def test_the_model_and_the_data_at_urls_are_reached_with_the_storage_options(client, s3, capsys) -> None:
    bucket, options = s3
    folder = f"{bucket}/saved-{uuid.uuid4().hex[:6]}"
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + X[:, 2] > 0).astype(np.int64)
    ShardedDataset.create(f"{folder}/data.zarr", X, y, shard_rows=100, storage_options=options)
    model, params = Logistic(4), rng.normal(size=5)
    save_params(f"{folder}/model.npz", model, params, storage_options=options)
    where = ["--params", f"{folder}/model.npz", "--data", f"{folder}/data.zarr", "--scheduler",
             client.scheduler.address, *storage_flags(options)]
    assert main(["evaluate", *where, "--metrics", "roc_auc", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["roc_auc"] == pytest.approx(skm.roc_auc_score(y, model.predict_proba(params, X)[:, 1]), rel=1e-12)
    assert main(["predict", *where, "--output", f"{folder}/scores", "--kind", "proba", "--format", "parquet"]) == 0
    written = pd.read_parquet(f"{folder}/scores", storage_options=options)
    np.testing.assert_array_equal(written[["proba_0", "proba_1"]], model.predict_proba(params, X))


def test_a_model_that_does_not_fit_the_data_is_refused_before_any_cluster(tmp_path, capsys) -> None:
    """``predict`` needs the model to read the rows; ``evaluate`` its labels too."""
    three_classes = ShardedDataset.create(tmp_path / "d", rng.normal(size=(30, 4)), np.arange(30) % 3,
                                          shard_rows=10)
    save_params(tmp_path / "four.npz", Logistic(4), np.zeros(5))
    save_params(tmp_path / "five.npz", Logistic(5), np.zeros(6))
    data = ["--data", str(three_classes.path), *NO_SCHEDULER]
    assert main(["evaluate", "--params", str(tmp_path / "four.npz"), *data]) == 2
    assert "Logistic needs integer labels in 0..1, but y at" in capsys.readouterr().err
    assert main(["predict", "--params", str(tmp_path / "five.npz"), *data, "--output", str(tmp_path / "p")]) == 2
    assert "expects 5 features but the dataset at" in capsys.readouterr().err
    assert main(["predict", "--params", str(tmp_path / "four.npz"), *data, "--output", str(tmp_path / "p")]) == 2
    assert "127.0.0.1:9" in capsys.readouterr().err  # labels are no concern of predict: it went on to connect
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "five.npz", "four.npz"]
