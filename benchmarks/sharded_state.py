"""Sharded vs local L-BFGS state: per-iteration time and the coordinator's memory, by model width.

    python -m benchmarks.sharded_state                         # as recorded in RESULTS-sharded-state.md
    python -m benchmarks.sharded_state --widths 1000 100000    # a quick look

For softmax models of d = features x classes parameters (up to 1e6 by default; ``--widths``
takes any list), each mode runs in a fresh coordinator process (a subprocess of this
script) on the same embedded cluster shape, so its peak resident memory (``ru_maxrss``) is
the coordinator's alone. Reported: seconds per iteration, the coordinator's peak RSS, and
the bytes that reached the coordinator per evaluation in sharded mode.

Writes ``benchmarks/results/sharded_state.json`` and ``benchmarks/RESULTS-sharded-state.md``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from benchmarks._common import HERE, machine, report_header, write_report, write_result

ROWS = 2000


def run_one(width: int, mode: str, iterations: int, data_dir: Path, address: str | None = None,
            limit: int | None = None) -> dict:
    """In this (fresh) process: train ``iterations`` L-BFGS steps; report time and peak RSS.

    With ``address``, on that cluster; with ``limit``, this process (not the workers) may
    allocate at most ``limit`` bytes of data (``RLIMIT_DATA``) and running out is reported.
    """
    import resource
    import time

    if limit is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    from dasklbfgs import ShardedDataset, connect
    from dasklbfgs.data.synthetic import SyntheticProblem
    from dasklbfgs.models import Softmax
    from dasklbfgs.sandblaster import sandblaster_lbfgs

    features = min(width // 10, 1000) or 1
    classes = max(width // features, 2)
    path = data_dir / f"softmax-{ROWS}x{features}x{classes}"
    try:
        data = ShardedDataset.open(path)
    except Exception:
        problem = SyntheticProblem("multinomial", n_features=features, n_classes=classes, seed=0)
        data = ShardedDataset.from_blocks(path, problem.blocks(ROWS), shard_rows=ROWS // 4, overwrite=True)
    model = Softmax(features, classes, l2=1e-3, fit_intercept=False)
    with connect(address, n_workers=None if address else 2, threads_per_worker=1, dashboard_address=None) as client:
        started = time.perf_counter()
        try:
            result = sandblaster_lbfgs(model, data, client=client, maxiter=iterations, gtol=0.0, ftol=0.0,
                                       state=mode, **({"n_param_shards": 2} if mode == "sharded" else {}))
        except MemoryError as exc:
            return {"width": model.n_params, "mode": mode, "failed": f"MemoryError: {exc}",
                    "seconds": time.perf_counter() - started,
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        seconds = time.perf_counter() - started
    out = {"width": model.n_params, "mode": mode, "iterations": result.nit, "evaluations": result.nfev,
           "seconds_per_iteration": seconds / max(result.nit, 1),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if mode == "sharded":
        out["bytes_per_evaluation"] = result.stats["coordinator_bytes_received"] / result.nfev
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000, 10_000_000])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--limited-width", type=int, default=10_000_000,
                        help="d of the run with a memory-limited coordinator (0: skip it)")
    parser.add_argument("--coordinator-limit-gib", type=float, default=1.5)
    parser.add_argument("--one", nargs=2, metavar=("WIDTH", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(int(args.one[0]), args.one[1], args.iterations, args.data_dir, args.address,
                                 args.limit)))
        return
    command = " ".join(["python -m benchmarks.sharded_state",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    rows = []
    for width in args.widths:
        for mode in ("local", "sharded"):
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.sharded_state", "--one", str(width), mode,
                 "--iterations", str(args.iterations), "--data-dir", str(args.data_dir)],
                capture_output=True, text=True, check=True, cwd=HERE.parent,
            )
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    out = {"command": command, "machine": machine(), "rows": rows}
    if args.limited_width:
        out["limited"] = limited_coordinator(args)
    write_result("sharded_state", out)
    report = render(out, args)
    write_report("sharded-state", report)
    print(report)


def limited_coordinator(args) -> dict:
    """Both modes at ``--limited-width`` with the coordinator process limited to
    ``--coordinator-limit-gib`` of data, on a cluster started here (so the workers, which
    hold the sharded state, are not limited)."""
    from distributed import LocalCluster

    limit = int(args.coordinator_limit_gib * 2**30)
    runs = []
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster:
        for mode in ("local", "sharded"):
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.sharded_state", "--one", str(args.limited_width), mode,
                 "--iterations", str(args.iterations), "--data-dir", str(args.data_dir),
                 "--address", cluster.scheduler_address, "--limit", str(limit)],
                capture_output=True, text=True, cwd=HERE.parent, timeout=1800,
            )
            lines = proc.stdout.strip().splitlines()
            if proc.returncode == 0 and lines:
                runs.append(json.loads(lines[-1]))
            else:  # died outside Python's reach (e.g. the allocator aborted): say how
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                runs.append({"width": args.limited_width, "mode": mode,
                             "failed": f"exit code {proc.returncode}: {tail}"})
            print(runs[-1], flush=True)
    return {"limit_bytes": limit, "runs": runs}


def render(out, args) -> str:
    m = out["machine"]
    by = {(r["width"], r["mode"]): r for r in out["rows"]}
    lines = [
        *report_header('Sharded vs local L-BFGS state', out["command"], m),
        f"Softmax models on {ROWS:,} rows (features x classes = d), {args.iterations} L-BFGS iterations, "
        "history 10, 2 workers x 1 thread, 2 parameter shards. Each run is a fresh coordinator process: "
        "its peak RSS is the coordinator's alone (the baseline of a Python process with dask, numpy and "
        "scipy loaded is included).", "",
        "| d | local s/iteration | sharded s/iteration | sharded / local | local coordinator peak RSS (MiB) "
        "| sharded coordinator peak RSS (MiB) | bytes to the coordinator per evaluation (sharded) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for width in sorted({r["width"] for r in out["rows"]}):
        local, sharded = by[(width, "local")], by[(width, "sharded")]
        lines.append(
            f"| {width:,} | {local['seconds_per_iteration']:.3f} | {sharded['seconds_per_iteration']:.3f} | "
            f"{sharded['seconds_per_iteration'] / local['seconds_per_iteration']:.2f} | "
            f"{local['peak_rss_mib']:.0f} | {sharded['peak_rss_mib']:.0f} | {sharded['bytes_per_evaluation']:,.0f} |")
    lines += ["", "In sharded mode the parameters and gradients go from the shards to the workers and back; "
              "the coordinator gets f, g.p and partial dot products, so its memory and traffic stay flat as "
              "d grows, while the local mode holds x, g, the direction and 2 x 10 history vectors.", ""]
    if "limited" in out:
        lim = out["limited"]
        lines += [f"## A coordinator limited to {lim['limit_bytes'] / 2**30:.1f} GiB", "",
                  "The coordinator runs in its own process with `RLIMIT_DATA` set to the limit, on a cluster "
                  "started separately (2 workers x 1 thread, not limited), so only the coordinator's memory is "
                  "capped.", "",
                  "| d | mode | outcome | s/iteration | coordinator peak RSS (MiB) |", "|---:|---|---|---:|---:|"]
        for r in lim["runs"]:
            outcome = f"failed ({r['failed'][:120]})" if "failed" in r else f"trained {r['iterations']} iterations"
            per = "" if "failed" in r else f"{r['seconds_per_iteration']:.2f}"
            rss = f"{r['peak_rss_mib']:.0f}" if "peak_rss_mib" in r else ""
            lines.append(f"| {r['width']:,} | {r['mode']} | {outcome} | {per} | {rss} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
