"""A user's first run, and the command's start-up, before and after.

    python -m benchmarks.first_run --before /work/main      # as recorded
    python -m benchmarks.first_run --rows 200000 --repeats 2

Each dasklbfgs tree measured (``--before``, a checkout of an earlier dasklbfgs, and this
one) is imported from ``PYTHONPATH`` in fresh interpreters, the two trees interleaved
round by round so that they share the machine's noise:

1. Start-up, best of ``--starts``: ``python -c pass`` (the interpreter's floor), ``python -c
   "import dasklbfgs"``, ``python -m dasklbfgs.cli --help``, and, in an interpreter that
   has imported distributed as a worker has, the seconds to import what a worker needs to
   run a portion (:data:`WORKER_MODULES`).
2. The first run (``benchmarks/_first_run_child.py``, a user's script): import dasklbfgs, start
   an embedded cluster of 2 workers (which import the script's imports as they spawn),
   Sandblaster on logistic ``rows x features`` float64, and the same call again. Each run's
   portion-service start, shard load and evaluations are timed; the rest of the run is the
   coordinator's overhead. New workers of another cluster fill as much new memory as the
   shards take in the same interpreter (before or after, alternating): the load's rate is
   judged against that. Medians over ``--repeats``.

Writes ``results/first_run.json`` and ``RESULTS-first-run.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import HERE, machine, publish, report_header
from benchmarks.sandblaster import dataset

AFTER = HERE.parent
CHILD = HERE / "_first_run_child.py"
#: What a worker imports to run a portion: the package, the portion service, the tasks
#: (shard load, portion sums), the model's module and the dataset's.
WORKER_MODULES = ("dasklbfgs", "dasklbfgs.solvers.sandblaster.portion_service", "dasklbfgs.solvers.sandblaster.tasks",
                  "dasklbfgs.models.linear", "dasklbfgs.data.sharded")
WORKER_IMPORT = ("import time, distributed, distributed.worker\n"  # what a worker process has loaded
                 "started = time.perf_counter()\n"
                 f"import {', '.join(WORKER_MODULES)}\n"
                 "print(time.perf_counter() - started)")
STARTS = {"python_s": ["-c", "pass"], "numpy_s": ["-c", "import numpy"], "import_s": ["-c", "import dasklbfgs"],
          "help_s": ["-m", "dasklbfgs.cli", "--help"], "worker_import_s": ["-c", WORKER_IMPORT]}
TARGETS = {"help_s": 0.3, "worker_import_s": 0.5}  # seconds (issue #36)


def env_for(tree: Path) -> dict[str, str]:
    """The environment whose ``import dasklbfgs`` finds ``tree`` (the workers inherit it)."""
    return {**os.environ, "PYTHONPATH": str(tree)}


def start_seconds(tree: Path, args: list[str]) -> float:
    """Wall seconds of one fresh interpreter (the worker import: the seconds it printed)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=env_for(tree), cwd=tree, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"python {' '.join(args)} failed with {tree}:\n{done.stderr[-3000:]}")
    return float(done.stdout) if args[-1] == WORKER_IMPORT else seconds


def first_run(tree: Path, data: Path, order: str, maxiter: int) -> dict:
    done = subprocess.run([sys.executable, str(CHILD), str(data), order, str(maxiter)], env=env_for(tree), cwd=tree,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the first run with {tree} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["dasklbfgs"].startswith(str(tree)):
        raise RuntimeError(f"the run imported {out['dasklbfgs']}, not the tree {tree}")
    return out


def median_of(runs: list[dict], *path: str) -> float:
    values = []
    for run in runs:
        for key in path:
            run = run[key]
        values.append(run)
    return float(statistics.median(values))


def summary(starts: dict[str, list[float]], runs: list[dict]) -> dict:
    """Best start-up times; medians of the runs' parts; the load against new memory."""
    out: dict = {key: min(v) for key, v in starts.items()}
    out["cluster_s"] = median_of(runs, "cluster_s")
    out["script_import_s"] = median_of(runs, "import_s")
    for run in ("first", "again"):
        out[run] = {part: median_of(runs, run, part)
                    for part in ("seconds", "service_s", "load_s", "evaluations_s", "rest_s", "evaluations")}
    out["fill_s"] = median_of(runs, "fill_s")
    # per round, as measured side by side in one interpreter, then the median
    out["fill_over_load"] = float(statistics.median(r["fill_s"] / r["first"]["load_s"] for r in runs))
    for run in ("first", "again"):
        out[run]["beyond_s"] = float(statistics.median(
            r[run]["seconds"] - r[run]["load_s"] - r[run]["evaluations_s"] for r in runs))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="an earlier dasklbfgs checkout to measure beside this one")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=125_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--starts", type=int, default=5, help="fresh interpreters per start-up time (best of)")
    parser.add_argument("--maxiter", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m benchmarks.first_run", *map(shlex.quote, given)])
    data = dataset(args.data_dir / f"logistic-{args.rows}x{args.features}", args.rows, args.features, args.shard_rows)
    trees = {"before": args.before.resolve()} if args.before else {}
    trees["after"] = AFTER
    out: dict = {"command": command, "machine": machine(), "rows": args.rows, "features": args.features,
                 "nbytes": data.nbytes_in_memory, "shards": data.n_shards, "maxiter": args.maxiter,
                 "trees": {name: str(tree) for name, tree in trees.items()}}
    starts: dict[str, dict[str, list[float]]] = {name: {key: [] for key in STARTS} for name in trees}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.starts):
        for name, tree in trees.items():
            for key, start in STARTS.items():
                starts[name][key].append(start_seconds(tree, start))
    for r in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(first_run(tree, data.path, "fill-first" if r % 2 else "run-first", args.maxiter))
            print(f"{name} round {r}: first run {runs[name][-1]['first']['seconds']:.2f} s", flush=True)
    out["raw"] = {name: {"starts": starts[name], "runs": runs[name]} for name in trees}
    out["summary"] = {name: summary(starts[name], runs[name]) for name in trees}
    publish("first_run", out, render)


