"""The cluster flags of the commands that train: the dashboard line a run prints,
``--keep-open`` on a real command stopped by Ctrl-C, and the flags that make no sense together."""

from __future__ import annotations

import os
import re
import signal
import urllib.request

import pytest

from dasklbfgs import make_dataset
from dasklbfgs.cli.main import main
from dasklbfgs.cluster import SCHEDULER_ENV
from tests.cli._lines import Lines, stop
from tests.cli.test_interrupt import start


def test_keep_open_serves_the_dashboard_until_ctrl_c(tmp_path) -> None:
    train = make_dataset("logistic", tmp_path / "d", rows=400, features=3, shard_rows=200)["train"]
    proc = start("train", "--data", str(train.path), "--maxiter", "3", "--workers", "1",
                 "--dashboard-address", "127.0.0.1:0", "--keep-open", "--output", str(tmp_path / "m.npz"))
    try:
        err = Lines(proc.stderr)
        dashboard = err.until("dashboard  ")  # printed as the run starts
        match = re.fullmatch(r"dashboard  (http://127\.0\.0\.1:\d+)/status \(training curves: \1/training\)\n",
                             dashboard)
        assert match, dashboard
        assert err.until("dashboard open at ") == f"dashboard open at {match[1]}/status; Ctrl-C to stop\n"
        assert (tmp_path / "m.npz").exists()  # the run is over and saved
        with urllib.request.urlopen(f"{match[1]}/training", timeout=30) as page:  # and its page still served
            assert page.status == 200
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: the workers ignore it
        assert proc.wait(60) == 1  # the run's code (3 iterations: the limit), not an interruption's
        assert err.seen == [dashboard, f"dashboard open at {match[1]}/status; Ctrl-C to stop\n"]
        assert err.rest() == []  # a quiet stop
        assert "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT (success=False)" in proc.stdout.read()
    finally:
        stop(proc)


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--data", "d", "--scheduler-file", "s.json", "--dashboard-address", ":8787"],
     "--dashboard-address sets the embedded cluster's dashboard, but this run joins the scheduler in "
     "--scheduler-file 's.json', whose dashboard is set where it was started; drop --dashboard-address"),
    (["run", "p.yaml", "--scheduler", "tcp://127.0.0.1:9", "--keep-open"],
     "--keep-open keeps the embedded cluster up after the run, but this run joins the scheduler at --scheduler "
     "'tcp://127.0.0.1:9', which stays up on its own; drop --keep-open"),
    (["train", "--data", "d", "--dashboard-address", "127.0.0.1"],
     "--dashboard-address '127.0.0.1' is not HOST:PORT or :PORT (such as :8787, 127.0.0.1:8787, or 127.0.0.1:0 "
     "for any free port)"),
    (["demo", "--dashboard-address", ":65536"],
     "--dashboard-address ':65536' is not HOST:PORT or :PORT (such as :8787, 127.0.0.1:8787, or 127.0.0.1:0 "
     "for any free port)"),
])
def test_flags_of_an_embedded_cluster_are_checked_before_anything_starts(tmp_path, monkeypatch, capsys, argv,
                                                                          message) -> None:
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"dasklbfgs: error: {message}\n"
    assert list(tmp_path.iterdir()) == []  # the demo wrote no data


def test_keep_open_with_a_scheduler_from_the_environment(monkeypatch, capsys) -> None:
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:9")
    assert main(["train", "--data", "d", "--keep-open"]) == 2
    assert capsys.readouterr().err == (
        "dasklbfgs: error: --keep-open keeps the embedded cluster up after the run, but this run joins the scheduler "
        "of $DASKLBFGS_SCHEDULER ('tcp://127.0.0.1:9'), which stays up on its own; drop --keep-open\n")
