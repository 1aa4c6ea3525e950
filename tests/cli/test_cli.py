"""The dasklbfgs command, run as a user runs it: in a subprocess. Training commands join the
session's cluster (``--scheduler``), as a user's do with a cluster of their own; the demo and
one ``train --workers 2`` start embedded ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import ShardedDataset, make_dataset
from dasklbfgs.models.persist import load_params
from tests._s3 import storage_flags


def run(*args: str, check: bool = True, timeout: float = 240, pythonpath: str | None = None
        ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}
    if pythonpath is not None:  # where the command finds a user's module (a torch module's factory)
        env["PYTHONPATH"] = pythonpath
    # The installed console script, as a user types it; the module when not on PATH.
    command = [shutil.which("dasklbfgs")] if shutil.which("dasklbfgs") else [sys.executable, "-m", "dasklbfgs.cli"]
    proc = subprocess.run(
        [*command, *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def reference_accuracy(folder, scale: bool = True, **kwargs) -> float:
    """Held-out accuracy of scikit-learn's LogisticRegression (lbfgs, to convergence) on a
    recipe folder's train/test datasets: what a correct linear fit reaches. ``scale=False``
    keeps the raw features, so that a penalty means what ours means."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    train, test = (ShardedDataset.open(folder / split) for split in ("train", "test"))
    X, y = train.load_rows(0, train.n_samples)
    X_test, y_test = test.load_rows(0, test.n_samples)
    scaler = StandardScaler(with_mean=scale, with_std=scale).fit(X)
    fitted = LogisticRegression(max_iter=5000, **kwargs).fit(scaler.transform(X), y)
    return float(fitted.score(scaler.transform(X_test), y_test))


def mlp_reference_accuracy(folder, maxiter: int) -> float:
    """Held-out accuracy of the same MLP objective minimised in process by scipy's L-BFGS-B
    from the same start, for the same number of iterations."""
    from scipy.optimize import minimize

    from dasklbfgs.models import MLP

    train, test = (ShardedDataset.open(folder / split) for split in ("train", "test"))
    X, y = train.load_rows(0, train.n_samples)
    X_test, y_test = test.load_rows(0, test.n_samples)
    model = MLP(440, (16, 8), 4, activation="tanh")
    fitted = minimize(lambda w: model.objective(w, X, y), model.init_params(None), jac=True, method="L-BFGS-B",
                      options={"maxiter": maxiter})
    return float(np.mean(model.predict(fitted.x, X_test) == y_test))


def test_data_make_and_info(tmp_path) -> None:
    out = run("data", "make", "multinomial", str(tmp_path / "mn"), "--rows", "3000", "--features", "5",
              "--shard-rows", "1000", "--classes", "4", "--seed", "0").stdout
    assert "3000 x 5 float64" in out and "shards    3 of up to 1000 rows" in out
    train = ShardedDataset.open(tmp_path / "mn" / "train")
    assert train.n_samples == 3000 and set(train.label_counts) == {0, 1, 2, 3}
    info = run("info", str(tmp_path / "mn" / "train")).stdout
    assert "labels    4 distinct" in info and " raw (stored/raw " in info
    both = json.loads(run("info", str(tmp_path / "mn"), "--json").stdout)
    assert [d["n_samples"] for d in both] == [600, 3000]


def test_train_saves_parameters_and_scores(tmp_path) -> None:
    make_dataset("breast_cancer", tmp_path / "bc", shard_rows=100)
    out = tmp_path / "model.npz"
    proc = run("train", "--data", str(tmp_path / "bc" / "train"), "--test", str(tmp_path / "bc" / "test"),
               "--model", "logistic", "--l2", "1", "--standardize", "--maxiter", "2000", "--workers", "2",
               "--output", str(out), "--json")
    report = json.loads(proc.stdout)
    # the same objective (l2 = 1 on the mean loss is C = 1 / n in scikit-learn's terms) has
    # the same optimum: the same held-out accuracy up to a borderline row
    reference = reference_accuracy(tmp_path / "bc", scale=False, C=1 / report["train"]["n_samples"])
    assert report["success"] and abs(report["test"]["accuracy"] - reference) <= 0.01
    assert "\r" not in proc.stderr  # no progress line when stderr is not a terminal
    model, params, info = load_params(out)
    assert model.n_features == 30 and model.l2 == 1.0
    assert info["objective"] == pytest.approx(report["objective"])
    assert params.shape == (31,)


