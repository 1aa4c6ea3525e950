"""How a Sandblaster evaluation scales with rows and workers, and a projection beyond.

    python -m benchmarks.scaling                                  # as recorded in RESULTS-scaling.md
    python -m benchmarks.scaling --rows 100000 1000000            # a quick look

Measured: the median time of one mega-batch evaluation (loss and gradient over every row,
the unit an L-BFGS iteration spends ~1.1 of) for logistic data of 1e5, 1e6 and 1e7 rows on
1 and 2 workers of one thread, shards cached. Fitted to those points by least squares:

    T(N, w) = a + b N / w + c (w - 1)

``a`` the fixed cost of an evaluation (scatter, scheduling, reduction) and ``b`` the time
per row, both from the one-worker points; ``c`` what each extra worker adds (more tasks and
messages), from the two-worker points. On this machine two workers also share one memory
bus, which the model charges to ``c``. The fit then projects the time per evaluation and the
speed-up over one worker to 8-1024 workers
for a fixed dataset (the paper's Fig. 3/5 style). It is a projection from a 2-core machine:
it knows nothing of network bandwidth, stragglers at scale or the scheduler's limits.

Writes ``benchmarks/results/scaling.json`` and ``benchmarks/RESULTS-scaling.md``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np

from benchmarks._common import HERE, OUT, machine, publish, pyplot, read_result, report_header, save_figure
from dasklbfgs import ShardedDataset, connect
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.models import Logistic
from dasklbfgs.sandblaster import MegaBatchEvaluator

PROJECT_TO = (1, 8, 32, 128, 512, 1024)


def dataset(root: Path, rows: int, features: int) -> ShardedDataset:
    path = root / f"logistic-{rows}x{features}-scaling"
    try:
        return ShardedDataset.open(path)
    except Exception:
        problem = SyntheticProblem("logistic", n_features=features, seed=0)
        return ShardedDataset.from_blocks(path, problem.blocks(rows), shard_rows=min(rows, 250_000), overwrite=True)


def evaluation_seconds(client, data, repeats: int) -> float:
    model = Logistic(data.n_features, l2=1e-4)
    evaluator = MegaBatchEvaluator(client, model, data, backup_tasks=False)
    try:
        x = np.full(model.n_params, 0.01)
        evaluator.evaluate(x)  # warm-up
        times = []
        for _ in range(repeats):
            evaluator.stats.eval_seconds.clear()
            evaluator.evaluate(x)
            times.append(evaluator.stats.eval_seconds[-1])
        return statistics.median(times)
    finally:
        evaluator.close()


def fit(points: list[dict]) -> dict:
    """``a`` and ``b`` from the one-worker points, ``c`` from what more workers add on top,
    both by least squares on relative error (the points span two orders of magnitude)."""
    one = [p for p in points if p["workers"] == 1]
    A = np.array([[1.0, p["rows"]] for p in one]) / np.array([[p["seconds"]] for p in one])
    (a, b), *_ = np.linalg.lstsq(A, np.ones(len(one)), rcond=None)
    more = [p for p in points if p["workers"] > 1]
    extra = np.array([p["seconds"] - a - b * p["rows"] / p["workers"] for p in more])
    weights = np.array([(p["workers"] - 1) / p["seconds"] for p in more])
    c = float(weights @ (extra / np.array([p["seconds"] for p in more])) / (weights @ weights)) if more else 0.0
    errors = [abs(a + b * p["rows"] / p["workers"] + c * (p["workers"] - 1) - p["seconds"]) / p["seconds"]
              for p in points]
    return {"a": float(a), "b": float(b), "c": c, "max_relative_error": float(max(errors))}


def project(model: dict, rows: int) -> list[dict]:
    a, b, c = model["a"], model["b"], model["c"]
    one = a + b * rows
    out = []
    for w in PROJECT_TO:
        t = a + b * rows / w + c * (w - 1)
        out.append({"workers": w, "seconds": t, "speedup": one / t})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--project-rows", type=int, nargs="+", default=[10_000_000, 1_000_000_000])
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--from-results", action="store_true",
                        help="only redraw the report and plot from results/scaling.json")
    args = parser.parse_args(argv)
    if args.from_results:
        finish(read_result("scaling"), record=False)
        return
    command = " ".join(["python -m benchmarks.scaling", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine(), "features": args.features, "points": []}
    for rows in args.rows:
        data = dataset(args.data_dir, rows, args.features)
        for workers in args.workers:
            with connect(n_workers=workers, threads_per_worker=1, dashboard_address=None) as client:
                client.wait_for_workers(workers)
                seconds = evaluation_seconds(client, data, args.repeats)
            out["points"].append({"rows": rows, "workers": workers, "seconds": seconds})
            print(f"{rows:>11,} rows, {workers} worker(s): {seconds:.4f} s per evaluation", flush=True)
    out["fit"] = fit(out["points"])
    out["projection"] = {str(rows): project(out["fit"], rows) for rows in args.project_rows}
    finish(out)


def finish(out: dict, record: bool = True) -> None:
    publish("scaling", out, render, plot, OUT / "scaling.png", record)


def plot(out: dict, path: Path) -> None:
    """Left: measured seconds per evaluation and the fitted model; right: the projected
    speed-up (the paper's Fig. 3 style), drawn dashed because it is not a measurement."""
    plt = pyplot()
    f = out["fit"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for w in sorted({p["workers"] for p in out["points"]}):
        pts = sorted((p["rows"], p["seconds"]) for p in out["points"] if p["workers"] == w)
        rows = np.array([r for r, _ in pts], dtype=float)
        left.plot(rows, [t for _, t in pts], "o", color=f"C{w}", label=f"{w} worker(s), measured")
        grid = np.geomspace(rows.min(), rows.max(), 50)
        left.plot(grid, f["a"] + f["b"] * grid / w + f["c"] * (w - 1), "-", color=f"C{w}", alpha=0.6,
                  label=f"{w} worker(s), fit")
    left.set(xscale="log", yscale="log", xlabel="rows", ylabel="seconds per evaluation", title="measured")
    left.legend(fontsize=7)
    for i, (rows, table) in enumerate(out["projection"].items()):
        right.plot([r["workers"] for r in table], [r["speedup"] for r in table], "--o", color=f"C{i + 3}",
                   label=f"{int(rows):,} rows")
    right.set(xscale="log", yscale="log", xlabel="workers", ylabel="speed-up over 1 worker",
              title="projection (not a measurement)")
    right.legend(fontsize=7)
    save_figure(fig, path)


def render(out: dict) -> str:
    f = out["fit"]
    lines = report_header("Scaling of a Sandblaster evaluation with rows and workers", out["command"], out["machine"])
    lines += [
        f"Logistic data, {out['features']} features, float64, shards cached; one thread per worker; median of "
        "the repeats (after a warm-up).", "",
        "| rows | workers | seconds per evaluation | rows/s |", "|---:|---:|---:|---:|",
    ]
    for p in out["points"]:
        lines.append(f"| {p['rows']:,} | {p['workers']} | {p['seconds']:.4f} | {p['rows'] / p['seconds']:,.0f} |")
    lines += [
        "", "Measured speed-up of 2 workers over 1, by rows: " + ", ".join(
            f"{r:,}: {_speedup(out, r):.2f}x" for r in sorted({p['rows'] for p in out['points']})
            if _speedup(out, r) is not None) + ".", "",
        f"Fit `T(N, w) = a + b N / w + c (w - 1)` (a, b from the 1-worker points, c from the 2-worker ones): "
        f"a = {1e3 * f['a']:.2f} ms, b = {1e9 * f['b']:.2f} ns per row, c = {1e3 * f['c']:.2f} ms per extra worker; "
        f"largest relative error on the measured points {f['max_relative_error']:.0%}. Two workers here share "
        "one memory bus and two cores with the scheduler and the coordinator, so c also holds that contention; "
        "on separate machines it would be smaller and the projection below pessimistic.", "",
        "### Projection (not a measurement)", "",
        "Plot: [scaling.png](scaling.png) (measured points and fit; the projected speed-up, dashed).", "",
    ]
    for rows, table in out["projection"].items():
        lines += [f"{int(rows):,} rows:", "", "| workers | seconds per evaluation | speed-up over 1 worker |",
                  "|---:|---:|---:|"]
        for r in table:
            lines.append(f"| {r['workers']} | {r['seconds']:.3f} | {r['speedup']:.1f}x |")
        lines.append("")
    best = {rows: max(table, key=lambda r: r["speedup"]) for rows, table in out["projection"].items()}
    lines += [
        "The per-worker cost c caps the speed-up: past w* = sqrt(b N / c) workers an evaluation gets slower, as "
        "in the paper's Fig. 3 where small models stop gaining from more machines. Best projected: "
        + "; ".join(f"{int(rows):,} rows, {r['workers']} workers ({r['speedup']:.0f}x)" for rows, r in best.items())
        + ". The projection assumes the data split evenly, no network limit and a scheduler that keeps up.", "",
    ]
    return "\n".join(lines)


def _speedup(out: dict, rows: int) -> float | None:
    by = {p["workers"]: p["seconds"] for p in out["points"] if p["rows"] == rows}
    return by[1] / by[2] if 1 in by and 2 in by else None


if __name__ == "__main__":
    main()
