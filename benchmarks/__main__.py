"""Run the benchmark suite and regenerate ``RESULTS.md``.

    python -m benchmarks run --suite full            # every benchmark as recorded (about an hour)
    python -m benchmarks run --suite quick           # small sizes, a few minutes, into benchmarks/quick/
    python -m benchmarks run --only peers downpour   # some of them
    python -m benchmarks report                      # RESULTS.md from the recorded results only

Each benchmark runs in its own process (``python -m benchmarks.NAME ARGS``), writes
``results/NAME.json`` and ``RESULTS-NAME.md``, and the runner then writes ``RESULTS.md``:
the machine and versions, a table of every benchmark with the exact command that produced
its numbers, its date and how long it took, and every report in full. The full suite
writes into ``benchmarks/`` (the recorded results); the quick suite into
``benchmarks/quick/``, so a quick look never overwrites a recorded figure. A benchmark that
fails is reported as failed, with its error, not left out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import HERE, machine

#: name -> (report file stem, args of the quick suite); the full suite runs the defaults.
SUITE: dict[str, tuple[str, list[str]]] = {
    "versus": ("versus", ["--rows", "100000", "--softmax-rows", "20000", "--softmax-classes", "20", "--repeats", "1"]),
    "sandblaster": ("sandblaster", ["--rows", "200000", "--repeats", "3", "--skip-dask-glm"]),
    "downpour": ("downpour", ["--rows", "20000", "--repeats", "5", "--heavy-rows", "8000", "--heavy-epochs", "1",
                              "--heavy-repeats", "1"]),
    "neural": ("neural", ["--rows", "20000", "--epochs", "1", "--kernel-rows", "2048", "--repeats", "3"]),
    "torch_models": ("torch-models", ["--rows", "8000", "--regression-rows", "4000", "--repeats", "3"]),
    "peers": ("peers", ["--rows", "20000", "--epochs", "1", "--runs", "1", "--replicas", "1", "2"]),
    "sharded_state": ("sharded-state", ["--widths", "1000", "100000", "--iterations", "3", "--limited-width", "0"]),
    "sparse_portions": ("sparse", ["--rows", "25000", "--features", "1048576", "--shard-rows", "5000",
                                   "--portion-rows", "5000", "--iterations", "2", "--repeats", "1"]),
    "l1": ("l1", ["--rows", "20000"]),
    "ctr": ("ctr", ["--rows", "50000", "--features", "262144", "--repeats", "1", "--wide-features", "4194304"]),
    "reliability": ("reliability", ["--rows", "100000", "--workers", "2", "--repeats", "3"]),
    "chaos": ("chaos", ["--runs", "3", "--peer-runs", "1", "--reference-runs", "1"]),
    "allocator": ("allocator", ["--steps", "20", "--logistic-rows", "100000", "--lbfgs-iterations", "5"]),
    "scaling": ("scaling", ["--rows", "100000", "1000000", "--repeats", "3"]),
    "model_parallel": ("model-parallel", ["--models", "small", "local", "dense", "--steps", "3"]),
    "partition_memory": ("partition-memory", ["--rows", "1024", "--reference-limit", "2GiB"]),
    "shard_load": ("shard-load", ["--rows", "200000", "--codec-rows", "20000", "--acoustic-rows", "4000",
                                  "--repeats", "2"]),
    "out_of_core": ("out-of-core", ["--rows", "1000000", "--memory-limit", "400MiB", "--maxiter", "3",
                                    "--repeats", "2"]),
    "remote": ("remote", ["--rows", "40000", "--shard-rows", "5000", "--repeats", "2"]),
    "first_run": ("first-run", ["--rows", "200000", "--repeats", "1", "--starts", "2"]),
    "ingest": ("ingest", ["--rows", "200000", "--partition-rows", "50000", "--shard-rows", "50000"]),
    "scoring": ("scoring", ["--rows", "200000", "--shard-rows", "25000", "--auc-rows", "1000000", "--repeats", "1"]),
    "online_start": ("online-start", ["--rows", "50000", "--features", "262144"]),
    "coordinator": ("coordinator", ["--params", "1048576", "--repeats", "3"]),
    "wide_evaluation": ("wide-evaluation", ["--rows", "50000", "--features", "262144", "--repeats", "3"]),
    "newton": ("newton", ["--rows", "100000"]),
    "iteration_costs": ("iteration-costs", ["--repeats", "5"]),
    "path": ("path", ["--rows", "50000", "--features", "20", "--n-alphas", "10", "--sklearn-rows", "10000",
                      "--strong-rows", "10000"]),
}


def run(names: list[str], quick: bool, out: Path) -> dict[str, dict]:
    env = {**os.environ, "DASKLBFGS_BENCH_OUT": str(out)}
    outcome: dict[str, dict] = {}
    for name in names:
        args = SUITE[name][1] if quick else []
        command = [sys.executable, "-m", f"benchmarks.{name}", *args]
        print(f"== {' '.join(['python', *command[1:]])}", flush=True)
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=HERE.parent, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        outcome[name] = {"returncode": proc.returncode, "seconds": seconds,
                         "error": (proc.stderr.strip().splitlines()[-1]
                                   if proc.returncode and proc.stderr.strip() else "")}
        print(f"   {'ok' if proc.returncode == 0 else 'FAILED'} in {seconds:.0f} s "
              f"{outcome[name]['error']}", flush=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / "suite-run.json").write_text(json.dumps(outcome, indent=2) + "\n")
    return outcome


def _committed(path: Path) -> str:
    """The date the result file was last committed (results recorded before they carried one)."""
    proc = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path)], cwd=HERE, capture_output=True,
                          text=True)
    return proc.stdout.strip() or "?"


def report(out: Path, outcome: dict[str, dict] | None, suite: str) -> Path:
    m = machine()
    lines = [
        "# dasklbfgs benchmark results", "",
        f"Regenerated by `python -m benchmarks {'run --suite ' + suite if outcome is not None else 'report'}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Every figure below comes from the command shown "
        "with it, measured in one run on one machine; comparisons are ratios of medians from the same run.", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
        + ", ".join(f"{a} {b}" for a, b in m["versions"].items()), "",
        "| benchmark | command | recorded | this run |", "|---|---|---|---|",
    ]
    sections = []
    for name, (stem, _) in SUITE.items():
        result = out / "results" / f"{name}.json"
        text = out / f"RESULTS-{stem}.md"
        ran = (outcome or {}).get(name)
        status = "" if ran is None else ("ok" if ran["returncode"] == 0 else f"**failed**: {ran['error']}")
        if ran is not None:
            status += f" ({ran['seconds']:.0f} s)"
        if result.exists() and text.exists():
            recorded = json.loads(result.read_text())
            command = recorded.get("command", "?")
            when = recorded.get("recorded") or _committed(result)
            lines.append(f"| [{name}](RESULTS-{stem}.md) | `{command}` | {when} | {status} |")
            body = text.read_text().splitlines()
            sections += ["", *("#" + line if line.startswith("#") else line for line in body)]
        else:
            lines.append(f"| {name} | (no recorded result) | | {status} |")
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines + sections) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="run benchmarks, then regenerate RESULTS.md")
    go.add_argument("--suite", choices=("quick", "full"), default="quick")
    go.add_argument("--only", nargs="+", choices=list(SUITE), help="run only these")
    sub.add_parser("report", help="regenerate RESULTS.md from the recorded results")
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(HERE, None, "full"))
        return 0
    out = HERE / "quick" if args.suite == "quick" else HERE
    outcome = run(args.only or list(SUITE), args.suite == "quick", out)
    print(report(out, outcome, args.suite))
    return 0 if all(o["returncode"] == 0 for o in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
