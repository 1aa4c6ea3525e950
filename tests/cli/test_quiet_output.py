"""What the command leaves out: a traceback when its reader closes the pipe, and other
libraries' log lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dasklbfgs.data import make_dataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet") / "mn"
    make_dataset("multinomial", root, rows=300, features=3, n_classes=3, shard_rows=100, seed=0)
    return root


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dasklbfgs.cli", *args]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}


@pytest.mark.parametrize(("args", "code"), [
    (["info", "{folder}"], 141),        # 128 + SIGPIPE, as a shell reports a command a closed pipe ended
    (["info", "{folder}/train", "--json"], 141),
    (["--help"], 0),                    # argparse ignores a closed pipe
    (["train", "--help"], 0),
])
def test_a_closed_pipe_ends_quietly(folder, args, code) -> None:
    """``dasklbfgs info DATA | head -1`` where head has gone before the command writes."""
    proc = subprocess.Popen(command(*(a.replace("{folder}", str(folder)) for a in args)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment())
    proc.stdout.close()  # the reader is gone: every write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == code
    assert err == ""  # no BrokenPipeError, no "Exception ignored"


def test_only_our_log_lines_are_shown() -> None:
    """A third party's INFO record (numexpr's, on importing pandas where it is installed)
    is not printed; its errors and our own lines and warnings are."""
    script = """if True:
        import logging
        from dasklbfgs.cli.logs import show_our_logs
        show_our_logs()
        logging.getLogger("numexpr.utils").info("NumExpr defaulting to 2 threads.")
        logging.getLogger("fsspec").info("another library's chatter")
        logging.getLogger("distributed.worker").error("a worker failed")
        logging.getLogger("dasklbfgs.pipeline.run").info("our progress")
        logging.getLogger("dasklbfgs.solvers").warning("our warning")
        show_our_logs()  # a second call adds no second handler
        logging.getLogger("dasklbfgs.pipeline.run").info("once")
    """
    err = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment(),
                         timeout=120, check=True).stderr
    assert "NumExpr" not in err and "chatter" not in err
    assert "a worker failed" in err
    assert [line.split(" ", 2)[2] for line in err.splitlines() if " dasklbfgs." in line] == [
        "dasklbfgs.pipeline.run our progress", "dasklbfgs.solvers our warning", "dasklbfgs.pipeline.run once"]


def test_a_normal_run_prints_no_third_party_log_lines(client, folder, tmp_path) -> None:
    """``train`` prints nothing on stderr but where the dashboard is (no progress line: stderr
    is not a terminal); ``run``'s log lines are all the package's own."""
    train = subprocess.run(command("train", "--data", str(folder / "train"), "--scheduler", client.scheduler.address,
                                   "--output", str(tmp_path / "m.npz")),
                           capture_output=True, text=True, env=environment(), timeout=240)
    assert train.returncode == 0 and train.stderr.startswith("dashboard  "), train.stderr
    assert len(train.stderr.splitlines()) == 1, train.stderr
    run = subprocess.run(command("run", str(ROOT / "pipelines" / "digits-softmax.yaml"), "--set", "data.recipe=null",
                                 "--set", f"data.train={folder / 'train'}", "--set", f"data.test={folder / 'test'}",
                                 "--set", "train.maxiter=5", "--scheduler", client.scheduler.address,
                                 "--output", str(tmp_path / "reports")),
                         capture_output=True, text=True, env=environment(), timeout=240)
    assert run.returncode in (0, 1), run.stderr
    loggers = [line.split(" ")[2] for line in run.stderr.splitlines() if not line.startswith("dashboard  ")]
    assert loggers and all(name.startswith("dasklbfgs.") for name in loggers), run.stderr