PARTS = {"service_s": "portion service start", "load_s": "shard load", "evaluations_s": "evaluations",
         "rest_s": "the rest (coordinator, client-side imports, events)", "seconds": "**the run**"}
# Each part is the median of its own over the rounds: the parts of a column need not add up.


def render(out: dict) -> str:
    s = out["summary"]
    names = list(s)
    gb = out["nbytes"] / 1e9
    lines = report_header("A first run in new workers, and the command's start-up", out["command"], out["machine"])
    lines += [f"Data: logistic {out['rows']:,} x {out['features']} float64, {out['shards']} shards, {gb:.2f} GB in "
              f"memory; Sandblaster with `maxiter={out['maxiter']}`; an embedded cluster of 2 workers x 1 thread, "
              "new for every measurement. Trees: " + ", ".join(f"{n} `{t}`" for n, t in out["trees"].items()) + ".",
              "", "**Start-up** (fresh interpreters, best of several; seconds):", "",
              "| | " + " | ".join(names) + " | target |", "|---|" + "---:|" * (len(names) + 1)]
    start_rows = {"python_s": "`python -c pass` (the interpreter alone)",
                  "numpy_s": "`python -c \"import numpy\"` (the options are typed with numpy)",
                  "import_s": "`python -c \"import dasklbfgs\"`",
                  "help_s": "`python -m dasklbfgs.cli --help`",
                  "worker_import_s": "a worker importing what a portion needs (in-process, after distributed)"}
    for key, label in start_rows.items():
        target = f"< {TARGETS[key]}" if key in TARGETS else ""
        lines.append(f"| {label} | " + " | ".join(f"{s[n][key]:.3f}" for n in names) + f" | {target} |")
    lines += ["", "**The first run** (a user's script; each part the median of its own over the rounds, so a "
              "column need not add up; seconds):", "",
              "| | " + " | ".join(f"{n}: first | {n}: again" for n in names) + " |",
              "|---|" + "---:|" * (2 * len(names)),
              "| script's `import dasklbfgs` | "
              + " | ".join(f"{s[n]['script_import_s']:.3f} | " for n in names) + " |",
              "| embedded cluster start (workers import the script's imports) | "
              + " | ".join(f"{s[n]['cluster_s']:.3f} | " for n in names) + " |"]
    for key, label in PARTS.items():
        lines.append(f"| {label} | " + " | ".join(f"{s[n]['first'][key]:.3f} | {s[n]['again'][key]:.3f}"
                                                 for n in names) + " |")
    lines += ["| beyond the load and the evaluations (median of the rounds') | "
              + " | ".join(f"{s[n]['first']['beyond_s']:.3f} | {s[n]['again']['beyond_s']:.3f}" for n in names) + " |"]
    lines += ["| evaluations (count) | " + " | ".join(f"{s[n]['first']['evaluations']:.0f} | "
                                                     f"{s[n]['again']['evaluations']:.0f}" for n in names) + " |", ""]
    lines += ["**The load against new memory** (each round, in one interpreter: the first run's shard load, and new "
              "workers of another cluster filling as much new memory, `np.ones` held, in parallel; medians):", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names),
              "| first run's shard load, s | " + " | ".join(f"{s[n]['first']['load_s']:.3f}" for n in names) + " |",
              "| new workers filling as much new memory, s | " + " | ".join(f"{s[n]['fill_s']:.3f}" for n in names)
              + " |",
              "| fill time / load time (target >= 0.8) | " + " | ".join(f"{s[n]['fill_over_load']:.2f}" for n in names)
              + " |", ""]
    after = s["after"]
    lines += [f"After: `dasklbfgs --help` {after['help_s']:.3f} s (target < 0.3), a worker's imports "
              f"{after['worker_import_s']:.3f} s (target < 0.5), the first run's cost beyond its load and evaluations "
              f"{after['first']['beyond_s']:.3f} s (target < 0.2; the same call again: "
              f"{after['again']['beyond_s']:.3f} s), "
              f"the load at {after['fill_over_load']:.2f}x new memory's fill (target >= 0.8)."]
    if "before" in s:
        before = s["before"]
        lines += ["", f"Before → after: `import dasklbfgs` {before['import_s']:.2f} → {after['import_s']:.2f} s, "
                  f"`--help` {before['help_s']:.2f} → {after['help_s']:.2f} s, a worker's imports "
                  f"{before['worker_import_s']:.2f} → {after['worker_import_s']:.2f} s, the first run "
                  f"{before['first']['seconds']:.2f} → {after['first']['seconds']:.2f} s, script start to the end of "
                  f"the first run {before['script_import_s'] + before['cluster_s'] + before['first']['seconds']:.2f} → "
                  f"{after['script_import_s'] + after['cluster_s'] + after['first']['seconds']:.2f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
