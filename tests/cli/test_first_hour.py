"""What a newcomer meets first: the demo's output and its next steps, ``run``'s summary and
its default report folder, and Ctrl-C pressed while the embedded cluster starts."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dasklbfgs.cli.demo import NEXT_STEPS
from dasklbfgs.cli.interrupt import STARTING_NOTE, Interrupt, InterruptedAtStart, start_remembering_ctrl_c
from dasklbfgs.cli.main import build_parser, main
from tests.cli._lines import Lines, stop

ROOT = Path(__file__).resolve().parents[2]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dasklbfgs.cli", *args]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "DASKLBFGS_SCHEDULER"}


def test_the_demo_says_when_its_dashboard_closes_and_ends_with_the_next_steps() -> None:
    proc = subprocess.run(command("demo", "--rows", "2000", "--workers", "2", "--dashboard-address", "127.0.0.1:0"),
                          capture_output=True, text=True, env=environment(), timeout=240)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    dashboard = next(i for i, line in enumerate(lines) if line.startswith("dashboard  "))
    assert re.fullmatch(r"dashboard  http://127\.0\.0\.1:\d+/status \(training curves: .*/training\)", lines[dashboard])
    assert lines[dashboard + 1] == "           closes when the demo ends; --keep-open keeps it up until Ctrl-C"
    assert proc.stdout.endswith(f"\n\n{NEXT_STEPS}\n")  # the last lines: the next steps
    # the objective says what it adds up: the train line's log-loss plus the penalty
    objective = next(line for line in lines if line.startswith("objective  "))
    assert re.fullmatch(r"objective  0\.\d+ \(what the solver minimised: log-loss \+ L2 penalty, on the training "
                        r"rows\)", objective), objective
    train = next(line for line in lines if line.startswith("train      "))
    log_loss = float(re.search(r"log-loss (0\.\d+)", train)[1])
    assert float(objective.split()[1]) > log_loss  # the penalty is positive (l2 = 1e-4)
    # backup tasks in words, and only when there were some (never "0 launched, 0 won")
    backups = [line for line in lines if line.startswith("backups ")]
    assert all(re.fullmatch(r"backups    [1-9]\d* slow tasks? copied to idle workers; \d+ cop(y|ies) finished first",
                            line) for line in backups), backups


def test_backup_tasks_are_said_in_words_and_only_when_launched() -> None:
    from dasklbfgs.solvers.stats import _backup_lines

    assert _backup_lines(0, 0) == []
    assert _backup_lines(1, 1) == ["backups    1 slow task copied to idle workers; 1 copy finished first"]
    assert _backup_lines(3, 0) == ["backups    3 slow tasks copied to idle workers; 0 copies finished first"]


def test_the_next_steps_run_as_printed(client, tmp_path, monkeypatch) -> None:
    """The demo's commands for one's own data work as written (on the session's cluster:
    ``--scheduler`` added), the cluster's parse, and the guide they name is there."""
    import numpy as np
    import pandas as pd

    from dasklbfgs.models.persist import load_params

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    rows = pd.DataFrame(X, columns=["a", "b", "c"]).assign(clicked=(X @ [1.0, -2.0, 0.5] > 0).astype(int))
    rows.to_csv(tmp_path / "rows.csv", index=False)
    monkeypatch.chdir(tmp_path)
    commands = re.findall(r"\bdasklbfgs ((?:data|train|cluster) [^()\n]*?)(?:\s{2,}|\s*$)", NEXT_STEPS, re.M)
    assert [c.split()[0] for c in commands] == ["data", "train", "cluster"], commands
    for argv in (shlex.split(c) for c in commands[:2]):
        assert main([*argv, "--scheduler", client.scheduler.address]) == 0, argv
    model, params, info = load_params(tmp_path / "model.npz")
    assert type(model).__name__ == "Logistic" and model.l2 == 1e-4 and params.shape == (4,)
    assert info["success"] and info["train"]["n_samples"] == 600
    assert build_parser().parse_args(shlex.split(commands[2])).func.__module__ == "dasklbfgs.cli.cluster"
    assert "--scheduler-file dasklbfgs-cluster.json" in NEXT_STEPS
    assert build_parser().parse_args(["train", "--data", "d", "--scheduler-file", "dasklbfgs-cluster.json"])
    assert "docs/guide.md" in NEXT_STEPS and (ROOT / "docs" / "guide.md").is_file()


