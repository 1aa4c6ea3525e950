"""Every shipped pipeline config runs (at a small size) and writes its report; bad configs
are refused with messages that name the problem."""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.checkpoint_store import checkpoint_exists
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, DatasetExistsError, StoreError
from dasklbfgs.pipeline import load_config, run_pipeline, validate_config
from dasklbfgs.pipeline.run import DURATIONS, open_datasets
from tests._torch import needs_torch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "pipelines").glob("*.yaml"))
SMALL = {  # shrink the synthetic recipes (bundled datasets are small already), keeping each run to success
    "logistic-sandblaster": ["data.rows=6000", "data.features=10", "data.shard_rows=1500"],
    "softmax-downpour": ["data.rows=6000", "data.features=8", "data.shard_rows=1500", "train.eval_every=20"],
    "digits-softmax": ["train.gtol=1e-4"],  # converges sooner
    "acoustic-mlp-downpour": ["data.rows=4000", "data.classes=4", "data.shard_rows=1000", "model.hidden=[32]",
                              "train.eval_every=20", "train.learning_rate=0.05"],
    # 4 x 4 patches into 4 units: converges to gtol 3e-4 in about 5 s (to the shipped gtol in about 500
    # iterations, 18 s; the shipped size in 2744), to the same reconstruction error within 3%
    "patches-autoencoder-sandblaster": ["data.rows=1000", "data.shard_rows=500", "data.patch_size=4",
                                        "model.n_hidden=4", "train.maxiter=1000", "train.gtol=3e-4"],
    "text-lm-downpour": ["data.vocab_size=200", "data.context=2", "model.hidden=16", "model.embed_dim=8",
                         "train.eval_every=200", "train.epochs=1"],
    "logistic-l1-path": ["data.rows=6000", "data.features=10", "data.shard_rows=1500", "path.n_alphas=6"],
    "claims-poisson": ["data.rows=20000", "data.shard_rows=5000"],
    "digits-cnn-sandblaster": ["train.gtol=3e-3"],  # torch modules: the digits are small already
    "digits-resnet-sync": ["train.epochs=5"],
}
#: What a working run reaches on the small data: (held-out metric, bound, "min" or "max").
EXPECT = {"patches-autoencoder-sandblaster": ("reconstruction_mse", 0.02, "max"),
          "text-lm-downpour": ("accuracy", 0.1, "min"), "acoustic-mlp-downpour": ("accuracy", 0.4, "min"),
          "claims-poisson": ("d2", 0.01, "min")}  # claim counts: most of their deviance is Poisson noise


def test_every_config_is_covered() -> None:
    assert {c.stem for c in CONFIGS} == set(SMALL)


@pytest.mark.parametrize("config", [pytest.param(c, marks=needs_torch) if "torch:" in c.read_text() else c
                                    for c in CONFIGS], ids=lambda p: p.stem)
def test_shipped_config_runs_and_reports(client, config, tmp_path, data_home) -> None:
    loaded = load_config(config, SMALL[config.stem])
    metrics = run_pipeline(loaded, tmp_path, client=client)
    assert metrics["success"], metrics["message"]  # a shipped pipeline runs to success
    out = tmp_path / loaded["pipeline"]["name"]
    assert metrics["report"] == str(out)
    written = json.loads((out / "metrics.json").read_text())
    assert written["pipeline"] == config.stem and written["run_id"].startswith(
        "path" if loaded["path"] else loaded["train"]["solver"])
    assert set(written["durations"]) == set(DURATIONS)
    assert written["config"]["train"]["solver"] == loaded["train"]["solver"]
    assert written["files"] == sorted(p.name for p in out.iterdir())
    if loaded["path"] is None:
        curves = json.loads((out / "curves.json").read_text())
        assert curves["points"] and all("time" in p and "step" in p for p in curves["points"])
        assert curves["heldout_metric"] is not None and any("heldout" in p for p in curves["points"])
        assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        _check_path_report(written, out, loaded["path"])
    drawn = "reliability" if "accuracy" in written["test"] else "residuals" if "r2" in written["test"] else None
    if loaded["path"] is None:
        assert set(curves["scores"]) == ({"train", "test"} if drawn else set())
        assert all(drawn in found for found in curves["scores"].values())
    assert (out / "scores.png").exists() == (drawn is not None)
    assert (out / "model.npz").exists()
    if loaded["data"]["recipe"] is not None:  # built data stays out of the report, in the data home
        assert Path(written["datasets"]["train"]).is_relative_to(data_home)
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.stem]  # no staging folder left
    default = ("accuracy" if "accuracy" in metrics["test"] else "r2", 0.5, "min")
    key, bound, kind = EXPECT.get(config.stem, default)
    value = metrics["test"][key]
    assert (value > bound) if kind == "min" else (value < bound), (key, value)


