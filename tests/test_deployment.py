"""A real deployment: `dask scheduler` and `dask worker` processes on loopback, trained
against from the dasklbfgs command line and from Python; and the same deployment used as
one with no shared filesystem (the workers in directories of their own, blind to the
client's), where the client writes, trains and reports through S3 URLs only."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import dask
import numpy as np
import pytest

import dasklbfgs
from dasklbfgs import Logistic, ShardedDataset, connect, make_dataset, predict, sandblaster_lbfgs
from dasklbfgs.cli.cluster_args import dashboard_line
from tests._s3 import storage_flags


def _dask() -> list[str]:
    exe = shutil.which("dask")
    return [exe] if exe else [sys.executable, "-m", "dask"]


class Deployment(NamedTuple):
    scheduler_file: Path
    root: Path  # a folder the client and the workers both see (datasets of the tests that share one)
    client_dir: Path  # the client's own: the workers see an empty folder there when `hidden`
    worker_dir: Path  # the workers' working, local (scratch), home and temporary directory
    hidden: bool  # whether the workers run in a mount namespace where client_dir is an empty tmpfs


def _can_hide_folders() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One scheduler and two single-threaded worker processes; SIGTERM stops them. The
    workers run in a directory of their own (working, scratch, HOME and TMPDIR) and, where
    mount namespaces are available, see an empty folder at the client's own directory: as
    on machines that share no filesystem with the client."""
    root = tmp_path_factory.mktemp("deploy")
    scheduler_file = root / "scheduler.json"
    client_dir, worker_dir = root / "client", root / "workers"
    client_dir.mkdir()
    worker_dir.mkdir()
    env = _env_with_this_package()
    scheduler = subprocess.Popen(
        [*_dask(), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
         "--scheduler-file", str(scheduler_file), "--preload", "dasklbfgs.monitor.dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    workers = None
    hidden = _can_hide_folders()
    try:
        deadline = time.monotonic() + 30
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, "the scheduler did not write its file"
            assert scheduler.poll() is None, "the scheduler exited"
            time.sleep(0.1)
        worker = [*_dask(), "worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                  "--nworkers", "2", "--nthreads", "1", "--memory-limit", "1GiB", "--no-dashboard",
                  "--local-directory", str(worker_dir)]
        if hidden:  # `exec`: the Popen's process is the worker's, so SIGTERM reaches it
            worker = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                      f"mount -t tmpfs none {shlex.quote(str(client_dir))} && exec {shlex.join(worker)}"]
        workers = subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=worker_dir,
                                   env={**env, "HOME": str(worker_dir), "TMPDIR": str(worker_dir)})
        with connect(scheduler_file=scheduler_file) as client:
            client.wait_for_workers(2, timeout=60)
        yield Deployment(scheduler_file, root, client_dir, worker_dir, hidden)
    finally:
        for proc in (workers, scheduler):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (workers, scheduler):
            if proc is not None:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_cli_trains_against_the_scheduler_file(deployment) -> None:
    scheduler_file, root = deployment.scheduler_file, deployment.root
    make_dataset("logistic", root / "logit", rows=20_000, features=8, shard_rows=2_500, overwrite=True)
    # Relative paths, from a directory that is not the workers' working directory: the
    # command makes them absolute before the workers see them.
    assert Path.cwd() != root
    out = subprocess.run(
        [sys.executable, "-m", "dasklbfgs.cli", "train", "--scheduler-file", str(scheduler_file),
         "--data", "logit/train", "--test", "logit/test",
         "--model", "logistic", "--l2", "1e-3", "--output", "m.npz", "--json"],
        capture_output=True, text=True, timeout=180, cwd=root, env=_env_with_this_package(),
    )
    assert out.returncode == 0, out.stderr
    assert (root / "m.npz").exists()
    port = json.loads(scheduler_file.read_text())["services"]["dashboard"]  # the page the run is on, preloaded
    assert out.stderr.splitlines()[0] == (f"dashboard  http://127.0.0.1:{port}/status "
                                          f"(training curves: http://127.0.0.1:{port}/training)")
    report = json.loads(out.stdout)
    assert report["success"] and report["test"]["accuracy"] > 0.6


