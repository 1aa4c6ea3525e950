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


def test_a_model_file_that_is_not_one_is_said_so_before_any_cluster(tmp_path, s3, capsys) -> None:
    """Nothing at a URL is said to be nothing there; a pickle given as the model is said not
    to be a parameter file, in our words rather than numpy's advice to unpickle it."""
    import pickle

    bucket, options = s3
    data = ShardedDataset.create(tmp_path / "d", rng.normal(size=(30, 4)), np.arange(30) % 2, shard_rows=10)
    missing = f"{bucket}/models-{uuid.uuid4().hex[:6]}/model.npz"
    assert main(["evaluate", "--params", missing, "--data", str(data.path), *NO_SCHEDULER,
                 *storage_flags(options)]) == 2
    assert capsys.readouterr().err == (f"dasklbfgs: error: no parameter file at {missing!r}: nothing is at that URL "
                                       "(a model is saved there by save_params or 'dasklbfgs train --output')\n")
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(Logistic(4)))
    assert main(["predict", "--params", str(tmp_path / "model.pkl"), "--data", str(data.path), "--output",
                 str(tmp_path / "p"), *NO_SCHEDULER]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dasklbfgs: error: '{tmp_path / 'model.pkl'}' is not a dasklbfgs parameter file: it is a "
                          "Python pickle, not an .npz archive; a parameter file is the .npz archive that save_params, "
                          "'dasklbfgs train --output' and the pipelines write") and "allow_pickle" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "model.pkl"]