def _check_path_report(written: dict, out: Path, section: dict) -> None:
    """A path pipeline's report: every penalty's fit, the best held-out log-loss chosen, the
    saved model the chosen fit (its parameters those of the path's row), the figure."""
    from dasklbfgs.models.persist import load_params

    path = written["path"]
    fits = path["fits"]
    assert len(fits) == section["n_alphas"] and path["penalty"] == "l1" and path["chosen_by"] == "log_loss"
    losses = [fit["held_out"] for fit in fits]
    assert path["chosen"] == losses.index(min(losses))
    assert [fit["alpha"] for fit in fits] == sorted((fit["alpha"] for fit in fits), reverse=True)
    assert fits[0]["n_nonzero"] == 0 < fits[-1]["n_nonzero"]  # from the penalty that zeroes every coefficient
    assert written["test"]["log_loss"] == pytest.approx(min(losses), rel=1e-9)  # the chosen fit, scored again
    model, params, _ = load_params(out / "model.npz")
    with np.load(out / "model.npz") as saved:
        np.testing.assert_array_equal(params, saved["path_coefs"][path["chosen"]])
    assert model.l1 == pytest.approx(fits[path["chosen"]]["alpha"])
    assert (out / "path.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reports_are_never_silently_replaced(client, tmp_path, caplog) -> None:
    """A second run writes <name>-2 and reuses the data built by the first; --overwrite
    replaces the report; a run that fails leaves no report and no staging folder."""
    config = load_config(ROOT / "pipelines" / "digits-softmax.yaml", ["train.maxiter=3"])
    first = run_pipeline(config, tmp_path, client=client)
    with caplog.at_level(logging.INFO, logger="dasklbfgs.pipeline.run"):
        second = run_pipeline(config, tmp_path, client=client)
    assert (first["report"], second["report"]) == (str(tmp_path / "digits-softmax"), str(tmp_path / "digits-softmax-2"))
    assert first["datasets"] == second["datasets"] and "reusing the 'digits' recipe's datasets" in caplog.text
    assert re.search(r"train: 1437 x 64 float64 in 3 shards \(\d+\.\d KiB in memory", caplog.text)  # sizes for people
    prepared = open_datasets(config)  # as `dasklbfgs run` does before it connects: the time still counts
    third = run_pipeline(config, tmp_path, client=client, overwrite=True, data=prepared)
    assert third["report"] == first["report"] and third["started_at"] == prepared.started_at
    durations = third["durations"]
    assert durations["data_seconds"] >= prepared.seconds
    assert durations["total_seconds"] >= sum(durations[k]
                                             for k in ("data_seconds", "train_seconds", "evaluate_seconds"))
    assert json.loads((tmp_path / "digits-softmax" / "metrics.json").read_text())["run_id"] == third["run_id"]
    broken = load_config(ROOT / "pipelines" / "digits-softmax.yaml", [f"data.path={tmp_path / 'digits-softmax'}"])
    with pytest.raises(DatasetExistsError, match=r"data.path .*digits-softmax' already exists and does not hold"):
        run_pipeline(broken, tmp_path, client=client)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits-softmax", "digits-softmax-2"]
    assert (tmp_path / "digits-softmax" / "metrics.json").exists()  # the report it pointed at is intact


def test_cli_run_with_overrides(tmp_path) -> None:
    exe = shutil.which("dasklbfgs")
    command = [exe] if exe else [sys.executable, "-m", "dasklbfgs.cli"]
    proc = subprocess.run(
        [*command, "run", str(ROOT / "pipelines" / "digits-softmax.yaml"), "--output", str(tmp_path),
         "--set", "train.maxiter=20", "--workers", "1", "--quiet"],
        capture_output=True, text=True, timeout=240,
    )
    # the override holds: digits needs more than 20 iterations, so the run stops at the limit
    # and says so (exit 1, success false), the report written all the same
    assert proc.returncode == 1, proc.stderr
    metrics = json.loads((tmp_path / "digits-softmax" / "metrics.json").read_text())
    assert metrics["solver_stats"]["iterations"] == 20 and metrics["success"] is False
    assert metrics["message"] == "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT"
    bad = subprocess.run([*command, "run", str(ROOT / "pipelines" / "digits-softmax.yaml"),
                          "--set", "train.maxiterr=5"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "train: sandblaster does not take option 'maxiterr' (did you mean 'maxiter'?)" in bad.stderr


BASE = {"pipeline": {"name": "p"}, "data": {"recipe": "wine"}, "model": {"name": "softmax"}}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"extra": {}}, r"unknown section\(s\) \['extra'\]"),
        ({"data": {"recipe": "wine", "rowz": 5}}, r"unknown key\(s\) \['data.rowz'\]; known keys in 'data'"),
        ({"data": {"recipe": "wine", "rows": "many"}}, r"data.rows must be int, got str 'many'"),
        ({"data": {"recipe": "wine", "ill_conditioned": 1}}, r"data.ill_conditioned must be bool, got int 1"),
        ({"train": {"maxiter": True}}, r"train: sandblaster option maxiter must be an integer >= 1, got True"),
        ({"model": {}}, r"model.name is required"),
        ({"data": {"recipe": "wine", "train": "x"}}, r"exactly one of data.recipe .* or data.train"),
        ({"train": {"solver": "adam"}},
         r"train.solver must be one of \('sandblaster', 'newton', 'downpour', 'sync', 'easgd', 'gossip', "
         r"'neighbours'\), "
         r"got 'adam'"),
        ({"model": [1]}, r"section 'model' must be a mapping, got list"),
        ({"data": {"train": "x", "path": "y"}}, r"data.path is where a recipe's datasets are written; it needs"),
        ({"storage_options": ["key=k"]},
         r"storage_options must be a mapping of the filesystem's option names to values .*got list \['key=k'\]"),
        ({"path": {"n_alphas": 0}}, r"path: path option n_alphas must be an integer >= 1, got 0"),
        ({"path": {"cv": 1}}, r"path.cv must be an integer number of folds >= 2, got 1"),
        ({"path": {}, "train": {"solver": "downpour"}}, r"a path fits every penalty with Sandblaster L-BFGS; "
                                                        r"train.solver is 'downpour'"),
        ({"path": {}, "train": {"checkpoint_path": "c"}},
         r"train: checkpoint_path is not an option of a regularization path: one checkpoint cannot hold"),
        ({"storage_options": {"client_kwargs": {1: "x"}}},
         r"storage_options.client_kwargs has the key 1 \(int\); option names are strings"),
    ],
)
def test_config_errors(change, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        validate_config({**BASE, **change}, where="test.yaml")


def test_numbers_in_e_notation_are_numbers(tmp_path) -> None:
    """``1e-6`` is a float in a config and in ``--set``, as YAML 1.2 and Python read it."""
    (tmp_path / "p.yaml").write_text("pipeline: {name: p}\ndata: {recipe: wine}\nmodel: {name: softmax, l2: 1e-3}\n"
                                     "train: {gtol: 1e-6}\n")
    loaded = load_config(tmp_path / "p.yaml", ["train.ftol=2E-10", "data.seed=7"])
    assert loaded["model"]["l2"] == 1e-3 and loaded["data"]["seed"] == 7
    assert loaded["train"]["options"].gtol == 1e-6 and loaded["train"]["options"].ftol == 2e-10


def test_file_errors(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match=r"pipeline config .*nope.yaml' does not exist"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("pipeline: [unclosed\n")
    with pytest.raises(ConfigurationError, match=r"is not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    with pytest.raises(ConfigurationError, match=r"override 'rows=5' must look like section.key=value"):
        load_config(CONFIGS[0], ["rows=5"])


def test_a_pipeline_with_data_checkpoint_and_report_on_s3_gives_the_local_runs_bits(client, s3, tmp_path) -> None:
    """storage_options: reach the datasets, the checkpoint and the output at URLs; the report
    is readable at its URL (metrics.json, committed last) and the run is the local copy's."""
    bucket, options = s3[0], {**s3[1], "secret": "a-secret-to-keep-out-of-reports"}  # the server takes any
    tag = uuid.uuid4().hex[:6]
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1200, 6))
    y = (X @ rng.normal(size=6) > 0).astype(np.float64)
    urls = {split: f"{bucket}/pipe-{tag}/{split}.zarr" for split in ("train", "test")}
    for split, rows in (("train", slice(0, 900)), ("test", slice(900, 1200))):
        ShardedDataset.create(tmp_path / split, X[rows], y[rows], shard_rows=300)
        ShardedDataset.create(urls[split], X[rows], y[rows], shard_rows=300, storage_options=options)
    base = {"pipeline": {"name": "on-s3"}, "model": {"name": "logistic", "l2": 1e-3}}
    train = {"maxiter": 15, "checkpoint_every": 100}  # (the checkpoint at the end: fewer round trips)
    local = validate_config({**base, "data": {"train": str(tmp_path / "train"), "test": str(tmp_path / "test")},
                             "train": {**train, "checkpoint": str(tmp_path / "ckpt")}})
    remote = validate_config({**base, "data": urls, "storage_options": options,
                              "train": {**train, "checkpoint": f"{bucket}/pipe-{tag}/ckpt"}})
    ran_locally = run_pipeline(local, tmp_path / "reports", client=client)
    ran = run_pipeline(remote, f"{bucket}/pipe-{tag}/reports", client=client)
    assert ran["report"] == f"{bucket}/pipe-{tag}/reports/on-s3"
    report = Location.of(ran["report"], options)
    assert report.children() == ["curves.json", "curves.png", "metrics.json", "model.npz", "scores.png"]
    written = json.loads(report.read("metrics.json"))
    assert written["run_id"] == ran["run_id"] and written["datasets"] == urls
    assert written["config"]["storage_options"] == ["client_kwargs", "key", "secret"]  # names, no credentials
    assert options["secret"] not in report.read("metrics.json").decode()
    assert checkpoint_exists(Location.of(f"{bucket}/pipe-{tag}/ckpt", options))
    assert (written["train"], written["test"]) == (ran_locally["train"], ran_locally["test"])
    with np.load(io.BytesIO(report.read("model.npz"))) as saved:
        with np.load(tmp_path / "reports" / "on-s3" / "model.npz") as saved_locally:
            np.testing.assert_array_equal(saved["params"], saved_locally["params"])
    again = run_pipeline(remote, f"{bucket}/pipe-{tag}/reports", client=client)  # never silently replaced
    assert again["report"] == f"{bucket}/pipe-{tag}/reports/on-s3-2"
    with pytest.raises(StoreError, match=r"unknown URL scheme 'nosuchstore' in 'nosuchstore://b/reports'"):
        run_pipeline(remote, "nosuchstore://b/reports", client=client)
