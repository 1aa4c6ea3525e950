"""Ctrl-C on a real training command: SIGINT to its process group, as a terminal sends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dasklbfgs.models.persist import load_params
from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def acoustic(tmp_path_factory):
    """A small acoustic set on which an MLP trains for far longer than a test waits."""
    folder = tmp_path_factory.mktemp("interrupt") / "ac"
    run("data", "make", "acoustic", str(folder), "--rows", "3000", "--classes", "4", "--shard-rows", "1000",
        "--quiet")
    return folder / "train"


def start(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}
    # a session of its own: the test signals the whole group, workers included, as a terminal does
    return subprocess.Popen([sys.executable, "-m", "dasklbfgs.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def wait_until(condition, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"the run never got going (exit {proc.returncode})\n{out}\n{err}")
        time.sleep(0.1)


def printed_at_the_start(line: str) -> bool:
    """The dashboard line, or a line of Dask's warning that the default dashboard port is
    taken (by another run on this machine): printed at the start, not by the interruption."""
    return line.startswith("dashboard  ") or any(part in line for part in (
        "UserWarning: Port 8787 is already in use", "Perhaps you already have a cluster running?",
        "Hosting the HTTP server on port", "warnings.warn("))


@pytest.mark.parametrize(("solver_args", "unit"), [
    (["--solver", "sandblaster", "--maxiter", "100000", "--checkpoint-every", "3"], "iteration"),
    (["--solver", "downpour", "--epochs", "1000", "--batch-size", "32", "--checkpoint-every", "20"], "global step"),
])
def test_ctrl_c_stops_saves_and_exits_130(tmp_path, acoustic, solver_args, unit) -> None:
    output, checkpoint = tmp_path / "model.npz", tmp_path / "ckpt"
    proc = start("train", "--data", str(acoustic), "--model", "mlp", "--hidden", "16", "--workers", "2",
                 "--checkpoint", str(checkpoint), *solver_args, "--output", str(output))
    wait_until(lambda: (checkpoint / "zarr.json").exists(), proc)  # iterating: it has checkpointed
    signalled = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    stopped_in = time.monotonic() - signalled
    assert proc.returncode == 130, (out, err)
    lines = [line for line in err.strip().splitlines() if not printed_at_the_start(line)]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"interrupted at {unit} ") and lines[0].endswith(f"; parameters saved to {output}")
    reached = int(lines[0].split(f"{unit} ")[1].split(";")[0])
    assert reached > 0 and out == ""
    assert stopped_in < 10
    model, params, info = load_params(output)
    assert params.shape == (model.n_params,) and model.hidden == (16,)
    assert info["message"] == "interrupted" and info["success"] is False
    assert info["iterations" if unit == "iteration" else "steps"] == reached


def test_ctrl_c_during_a_pipeline_writes_its_report(tmp_path) -> None:
    import json
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "pipelines" / "acoustic-mlp-downpour.yaml"
    checkpoint, reports = tmp_path / "ckpt", tmp_path / "reports"
    proc = start("run", str(config), "--output", str(reports), "--workers", "2", "--quiet",
                 "--set", "data.rows=3000", "--set", "data.classes=4", "--set", "data.shard_rows=1000",
                 "--set", "model.hidden=16", "--set", "train.epochs=1000",
                 "--set", f"train.checkpoint_path={checkpoint}", "--set", "train.checkpoint_every=20")
    wait_until(lambda: (checkpoint / "zarr.json").exists(), proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    folder = reports / "acoustic-mlp-downpour"
    lines = [line for line in err.strip().splitlines() if not printed_at_the_start(line)]
    assert len(lines) == 1 and lines[0].endswith(f"; parameters saved to {folder / 'model.npz'}"), err
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["success"] is False and metrics["message"] == "interrupted"
    assert lines[0].startswith(f"interrupted at global step {metrics['solver_stats']['steps']};")
    model, params, _ = load_params(folder / "model.npz")
    assert params.shape == (model.n_params,)


def test_a_second_ctrl_c_aborts_at_once() -> None:
    script = """
import os, signal, sys, time
from dasklbfgs.cli.interrupt import Interrupt
with Interrupt() as interrupt:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    try:
        interrupt.check()
    except StopIteration as stop:
        print(f"first: {stop}", flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
print("not aborted")
"""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and proc.stdout == "first: interrupted\n"
    assert proc.stderr.strip() == "interrupted again: stopped without saving"
    assert time.monotonic() - started < 20


def _levels() -> dict[str, int]:
    import logging

    from dasklbfgs.cli.interrupt import SHUTDOWN_LOGGERS

    return {name: logging.getLogger(name).level for name in SHUTDOWN_LOGGERS}


def _set_levels(levels: dict[str, int]) -> None:
    import logging

    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_after_ctrl_c_the_embedded_cluster_closes_quietly(client) -> None:
    """The workers of an embedded cluster share the terminal: after Ctrl-C their shutdown
    logs (a heartbeat meeting the closed scheduler) are silenced too, and this process's
    levels come back after the close."""
    import logging

    from dasklbfgs.cli.interrupt import Interrupt

    silent = logging.CRITICAL + 1
    ours, workers = _levels(), client.run(_levels)
    interrupt = Interrupt()
    try:
        with interrupt.quiet_shutdown(client.cluster):  # not interrupted: nothing changes
            assert _levels() == ours and client.run(_levels) == workers
        interrupt.requested = True
        with interrupt.quiet_shutdown(client.cluster):
            assert set(_levels().values()) == {silent}
            assert all(set(levels.values()) == {silent} for levels in client.run(_levels).values())
        assert _levels() == ours
    finally:
        for address, levels in workers.items():
            client.run(_set_levels, levels, workers=[address])
