"""``dasklbfgs cluster start``: a real cluster process that two training commands join, whose
Training page then lists both runs; Ctrl-C stops it quietly."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request

import pytest

from dasklbfgs import make_dataset
from dasklbfgs.cli.main import main
from tests.cli._lines import Lines, stop
from tests.cli.test_cli import run
from tests.cli.test_interrupt import start


def test_runs_accumulate_on_a_cluster_that_outlives_them(tmp_path) -> None:
    from distributed import Client

    from dasklbfgs.monitor.events import TOPIC

    train = make_dataset("logistic", tmp_path / "d", rows=400, features=3, shard_rows=200)["train"]
    scheduler_file = tmp_path / "cluster.json"
    cluster = start("cluster", "start", "--workers", "1", "--dashboard-address", "127.0.0.1:0",
                    "--scheduler-file", str(scheduler_file))
    try:
        out = Lines(cluster.stdout)
        address = out.until("cluster    ")
        assert re.fullmatch(r"cluster    tcp://127\.0\.0\.1:\d+ \(LocalCluster, 1 worker x 1 thread\)\n", address)
        dashboard = out.until("dashboard  ")
        port = json.loads(scheduler_file.read_text())["services"]["dashboard"]  # written once the workers are up
        assert dashboard == (f"dashboard  http://127.0.0.1:{port}/status "
                             f"(training curves: http://127.0.0.1:{port}/training)\n")
        assert out.until("join with  ") == (f"join with  --scheduler-file {scheduler_file}  "
                                            f"(or: export DASKLBFGS_SCHEDULER={scheduler_file})\n")
        assert out.until("running until Ctrl-C") == "running until Ctrl-C\n"

        joined = [run("train", "--data", str(train.path), "--maxiter", "3", "--l2", l2, "--scheduler-file",
                      str(scheduler_file), "--output", str(tmp_path / f"m{l2}.npz"), check=False, timeout=120)
                  for l2 in ("0.1", "0.01")]
        for proc in joined:
            assert proc.returncode == 1, proc.stderr  # 3 iterations: the limit, as reported
            assert proc.stderr.splitlines()[0] == dashboard.rstrip("\n"), proc.stderr  # the page they are on
        with Client(scheduler_file=str(scheduler_file)) as client:
            events = [message for _, message in client.get_events(TOPIC)]

            def picker(dask_scheduler) -> list[str]:
                """The runs the Training page's picker lists (defined here: it travels by value)."""
                from dasklbfgs.monitor import TrainingPage

                page = TrainingPage(dask_scheduler)
                page.update()
                return [value for value, _ in page.picker.options]

            listed = client.run_on_scheduler(picker)
        starts = [e for e in events if e["kind"] == "start"]
        assert [("l2=0.1," in s["model"], "l2=0.01," in s["model"]) for s in starts] == [(True, False), (False, True)]
        assert len(starts) == 2 and {e["run"] for e in events if e["kind"] == "end"} == {s["run"] for s in starts}
        assert listed == [starts[1]["run"], starts[0]["run"]]  # newest first, the first run still there
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/training", timeout=30) as page:
            assert page.status == 200

        second = run("cluster", "start", "--scheduler-file", str(scheduler_file), check=False)
        cluster_address = json.loads(scheduler_file.read_text())["address"]
        assert second.returncode == 2 and second.stderr == (
            f"dasklbfgs: error: --scheduler-file {str(scheduler_file)!r}: a cluster runs there already (its scheduler "
            f"at {cluster_address}); join it with --scheduler-file {scheduler_file}, or stop it before starting "
            "another\n")

        os.killpg(cluster.pid, signal.SIGINT)  # Ctrl-C: the workers ignore it, the cluster stops them
        assert cluster.wait(60) == 0
        assert out.rest() == [] and cluster.stderr.read() == ""  # a quiet stop
        assert not scheduler_file.exists()
    finally:
        stop(cluster)


def test_a_scheduler_file_that_is_not_one_is_left_alone(tmp_path, capsys) -> None:
    mine = tmp_path / "settings.json"
    mine.write_text('{"theme": "dark"}')
    assert main(["cluster", "start", "--scheduler-file", str(mine)]) == 2
    assert capsys.readouterr().err == (f"dasklbfgs: error: --scheduler-file {str(mine)!r} exists and is not a "
                                       "scheduler file; choose another --scheduler-file\n")
    assert mine.read_text() == '{"theme": "dark"}'


@pytest.mark.parametrize(("argv", "message"), [
    (["--workers", "0"], "--workers must be >= 1, got 0"),
    (["--dashboard-address", "localhost:http"],
     "--dashboard-address 'localhost:http' is not HOST:PORT or :PORT (such as :8787, 127.0.0.1:8787, "
     "or 127.0.0.1:0 for any free port)"),
    (["--scheduler-file", "{tmp}/missing/cluster.json"],
     "--scheduler-file '{tmp}/missing/cluster.json': the folder '{tmp}/missing' does not exist"),
])
def test_bad_flags_start_nothing(tmp_path, capsys, argv, message) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["cluster", "start", *argv]) == 2
    assert capsys.readouterr().err == f"dasklbfgs: error: {message.replace('{tmp}', str(tmp_path))}\n"
    assert list(tmp_path.iterdir()) == []