def test_run_prints_a_short_summary_into_reports_by_default(client, tmp_path) -> None:
    """A handful of lines (every metric stays in metrics.json), the report in
    ./reports/<name>/ when no --output is given."""
    small = ["--set", "data.rows=2000", "--set", "data.features=10", "--set", "data.shard_rows=1000"]
    proc = subprocess.run(command("run", str(ROOT / "pipelines" / "logistic-sandblaster.yaml"), *small,
                                  "--scheduler", client.scheduler.address),
                          capture_output=True, text=True, env=environment(), timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "reports" / "logistic-sandblaster"
    metrics = json.loads((folder / "metrics.json").read_text())
    lines = proc.stdout.splitlines()
    assert len(lines) < 20, proc.stdout
    assert lines[0].startswith("pipeline   logistic-sandblaster: Logistic(n_features=10, ")
    assert lines[1] == f"stopped    {metrics['message']} (success=True)"
    test = metrics["test"]
    assert f"test       400 rows: accuracy {test['accuracy']:.4f}, log-loss {test['log_loss']:.4g}, " in proc.stdout
    assert lines[-2].startswith(f"took       {metrics['durations']['total_seconds']:.1f} s (data ")
    assert lines[-1] == (f"report     {folder}/ (curves.json, curves.png, metrics.json, model.npz, scores.png); every "
                         "metric in metrics.json")
    # metrics.json still has it all: every metric (the confusion matrices), the config, versions, durations
    assert test["confusion_matrix"] and metrics["train"]["confusion_matrix"] and "brier_score" in test
    assert metrics["config"]["data"]["rows"] == 2000 and "dasklbfgs" in metrics["versions"]
    assert metrics["solver_stats"]["iterations"] > 0 and metrics["files"] == sorted(p.name for p in folder.iterdir())


def test_ctrl_c_while_the_cluster_starts_stops_before_training(tmp_path) -> None:
    """SIGINT to the process group (as a terminal sends it) right after the data is written:
    one line at once, then, once the cluster is up, exit 130 without training; the workers,
    started meanwhile, never see it (no traceback of theirs)."""
    proc = subprocess.Popen(command("demo", "--rows", "2000", "--workers", "2", "--dashboard-address", "127.0.0.1:0",
                                    "--keep", str(tmp_path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
                            start_new_session=True)
    try:
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        out.until("data       2000 x 50 ")  # printed just before the cluster starts
        signalled = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        assert err.until("Ctrl-C: ", timeout=30) == STARTING_NOTE + "\n"
        assert time.monotonic() - signalled < 5  # at once, not once the cluster is up
        assert proc.wait(120) == 130
        rest = err.rest()  # the last line says so, and no worker's traceback came before it
        assert rest[-1:] == ["interrupted\n"] and not any("Traceback" in line for line in rest), err.seen
        assert out.rest() == []  # no cluster, dashboard or report lines: nothing trained
        assert not (tmp_path / "demo-model.npz").exists()  # and nothing saved
    finally:
        stop(proc)


SHIELDED_START = """
import io, json, os, signal, time
from pathlib import Path

from dasklbfgs.cli.interrupt import Interrupt, start_remembering_ctrl_c
from dasklbfgs.cluster import connect


def blocked_in_every_thread():
    masks = [next(line for line in (task / "status").read_text().splitlines() if line.startswith("SigBlk:"))
             for task in Path(f"/proc/{os.getpid()}/task").iterdir()]
    return bool(masks) and all(int(mask.split()[1], 16) & (1 << (signal.SIGINT - 1)) for mask in masks)


def start():
    os.kill(os.getpid(), signal.SIGINT)  # from the starting thread, where SIGINT is blocked
    return connect(n_workers=2, dashboard_address=None, memory_limit="1GiB")


if __name__ == "__main__":
    stream = io.StringIO()
    with Interrupt(stream) as interrupt:
        client = start_remembering_ctrl_c(start, interrupt)
    with client:
        pids = client.run(os.getpid)
        for pid in pids.values():
            os.kill(pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches them
        time.sleep(1)
        print(json.dumps({"requested": interrupt.requested, "said": stream.getvalue(),
                          "blocked_here": signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
                          "blocked_in_workers": list(client.run(blocked_in_every_thread).values()),
                          "same_workers": client.run(os.getpid) == pids}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the threads' signal masks from /proc")
def test_a_cluster_started_shielded_keeps_ctrl_c_from_its_workers_and_remembers_it(tmp_path) -> None:
    """In a fresh process, as the commands start theirs: a Ctrl-C during the start is
    remembered and said; the workers have SIGINT blocked in every thread and outlive one."""
    script = tmp_path / "shielded_start.py"
    script.write_text(SHIELDED_START)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment(),
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["requested"] and found["said"] == STARTING_NOTE + "\n"
    assert not found["blocked_here"]  # the command's own thread keeps Ctrl-C
    assert found["blocked_in_workers"] == [True, True] and found["same_workers"], found


def test_a_ctrl_c_during_the_start_raises_once_the_cluster_is_up(client) -> None:
    from distributed import Client

    from dasklbfgs.cli.cluster_args import started_client

    joined: list[Client] = []

    def start() -> Client:
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while not interrupt.requested and time.monotonic() < deadline:  # still starting when it is handled
            time.sleep(0.01)
        joined.append(Client(client.scheduler.address, set_as_default=False))
        return joined[0]

    with Interrupt(io.StringIO()) as interrupt:
        with pytest.raises(InterruptedAtStart, match="Ctrl-C while the cluster started: stopped before the run began"):
            with started_client(start, interrupt):
                pytest.fail("the command went on after a Ctrl-C during the start")
    assert joined[0].status == "closed"
    assert interrupt.stream.getvalue() == STARTING_NOTE + "\n"


def test_a_ctrl_c_just_before_the_start_is_said_when_it_begins(client) -> None:
    """Pressed after the command took Ctrl-C over but before the start began (while it set
    up): said as the start begins, and once, however the two meet."""
    from distributed import Client

    stream = io.StringIO()
    with Interrupt(stream) as interrupt:
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while not interrupt.requested and time.monotonic() < deadline:
            time.sleep(0.01)
        assert interrupt.requested and stream.getvalue() == ""  # not starting yet: nothing said
        start_remembering_ctrl_c(lambda: Client(client.scheduler.address, set_as_default=False), interrupt).close()
    assert stream.getvalue() == STARTING_NOTE + "\n"
