"""``dasklbfgs path``: the path on the session's cluster, the chosen model saved with the path
beside it and usable by the other commands, and bad input refused before a cluster starts."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dasklbfgs
from dasklbfgs.models import Logistic
from dasklbfgs.models.persist import load_params
from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("path-cli") / "lg"
    run("data", "make", "logistic", str(folder), "--rows", "6000", "--features", "6", "--shard-rows", "1500")
    return folder


def test_path_saves_the_penalty_chosen_on_held_out_rows(client, recipe, tmp_path) -> None:
    out = tmp_path / "path.npz"
    proc = run("path", "--data", str(recipe / "train"), "--test", str(recipe / "test"), "--l1", "1",
               "--n-alphas", "6", "--eps", "0.01", "--maxiter", "60", "--scheduler", client.scheduler.address,
               "--output", str(out), "--json")
    report = json.loads(proc.stdout)
    fits = report["fits"]
    assert report["penalty"] == "l1" and len(fits) == 6 and report["chosen_by"] == "log_loss"
    assert fits[0]["n_nonzero"] == 0 and fits[0]["alpha"] == pytest.approx(report["alpha_max"])
    held_out = [fit["held_out"] for fit in fits]
    assert report["chosen"] == int(np.argmin(held_out))
    model, params, info = load_params(out)
    chosen = fits[report["chosen"]]
    assert isinstance(model, Logistic) and model.l1 == pytest.approx(chosen["l1"])
    with np.load(out) as saved:
        assert saved["path_coefs"].shape == (6, 7)
        np.testing.assert_array_equal(saved["path_coefs"][report["chosen"]], params)
        np.testing.assert_allclose(saved["path_alphas"], [fit["alpha"] for fit in fits])
    # the saved model is the chosen fit: its held-out log-loss is the one reported for it
    test = dasklbfgs.ShardedDataset.open(recipe / "test")
    found = dasklbfgs.evaluate(model, params, test, client=client, metrics=["log_loss"])
    assert found["log_loss"] == pytest.approx(chosen["held_out"], rel=1e-12)
    text = run("path", "--data", str(recipe / "train"), "--l2-values", "0.1,0.01", "--scheduler",
               client.scheduler.address, "--output", str(tmp_path / "ridge.npz")).stdout
    assert "2 l2 penalties as given" in text and "chosen     alpha 0.01: the last fit (no --test to choose on)" in text


@pytest.mark.parametrize(("args", "message"), [
    (["--l1-values", "0.1", "--l2-values", "0.1"], "give the values of one penalty to vary, l1 or l2, not both"),
    (["--l1-values", "0.1,x"], "argument --l1-values: must be comma-separated numbers like 0.1,0.01, got '0.1,x'"),
    (["--l1-values=-0.1"], "path option --l1-values must be a non-empty list of numbers >= 0 or None, got (-0.1,)"),
    (["--eps", "2"], "path option --eps must be a number in (0, 1), got 2.0"),
    (["--maxiter", "0"], "sandblaster option --maxiter must be an integer >= 1, got 0"),
    (["--model", "least_squares"], "has no penalty to vary"),
    (["--l1", "1", "--cv", "1"], "--cv must be an integer number of folds >= 2, got 1"),
])
def test_bad_paths_exit_2_before_a_cluster_starts(recipe, args, message) -> None:
    # no scheduler listens at port 9: the input is refused before any connection is tried
    proc = run("path", "--data", str(recipe / "train"), *args, "--scheduler", "tcp://127.0.0.1:9", "--timeout", "3",
               check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_path_chooses_by_cross_validation(client, recipe, tmp_path) -> None:
    out = tmp_path / "cv.npz"
    report = json.loads(run("path", "--data", str(recipe / "train"), "--test", str(recipe / "test"), "--l1", "1",
                            "--n-alphas", "4", "--eps", "0.01", "--cv", "3", "--scheduler", client.scheduler.address,
                            "--output", str(out), "--json").stdout)
    assert report["cv"] == 3 and report["chosen_by"] == "log_loss, the mean over 3 folds"
    held_out = [fit["held_out"] for fit in report["fits"]]
    assert report["chosen"] == int(np.argmin(held_out)) and report["alpha_max"] == report["fits"][0]["alpha"]
    model, params, _ = load_params(out)
    assert model.l1 == pytest.approx(report["fits"][report["chosen"]]["l1"])
    with np.load(out) as saved:
        assert saved["path_cv_log_loss"].shape == (3, 4)
        np.testing.assert_allclose(saved["path_cv_log_loss"].mean(axis=0), held_out, rtol=1e-12)
    test = dasklbfgs.ShardedDataset.open(recipe / "test")
    found = dasklbfgs.evaluate(model, params, test, client=client, metrics=["log_loss"])
    assert report["test"]["log_loss"] == pytest.approx(found["log_loss"], rel=1e-12)  # the refit, scored
