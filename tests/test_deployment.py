"""A real deployment: `dask scheduler` and `dask worker` processes on loopback, trained
against from the dasklbfgs command line and from Python."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import Logistic, connect, make_dataset, sandblaster_lbfgs


def _dask() -> list[str]:
    exe = shutil.which("dask")
    return [exe] if exe else [sys.executable, "-m", "dask"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One scheduler and two single-threaded worker processes; SIGTERM stops them."""
    root = tmp_path_factory.mktemp("deploy")
    scheduler_file = root / "scheduler.json"
    env = {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}
    scheduler = subprocess.Popen(
        [*_dask(), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
         "--scheduler-file", str(scheduler_file), "--preload", "dasklbfgs.monitor.dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    workers = None
    try:
        deadline = time.monotonic() + 30
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, "the scheduler did not write its file"
            assert scheduler.poll() is None, "the scheduler exited"
            time.sleep(0.1)
        workers = subprocess.Popen(
            [*_dask(), "worker", "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
             "--nworkers", "2", "--nthreads", "1", "--memory-limit", "1GiB", "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        with connect(scheduler_file=scheduler_file) as client:
            client.wait_for_workers(2, timeout=60)
        yield scheduler_file, root
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
    scheduler_file, root = deployment
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
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode != 0:
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
    scheduler_file, root = deployment
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
    scheduler_file, root = deployment
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

    scheduler_file, root = deployment
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