def test_demo_trains_on_an_embedded_cluster_and_keeps_it_open(tmp_path) -> None:
    import signal
    import urllib.request

    env = {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}
    proc = subprocess.Popen([sys.executable, "-m", "dasklbfgs.cli", "demo", "--rows", "20000", "--features", "10",
                             "--shard-rows", "5000", "--dashboard-address", "127.0.0.1:0", "--keep", str(tmp_path),
                             "--keep-open"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    lines = []
    while not (lines and lines[-1].startswith("dashboard open at ")):
        line = proc.stdout.readline()
        assert line, f"the demo ended early (exit {proc.wait()}): {''.join(lines)}{proc.stderr.read()}"
        lines.append(line)
    url = lines[-1].split("dashboard open at ")[1].split(";")[0]
    assert lines[-1].endswith("; Ctrl-C to stop\n")
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/training", timeout=30) as page:  # still served
        assert page.status == 200
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the workers too
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err
    out = "".join(lines) + rest
    assert "embedded LocalCluster, 2 workers" in out
    assert "           stays up after the demo, until Ctrl-C (--keep-open)\n" in lines  # under the dashboard line
    assert "CONVERGENCE" in out and "success=True" in out
    test_line = next(line for line in out.splitlines() if line.startswith("test "))
    test_accuracy = float(test_line.split("accuracy")[1].split(",")[0])
    # the demo's l2 = 1e-4 is tiny: a converged scikit-learn fit on standardised features
    # (a penalty on other coordinates) is nearly the same classifier (measured: 0.006 apart)
    reference = reference_accuracy(tmp_path / "demo-data", C=1 / (1e-4 * 20000))
    assert abs(test_accuracy - reference) <= 0.015


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["info", "/nonexistent/x"], "no dataset at '/nonexistent/x': the path does not exist"),
        (["data", "make", "logistic", "{tmp}/d", "--rows", "10"], "the 'logistic' recipe needs --rows and --features"),
        (["data", "make", "logistic", "{tmp}/d", "--rows", "10", "--features", "2", "--shard-rows", "0"],
         "--shard-rows must be an integer >= 1, got 0"),
        (["train", "--data", "/nonexistent/x", "--workers", "1"], "no dataset at '/nonexistent/x'"),
        # an earlier run's output is never replaced unasked (and nothing starts)
        (["train", "--data", "/nonexistent/x", "--output", "{tmp}"],
         "exists (an earlier run's parameters); pass --overwrite to replace it or choose another --output"),
        # checked before connecting: no scheduler listens there, and the dataset is what is named
        (["train", "--data", "/nonexistent/x", "--scheduler", "tcp://127.0.0.1:9", "--timeout", "3"],
         "no dataset at '/nonexistent/x'"),
        # run opens the data before connecting too
        (["run", "{root}/pipelines/digits-softmax.yaml", "--set", "data.recipe=null",
          "--set", "data.train=/nonexistent/x", "--scheduler", "tcp://127.0.0.1:9", "--timeout", "3",
          "--output", "{tmp}/reports"],
         "no dataset at '/nonexistent/x'"),
    ],
)
def test_errors_are_one_line_and_exit_2(tmp_path, args, message) -> None:
    root = str(Path(__file__).resolve().parents[2])
    proc = run(*[a.replace("{tmp}", str(tmp_path)).replace("{root}", root) for a in args], check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(message) or message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()


def test_train_output_at_a_url_is_checked_before_anything_runs(s3) -> None:
    """An --output URL holding an object, or in a store that refuses writes, fails before
    the data is opened (the data named here does not exist) and leaves nothing."""
    from dasklbfgs.data.location import Location

    bucket, options = s3
    earlier = Location.of(f"{bucket}/cli-output/m.npz", options)
    earlier.put("", b"an earlier run's file")
    proc = run("train", "--data", "/nonexistent/x", "--output", earlier.url, *storage_flags(options), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--output {earlier.url!r} exists (an earlier run's parameters); pass --overwrite" in proc.stderr
    assert earlier.read() == b"an earlier run's file"
    missing = "s3://no-such-bucket-here/m.npz"
    proc = run("train", "--data", "/nonexistent/x", "--output", missing, *storage_flags(options), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--output {missing!r} cannot be written: " in proc.stderr


def test_model_label_mismatch_from_cli(tmp_path) -> None:
    make_dataset("wine", tmp_path / "wine")
    proc = run("train", "--data", str(tmp_path / "wine" / "train"), "--model", "logistic",
               "--workers", "1", "--output", str(tmp_path / "m.npz"), check=False)
    assert proc.returncode == 2
    assert "Logistic needs integer labels in 0..1" in proc.stderr
    assert not (tmp_path / "m.npz").exists()


def test_train_with_downpour(client, tmp_path) -> None:
    make_dataset("multinomial", tmp_path / "mn", rows=6000, features=6, n_classes=3, shard_rows=2000)
    out = tmp_path / "dp.npz"
    report = json.loads(run(
        "train", "--solver", "downpour", "--data", str(tmp_path / "mn" / "train"),
        "--test", str(tmp_path / "mn" / "test"), "--replicas", "2",  # --model: softmax, from the task
        "--param-shards", "2", "--batch-size", "64", "--learning-rate", "0.2", "--epochs", "2",
        "--checkpoint", str(tmp_path / "ckpt"), "--checkpoint-every", "50", "--scheduler", client.scheduler.address,
        "--output", str(out), "--json").stdout)
    assert report["solver"] == "downpour" and report["success"]
    assert re.fullmatch(r"all replicas finished their epochs; the objective on 1,000 training rows fell from 1\.099 "
                        r"at the start to 0\.\d+", report["message"]), report["message"]
    assert report["steps"] == 2 * 2 * 47  # 2 replicas x 2 epochs x ceil(3000 / 64) batches
    # two epochs of SGD come within 0.02 of the converged linear fit (measured: within 0.005)
    assert report["test"]["accuracy"] >= reference_accuracy(tmp_path / "mn") - 0.02
    assert (tmp_path / "ckpt" / "zarr.json").exists()
    model, params, _ = load_params(out)
    assert model.n_classes == 3 and params.shape == (21,)


def test_a_run_that_got_worse_does_not_report_success(client, tmp_path) -> None:
    """Plain SGD at a rate of 50 on a softmax: the loss leaves its start (log 3) at once. The
    run stops as diverged, says so in its report (not in a Python warning) and exits 1."""
    make_dataset("multinomial", tmp_path / "mn", rows=6000, features=6, n_classes=3, shard_rows=2000)
    proc = run("train", "--solver", "downpour", "--data", str(tmp_path / "mn" / "train"), "--optimizer", "sgd",
               "--learning-rate", "50", "--epochs", "1", "--replicas", "2", "--scheduler", client.scheduler.address,
               "--output", str(tmp_path / "dp.npz"), check=False)
    assert proc.returncode == 1, proc.stderr
    stopped = next(line for line in proc.stdout.splitlines() if line.startswith("stopped "))
    # stopped once its loss stayed far above the start, or judged at the end of its epoch
    assert re.fullmatch(r"stopped    (the mini-batch loss stayed above 4 times the loss at the start \(1\.099\) for 3 "
                        r"polls, at \S+ at global step \d+: the run diverged and was stopped|all replicas finished "
                        r"their epochs, but the objective on 1,000 training rows went from 1\.099 at the start to "
                        r"\S+: the run made no progress); lower learning_rate \(success=False\)", stopped), stopped
    assert "Warning" not in proc.stderr


def test_sandblaster_sharded_state_checkpoint_and_resume_from_the_command_line(client, tmp_path) -> None:
    make_dataset("multinomial", tmp_path / "mn", rows=4000, features=6, n_classes=3, shard_rows=1000)
    common = ["train", "--data", str(tmp_path / "mn" / "train"), "--model", "softmax", "--l2", "0.01",
              "--state", "sharded", "--param-shards", "3", "--scheduler", client.scheduler.address, "--json"]
    straight = json.loads(run(*common, "--output", str(tmp_path / "a.npz")).stdout)
    ckpt = tmp_path / "ckpt"
    stopped = run(*common, "--maxiter", "4", "--checkpoint", str(ckpt), "--output", str(tmp_path / "b.npz"),
                  check=False)
    first = json.loads(stopped.stdout)
    assert stopped.returncode == 1 and first["iterations"] == 4 and not first["success"]  # 1: not converged
    assert (ckpt / "shards" / "2" / "zarr.json").exists()  # each vector shard wrote its slices
    resumed = json.loads(run(*common, "--checkpoint", str(ckpt), "--resume",
                             "--output", str(tmp_path / "c.npz")).stdout)
    assert resumed["success"] and resumed["iterations"] == straight["iterations"]
    assert resumed["objective"] == pytest.approx(straight["objective"], rel=1e-12)
    _, a, _ = load_params(tmp_path / "a.npz")
    _, c, _ = load_params(tmp_path / "c.npz")
    assert a.tolist() == c.tolist()


def test_train_with_the_peer_methods(client, tmp_path) -> None:
    make_dataset("multinomial", tmp_path / "mn", rows=6000, features=6, n_classes=3, shard_rows=2000)
    common = ["train", "--data", str(tmp_path / "mn" / "train"), "--test", str(tmp_path / "mn" / "test"),
              "--model", "softmax", "--batch-size", "50", "--learning-rate", "0.2", "--epochs", "2",
              "--scheduler", client.scheduler.address, "--quiet"]
    proc = run(*common, "--solver", "neighbours", "--topology", "torus", "--replicas", "4",
               "--output", str(tmp_path / "nb.npz"))
    assert "exchange   " in proc.stdout and "returned   replica" in proc.stdout
    test_line = next(line for line in proc.stdout.splitlines() if line.startswith("test "))
    assert float(test_line.split("accuracy")[1].split(",")[0]) >= reference_accuracy(tmp_path / "mn") - 0.02
    report = json.loads(run(*common, "--solver", "easgd", "--tau", "4", "--rho", "1.0", "--replicas", "2",
                            "--output", str(tmp_path / "ea.npz"), "--json").stdout)
    assert report["solver"] == "easgd" and report["success"]
    assert report["steps"] == 2 * 2 * 60 and report["between_replicas"]["center_exchanges"] == 2 * 2 * 15
    # two epochs of SGD come within 0.02 of the converged linear fit (measured: within 0.005)
    assert report["test"]["accuracy"] >= reference_accuracy(tmp_path / "mn") - 0.02
    _, params, _ = load_params(tmp_path / "ea.npz")
    assert params.shape == (21,)


def test_train_a_neural_model_from_the_command_line(client, tmp_path) -> None:
    make_dataset("acoustic", tmp_path / "ac", rows=3000, n_classes=4, shard_rows=1000)
    out = tmp_path / "mlp.npz"
    proc = run("train", "--data", str(tmp_path / "ac" / "train"), "--test", str(tmp_path / "ac" / "test"),
               "--model", "mlp", "--hidden", "16,8", "--activation", "tanh", "--maxiter", "30",
               "--scheduler", client.scheduler.address, "--model-partitions", "2", "--output", str(out), "--json",
               check=False)
    report = json.loads(proc.stdout)
    # each portion computed by one replica split over the two workers (the same iterates as unsplit)
    assert report["partitions"]["per_replica"] == 2 and report["partitions"]["replicas"] == 1
    assert report["partitions"]["bytes_sent"] > 0 and report["partitions"]["recoveries"] == 0
    assert proc.returncode == 1 and "ITERATIONS REACHED LIMIT" in report["message"]  # 30 iterations: not converged
    assert report["model"] == "MLP(n_features=440, hidden=[16, 8], n_classes=4, activation='tanh', l2=0.0)"
    # 30 L-BFGS iterations in process from the same start reach the same accuracy (measured:
    # equal); our line search may take other steps, hence the margin
    assert abs(report["test"]["accuracy"] - mlp_reference_accuracy(tmp_path / "ac", 30)) <= 0.05
    model, params, _ = load_params(out)
    assert model.hidden == (16, 8) and params.shape == (model.n_params,)
    bad = run("train", "--data", str(tmp_path / "ac" / "train"), "--model", "mlp", "--embed-dim", "4",
              "--workers", "1", check=False)
    assert bad.returncode == 2 and "model 'mlp' does not take option(s) ['--embed-dim']" in bad.stderr
    widths = run("train", "--data", str(tmp_path / "ac" / "train"), "--model", "mlp", "--hidden", "16,x",
                 check=False)
    assert widths.returncode == 2 and "must be comma-separated integers like 256,256, got '16,x'" in widths.stderr
    unsplittable = run("train", "--data", str(tmp_path / "ac" / "train"), "--model", "softmax", "--model-partitions",
                       "2", "--scheduler", client.scheduler.address, "--output", str(tmp_path / "s.npz"), check=False)
    assert unsplittable.returncode == 2 and "Softmax cannot be partitioned" in unsplittable.stderr
    assert "the partitionable models are ['MLP', 'LocalAutoencoder']" in unsplittable.stderr


def test_demo_rejects_too_few_rows() -> None:
    proc = run("demo", "--rows", "2", check=False)
    assert proc.returncode == 2 and "must be at least 100, got 2" in proc.stderr
