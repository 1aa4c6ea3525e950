"""Sparse portion sums: what a portion task sends and allocates on wide hashed data, dense vs compact.

    python -m benchmarks.sparse_portions                  # as recorded in RESULTS-sparse.md
    python -m benchmarks.sparse_portions --rows 50000     # a quick look

On the ``ctr`` recipe (hashed click-like rows, ``--features`` columns, 2^22 by default) a
logistic model's portion of ``--portion-rows`` rows is evaluated in this process both ways:
the dense gradient sum (``Model.loss_grad_sum``, a vector of every parameter) and the compact
one Sandblaster's portion tasks return (``Model.portion_loss_grad_sum``, a ``SparseSum`` of the
portion's columns). Reported: the pickled bytes of each result and the task's peak traced
allocation (``tracemalloc``, the parameters and the rows excluded: they are the task's inputs),
medians of ``--repeats``. Then Sandblaster trains ``--iterations`` steps on all the rows on an
embedded 2-worker cluster in each state (local, sharded), with compact portion sums and with
dense ones (a model whose portions return ``loss_grad_sum``, as before compact sums): wall
seconds per evaluation and the coordinator's and the workers' peak resident memory (each run
in a fresh process, on a fresh cluster).

Writes ``benchmarks/results/sparse_portions.json`` and ``benchmarks/RESULTS-sparse.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shlex
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from benchmarks._common import HERE, machine, report_header, write_report, write_result


def dataset(args):
    from dasklbfgs import ShardedDataset, make_dataset

    path = args.data_dir / f"ctr-{args.rows}x{args.features}"
    try:
        return ShardedDataset.open(path / "train")
    except Exception:
        return make_dataset("ctr", path, rows=args.rows, features=args.features, shard_rows=args.shard_rows,
                            overwrite=True)["train"]


def portion_costs(args) -> dict:
    """Bytes sent and peak traced allocation of one portion, dense sum vs compact sum."""
    import numpy as np

    from dasklbfgs.models import Logistic

    data = dataset(args)
    model = Logistic(data.n_features, l2=1e-4)
    X, y = data.load_rows(0, args.portion_rows)
    x = np.random.default_rng(0).normal(scale=0.01, size=model.n_params)
    out = {"train_rows": data.n_samples, "n_params": model.n_params, "portion_rows": args.portion_rows,
           "portion_nnz": int(X.nnz), "portion_columns": int(len(np.unique(X.indices)))}
    for kind, call in (("dense", model.loss_grad_sum), ("compact", model.portion_loss_grad_sum)):
        peaks, seconds = [], []
        for _ in range(args.repeats):
            tracemalloc.start()
            started = time.perf_counter()
            _, sums = call(x, X, y)
            seconds.append(time.perf_counter() - started)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        out[kind] = {"result_bytes": len(pickle.dumps(sums, protocol=5)),
                     "peak_traced_mib": statistics.median(peaks) / 2**20,
                     "seconds": statistics.median(seconds)}
    return out


def dense_sum_logistic(n_features: int):
    """A Logistic model whose portions send dense gradient sums (the cost before compact sums)."""
    from dasklbfgs.models import Logistic

    class DenseSumLogistic(Logistic):
        def portion_loss_grad_sum(self, params, X, y, w=None):
            return self.loss_grad_sum(params, X, y) if w is None else self.loss_grad_sum(params, X, y, w)

    return DenseSumLogistic(n_features, l2=1e-4)


def run_state(args, state: str, sums: str) -> dict:
    """In this (fresh) process: ``--iterations`` Sandblaster steps in ``state`` with ``sums`` portion sums."""
    import resource

    from dasklbfgs import connect, sandblaster_lbfgs
    from dasklbfgs.models import Logistic

    data = dataset(args)
    model = Logistic(data.n_features, l2=1e-4) if sums == "compact" else dense_sum_logistic(data.n_features)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        started = time.perf_counter()
        result = sandblaster_lbfgs(model, data, client=client, maxiter=args.iterations, gtol=0.0, ftol=0.0,
                                   state=state, **({"n_param_shards": 2} if state == "sharded" else {}))
        seconds = time.perf_counter() - started
        worker_peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"state": state, "sums": sums, "iterations": result.nit, "evaluations": result.nfev,
            "seconds_per_evaluation": seconds / max(result.nfev, 1),
            "portion_seconds_median": result.stats["eval_seconds_median"],
            "coordinator_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_peak_rss_mib": max(worker_peaks.values())}


def render(out: dict) -> str:
    p = out["portion"]
    d, c = p["dense"], p["compact"]
    lines = report_header("Sparse portion sums", out["command"], out["machine"])
    lines += [
        f"ctr recipe (`--rows {out['rows']}`: {p['train_rows']} training rows) x {p['n_params'] - 1} hashed columns; "
        f"logistic model; one portion of "
        f"{p['portion_rows']} rows ({p['portion_nnz']} non-zeros in {p['portion_columns']} distinct columns).",
        "",
        "| portion result | bytes sent | peak traced allocation (MiB) | seconds |",
        "|---|---|---|---|",
        f"| dense sum (`loss_grad_sum`) | {d['result_bytes']:,} | {d['peak_traced_mib']:.1f} | {d['seconds']:.3f} |",
        f"| compact sum (`portion_loss_grad_sum`) | {c['result_bytes']:,} | {c['peak_traced_mib']:.1f} | "
        f"{c['seconds']:.3f} |",
        "",
        f"Ratio dense / compact: bytes sent {d['result_bytes'] / c['result_bytes']:.1f}x, "
        f"peak allocation {d['peak_traced_mib'] / c['peak_traced_mib']:.1f}x.",
        "",
        f"Sandblaster on all {p['train_rows']} training rows, 2 workers x 1 thread, {out['iterations']} iterations "
        f"(the machine's 5-minute load average at the start: {out['load_average']:.1f} on "
        f"{out['machine']['cores']} cores; on a shared machine the seconds vary from run to run, "
        "the bytes and memory peaks much less):",
        "",
        "| state | portion sums | evaluations | wall seconds per evaluation | portions' median seconds "
        "| coordinator peak RSS (MiB) | largest worker peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in out["runs"]:
        lines.append(f"| {r['state']} | {r['sums']} | {r['evaluations']} | {r['seconds_per_evaluation']:.2f} | "
                     f"{r['portion_seconds_median']:.2f} | {r['coordinator_peak_rss_mib']:.0f} | "
                     f"{r['worker_peak_rss_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=2**22)
    parser.add_argument("--shard-rows", type=int, default=25_000)
    parser.add_argument("--portion-rows", type=int, default=25_000)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--state", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    if args.state:
        print(json.dumps(run_state(args, *args.state)))
        return
    command = " ".join(["python -m benchmarks.sparse_portions", *map(shlex.quote, given)])
    out = {"command": command, "machine": machine(), "load_average": os.getloadavg()[1],
           "rows": args.rows, "iterations": args.iterations,
           "portion": portion_costs(args), "runs": []}
    print(out["portion"], flush=True)
    for state in ("local", "sharded"):
        for sums in ("dense", "compact"):
            proc = subprocess.run([sys.executable, "-m", "benchmarks.sparse_portions", *given, "--state", state, sums],
                                  capture_output=True, text=True, check=True, cwd=HERE.parent)
            out["runs"].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(out["runs"][-1], flush=True)
    write_result("sparse_portions", out)
    report = render(out)
    write_report("sparse", report)
    print(report)


if __name__ == "__main__":
    main()