def _env_with_this_package() -> dict[str, str]:
    """The environment, with this checkout importable from another working directory."""
    env = {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}
    here = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def test_a_dataset_a_worker_cannot_see_is_one_line_naming_it(tmp_path) -> None:
    """A worker in its own mount namespace, where the dataset's folder is an empty tmpfs:
    the client sees the dataset, the worker does not (as without a shared file system)."""
    if not _can_hide_folders():
        pytest.skip("needs unshare -m (root or user namespaces) to hide a folder from one worker")
    hidden = tmp_path / "hidden"
    train = make_dataset("logistic", hidden, rows=200, features=2, shard_rows=100)["train"]
    scheduler_file = tmp_path / "scheduler.json"
    env = _env_with_this_package()
    processes = [subprocess.Popen(
        [*_dask(), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
         "--scheduler-file", str(scheduler_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        worker = " ".join([*_dask(), "worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
                           "--nthreads", "1", "--no-nanny", "--no-dashboard"])
        processes.append(subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs none {hidden} && exec {worker}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, "the scheduler did not write its file"
            time.sleep(0.1)
        with connect(scheduler_file=scheduler_file) as client:
            client.wait_for_workers(1, timeout=60)
            # a scheduler started without the page: the command says what to add
            assert dashboard_line(client) == (f"dashboard  {client.dashboard_link} (no Training page: start the "
                                              "scheduler with --preload dasklbfgs.monitor.dashboard)")
        proc = subprocess.run([sys.executable, "-m", "dasklbfgs.cli", "train", "--scheduler-file", str(scheduler_file),
                               "--data", str(train.path), "--output", str(tmp_path / "m.npz")],
                              capture_output=True, text=True, timeout=120, env=env)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "error: worker tcp://127.0.0.1:" in proc.stderr
    assert f"cannot read the dataset at {str(train.path)!r} (no dataset at " in proc.stderr
    assert not (tmp_path / "m.npz").exists()


def test_a_pipeline_runs_against_the_scheduler_file(deployment) -> None:
    scheduler_file, root = deployment.scheduler_file, deployment.root
    config = Path(__file__).resolve().parents[1] / "pipelines" / "digits-softmax.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "dasklbfgs.cli", "run", str(config), "--scheduler-file", str(scheduler_file),
         "--output", str(root / "reports"), "--set", "train.maxiter=30", "--quiet"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: stopped at maxiter, reported as such
    metrics = json.loads((root / "reports" / "digits-softmax" / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] > 0.85
    assert (root / "reports" / "digits-softmax" / "curves.png").exists()


def test_python_api_and_environment_variable(deployment, monkeypatch) -> None:
    scheduler_file, root = deployment.scheduler_file, deployment.root
    splits = make_dataset("logistic", root / "api", rows=8_000, features=5, shard_rows=1_000, overwrite=True)
    monkeypatch.setenv("DASKLBFGS_SCHEDULER", str(scheduler_file))
    with connect() as client:
        pids = client.run(os.getpid)
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        result = sandblaster_lbfgs(Logistic(5, l2=1e-3), splits["train"], client=client)
        assert result.success
        # the evaluations asked the `dask worker` processes directly (their plugin came through the scheduler)
        assert result.stats["evaluations_direct"] == result.stats["evaluations"]
        # Same iterates as on an embedded cluster: the deployment does not change the math.
    with connect(n_workers=1, dashboard_address=None) as embedded:
        local = sandblaster_lbfgs(Logistic(5, l2=1e-3), splits["train"], client=embedded)
    np.testing.assert_array_equal(result.x, local.x)
    # A client made as Dask users make one (direct_to_workers=None) keeps the direct calls on the
    # `dask worker` processes, for Newton's procedure too
    from distributed import Client

    with Client(scheduler_file=str(scheduler_file)) as plain:
        assert plain.direct_to_workers is None
        newton = dasklbfgs.minimize(Logistic(5, l2=1e-3), splits["train"], "newton", client=plain, gtol=1e-10)
    assert newton.success and newton.stats["evaluations_direct"] == newton.stats["evaluations"] == newton.nfev
    assert newton.fun <= local.fun and newton.nfev <= 8


def test_a_scheduler_that_is_not_there_fails_fast(tmp_path) -> None:
    from dasklbfgs.errors import ClusterConnectionError

    started = time.monotonic()
    with pytest.raises(ClusterConnectionError,
                       match=r"could not reach the Dask scheduler at 'tcp://127.0.0.1:9' within 3 s"):
        connect("tcp://127.0.0.1:9", timeout=3)
    assert time.monotonic() - started < 15
    train = make_dataset("logistic", tmp_path / "d", rows=100, features=2, shard_rows=50)["train"]  # opened first
    proc = subprocess.run([sys.executable, "-m", "dasklbfgs.cli", "train", "--scheduler", "tcp://127.0.0.1:9",
                           "--timeout", "3", "--data", str(train.path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "could not reach the Dask scheduler" in proc.stderr


def test_preloaded_training_page(deployment) -> None:
    import urllib.request

    scheduler_file, root = deployment.scheduler_file, deployment.root
    port = json.loads(scheduler_file.read_text())["services"]["dashboard"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/training", timeout=30) as response:
        html = response.read().decode()
    assert response.status == 200 and 'class="navbar"' in html and "bokeh" in html.lower()
    # The page shows the newest run, not an earlier one of this long-lived scheduler.
    train = make_dataset("logistic", root / "page", rows=2_000, features=3, shard_rows=500, overwrite=True)["train"]
    with connect(scheduler_file=scheduler_file) as client:
        result = sandblaster_lbfgs(Logistic(3, l2=1e-3), train, client=client)
        def training_page(dask_scheduler) -> tuple[str | None, str]:
            """The run the Training page shows and its status line, built in the scheduler's
            process (defined here so that it travels by value: the scheduler cannot import tests)."""
            from dasklbfgs.monitor import TrainingPage

            page = TrainingPage(dask_scheduler)
            page.update()
            return page.run, page.status.text

        shown, status = client.run_on_scheduler(training_page)
    assert shown == result.run_id and "finished" in status


# -- no shared filesystem: the client writes, trains and reports through URLs only ---------------------------

# checkpoints every 5 iterations (and at the end): each is a dozen requests to the store
TIGHT = {"gtol": 1e-9, "ftol": 1e-14, "checkpoint_every": 5}


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _check_nothing_local(deployment: Deployment, client, *, client_files: tuple[str, ...] = ()) -> None:
    """The run left nothing in the client's folder (its working and temporary directory)
    but ``client_files``, and nothing but Dask's own lock files in the workers' folder."""
    assert _files(deployment.client_dir) == sorted(client_files)
    assert [f for f in _files(deployment.worker_dir) if not f.endswith((".lock", ".dirlock"))] == []
    if deployment.hidden:  # what the workers see at the client's folder: their own, empty
        assert client.run(os.listdir, str(deployment.client_dir)) == {w: [] for w in client.run(os.getpid)}


@pytest.fixture(scope="module")
def on_s3(deployment, s3):
    """A training set written by the workers (rows made there, by dask) and a held-out set
    written by the client from numpy, both on S3; the rows, for the references."""
    import dask.array as da
    from scipy.optimize import minimize

    bucket, options = s3
    folder = f"{bucket}/no-shared-fs"
    rows = da.random.RandomState(0).normal(size=(4_000, 6), chunks=(1_000, 6))
    labels = (rows @ np.linspace(-1, 1, 6) + da.random.RandomState(1).normal(size=4_000, chunks=1_000) > 0)
    labels = labels.astype(np.int64)
    rng = np.random.default_rng(2)
    X_test = rng.normal(size=(1_000, 6))
    y_test = (X_test @ np.linspace(-1, 1, 6) + rng.normal(size=1_000) > 0).astype(np.int64)
    with connect(scheduler_file=deployment.scheduler_file) as client:
        train = ShardedDataset.from_dask(f"{folder}/train", rows, labels, shard_rows=500, client=client,
                                         storage_options=options)
    test = ShardedDataset.create(f"{folder}/test", X_test, y_test, shard_rows=500, storage_options=options)
    # the same graph computed here: the rows the workers made
    X, y = (np.asarray(a) for a in dask.compute(rows, labels, scheduler="sync"))
    model = Logistic(6, l2=1e-3)
    reference = minimize(lambda p: model.objective(p, X, y), np.zeros(model.n_params), jac=True,
                         method="L-BFGS-B", options={"maxiter": 5000, "gtol": TIGHT["gtol"], "ftol": TIGHT["ftol"]})
    return {"folder": folder, "options": options, "train": train, "test": test, "X": X, "y": y, "model": model,
            "reference": reference}


def _check_optimum(on_s3: dict, params: np.ndarray) -> None:
    """``params`` minimise the objective as scipy's L-BFGS-B on the same rows does (and are
    the Python API's run's, bit for bit, once that has run: the front end changes nothing)."""
    model, X, y = on_s3["model"], on_s3["X"], on_s3["y"]
    assert model.objective(params, X, y)[0] == pytest.approx(on_s3["reference"].fun, rel=1e-8)
    if "api_x" in on_s3:
        np.testing.assert_array_equal(params, on_s3["api_x"])


def test_the_workers_wrote_the_training_rows_to_s3(on_s3) -> None:
    train, test = on_s3["train"], on_s3["test"]
    assert train.url == f"{on_s3['folder']}/train" and train.n_shards == 8
    X, y = train.load_rows(0, train.n_samples)
    np.testing.assert_array_equal(X, on_s3["X"])
    np.testing.assert_array_equal(y, on_s3["y"])
    assert test.n_samples == 1_000 and test.url == f"{on_s3['folder']}/test"


def test_python_api_trains_from_s3_with_a_checkpoint_there(deployment, on_s3, monkeypatch) -> None:
    from dasklbfgs.checkpoint_store import read_checkpoint
    from dasklbfgs.data.location import Location

    monkeypatch.chdir(deployment.client_dir)
    model = on_s3["model"]
    checkpoint = f"{on_s3['folder']}/checkpoint-api"
    with connect(scheduler_file=deployment.scheduler_file) as client:
        result = sandblaster_lbfgs(model, on_s3["train"], client=client, checkpoint_path=checkpoint, **TIGHT)
        _check_nothing_local(deployment, client)
    assert result.success
    _check_optimum(on_s3, result.x)
    # the checkpoint is at the URL (reached with the dataset's storage_options), with the end's iterate
    arrays, attrs = read_checkpoint(Location.of(checkpoint, on_s3["options"]), kind="sandblaster")
    np.testing.assert_array_equal(arrays["x"], result.x)
    on_s3["api_x"] = result.x


def test_cli_train_reads_writes_and_checkpoints_at_urls_only(deployment, on_s3) -> None:
    from dasklbfgs.checkpoint_store import checkpoint_exists
    from dasklbfgs.data.location import Location
    from dasklbfgs.models.persist import load_params

    folder, options = on_s3["folder"], on_s3["options"]
    tmp = deployment.client_dir / "tmp"  # the command's temporary directory, inside the client's folder
    tmp.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "dasklbfgs.cli", "train", "--scheduler-file", str(deployment.scheduler_file),
         "--data", f"{folder}/train", "--test", f"{folder}/test", *storage_flags(options),
         "--model", "logistic", "--l2", "1e-3", *(f"--{key.replace('_', '-')}={value}" for key, value in TIGHT.items()),
         "--checkpoint", f"{folder}/checkpoint-cli", "--output", f"{folder}/cli-model.npz", "--json"],
        capture_output=True, text=True, timeout=180, cwd=deployment.client_dir,
        env={**_env_with_this_package(), "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["output"] == f"{folder}/cli-model.npz" and report["test"]["accuracy"] > 0.8
    model, params, info = load_params(f"{folder}/cli-model.npz", storage_options=options)
    assert model == on_s3["model"] and info["dataset"] == f"{folder}/train"
    _check_optimum(on_s3, params)
    assert checkpoint_exists(Location.of(f"{folder}/checkpoint-cli", options))
    with connect(scheduler_file=deployment.scheduler_file) as client:
        _check_nothing_local(deployment, client)  # no folder named "s3:", nothing left in its TMPDIR


def test_a_pipeline_with_everything_at_urls(deployment, on_s3) -> None:
    import yaml

    from dasklbfgs.checkpoint_store import checkpoint_exists
    from dasklbfgs.data.location import Location
    from dasklbfgs.models.persist import load_params

    folder, options = on_s3["folder"], on_s3["options"]
    config = {"pipeline": {"name": "no-shared-fs"},
              "data": {"train": f"{folder}/train", "test": f"{folder}/test"},
              "model": {"name": "logistic", "l2": 1e-3},
              "train": {"solver": "sandblaster", "checkpoint_path": f"{folder}/checkpoint-pipeline", **TIGHT},
              "storage_options": options}
    (deployment.client_dir / "pipeline.yaml").write_text(yaml.safe_dump(config))
    tmp = deployment.client_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "dasklbfgs.cli", "run", "pipeline.yaml", "--scheduler-file",
         str(deployment.scheduler_file), "--output", f"{folder}/reports", "--quiet"],
        capture_output=True, text=True, timeout=180, cwd=deployment.client_dir,
        env={**_env_with_this_package(), "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    report = Location.of(f"{folder}/reports/no-shared-fs", options)
    metrics = json.loads(report.read("metrics.json"))
    assert metrics["success"] and metrics["datasets"] == {"train": f"{folder}/train", "test": f"{folder}/test"}
    assert metrics["cluster"]["workers"] == 2 and metrics["test"]["accuracy"] > 0.8
    assert sorted(report.children()) == ["curves.json", "curves.png", "metrics.json", "model.npz", "scores.png"]
    _, params, _ = load_params(report / "model.npz")
    _check_optimum(on_s3, params)
    assert checkpoint_exists(Location.of(f"{folder}/checkpoint-pipeline", options))
    with connect(scheduler_file=deployment.scheduler_file) as client:
        _check_nothing_local(deployment, client, client_files=("pipeline.yaml",))  # the report staged and gone
    (deployment.client_dir / "pipeline.yaml").unlink()


def test_local_paths_the_workers_do_not_share_are_refused(deployment, on_s3) -> None:
    """A dataset, a worker-written dataset, predictions and a sharded checkpoint at paths on
    the client's disk: each refused with the error naming the path, before anything is written."""
    import dask.array as da

    from dasklbfgs.errors import CheckpointError, DatasetError, StoreError

    if not deployment.hidden:
        pytest.skip("needs unshare -m (root or user namespaces) to hide the client's folder from the workers")
    local = deployment.client_dir / "local"
    at = re.escape(str(local))
    try:
        with connect(scheduler_file=deployment.scheduler_file) as client:
            data = ShardedDataset.create(local / "train", on_s3["X"], on_s3["y"], shard_rows=500)
            with pytest.raises(DatasetError, match=rf"cannot read the dataset at '{at}/train' \(no dataset at "):
                data.check_workers_can_read(client)
            rows = da.from_array(on_s3["X"], chunks=(1_000, 6))
            with pytest.raises(StoreError, match=rf"cannot see the folder this process writes '{at}/written' in"):
                ShardedDataset.from_dask(local / "written", rows, on_s3["y"], shard_rows=500, client=client)
            assert not (local / "written").exists()
            for fmt in ("zarr", "parquet"):
                with pytest.raises(StoreError, match=rf"cannot see the folder this process writes '{at}/scores' in: "
                                                     "the workers write the predictions themselves"):
                    predict(Logistic(6), np.zeros(7), on_s3["train"], output=local / "scores", format=fmt,
                            client=client)
                assert not (local / "scores").exists()
            with pytest.raises(CheckpointError, match=r"cannot see the folder the checkpoint is written in \("
                                                      rf"'{at}/\.checkpoint\.writing-"):
                sandblaster_lbfgs(Logistic(6, l2=1e-3), on_s3["train"], client=client, state="sharded",
                                  checkpoint_path=local / "checkpoint", maxiter=2)
            assert not (local / "checkpoint").exists()
            assert _files(local) == [f for f in _files(local) if f.startswith("train/")]
            assert client.run(os.listdir, str(deployment.client_dir)) == {w: [] for w in client.run(os.getpid)}
    finally:
        shutil.rmtree(local, ignore_errors=True)
