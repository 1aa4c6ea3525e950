"""What Dask's default allocator setting costs a training step on a worker, and what
:class:`dasklbfgs.allocator.AllocatorTuning` gives back.

    python -m benchmarks.allocator          # as recorded in RESULTS-allocator.md

Three measurements, each on fresh 2-worker embedded clusters with and without the
tuning, in one run: (1) the pieces of one mini-batch step of the acoustic MLP, timed
inside a worker (loss and gradient, mean and penalty, an SGD update, a copy of the
parameters); (2) one Sandblaster evaluation (loss and gradient over all rows) of a
logistic model; (3) a whole synchronous-SGD epoch's time per replica step.

Writes ``benchmarks/results/allocator.json`` and ``benchmarks/RESULTS-allocator.md``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._common import HERE, acoustic_splits, machine, report_header, write_report, write_result
from dasklbfgs import Logistic, connect, make_dataset, sandblaster_lbfgs, sync_sgd
from dasklbfgs.models import MLP
from dasklbfgs.optim.updates import make_rule

PIECES = ("loss and gradient", "mean and penalty", "SGD update", "copy of the parameters")


def step_pieces(model, X, y, batch_size: int, steps: int) -> dict[str, float]:
    """Median milliseconds of each piece of a mini-batch step, in this process."""
    params = model.init_params(0)
    rule = make_rule("sgd", learning_rate=0.01)
    times: dict[str, list[float]] = {k: [] for k in PIECES}
    for k in range(steps):
        rows = slice((k * batch_size) % (X.shape[0] - batch_size), None)
        Xb, yb = X[rows][:batch_size], y[rows][:batch_size]
        t0 = time.perf_counter()
        loss, sums = model.loss_grad_sum(params, Xb, yb)
        t1 = time.perf_counter()
        _, gradient = model.objective_from_sums(params, loss, sums, batch_size)
        t2 = time.perf_counter()
        params += rule.update(gradient, {})[0]
        t3 = time.perf_counter()
        params.copy()
        t4 = time.perf_counter()
        for key, seconds in zip(PIECES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[key].append(1e3 * seconds)
    return {k: statistics.median(v[5:]) for k, v in times.items()}


def measure(tuned: bool, args, acoustic, logistic) -> dict:
    model = MLP(440, (256,), 64, activation="relu", l2=1e-6)
    X, y = acoustic["train"].load_rows(0, 20 * args.batch_size + args.batch_size)
    out: dict = {}
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None, tune_allocator=tuned) as client:
        client.wait_for_workers(2)
        out["pieces_ms"] = client.submit(step_pieces, model, X, y, args.batch_size, args.steps, pure=False).result()
        lr = Logistic(logistic.n_features, l2=1e-4)
        result = sandblaster_lbfgs(lr, logistic, client=client, maxiter=args.lbfgs_iterations)
        out["evaluation_ms"] = 1e3 * result.stats["eval_seconds_median"]
        run = sync_sgd(model, acoustic["train"], client=client, n_replicas=1, batch_size=args.batch_size,
                       learning_rate=0.05, epochs=1)
        out["sync_step_ms"] = 1e3 * run.stats["seconds_per_step"]
        out["sync_compute_ms"] = 1e3 * run.stats["seconds_computing_per_step"]
    return out


def render(out, args) -> str:
    m, off, on = out["machine"], out["default"], out["tuned"]
    lines = [
        *report_header("Dask's worker allocator setting and the tuning that undoes its cost", out["command"], m),
        "Dask's nanny starts workers with `MALLOC_TRIM_THRESHOLD_=65536`, which also switches off glibc's "
        "dynamic mmap threshold: every array above 128 KiB is a fresh mmap whose pages fault in on first touch. "
        "`connect()` registers `AllocatorTuning` (mmap threshold 32 MiB, trim threshold 128 MiB via `mallopt`); "
        "`tune_allocator=False` leaves Dask's default. Both columns are 2-worker embedded clusters in the same run.",
        "",
        f"## One mini-batch step of the acoustic MLP inside a worker (batch {args.batch_size}, median ms)", "",
        "| piece | Dask default | tuned | default / tuned |", "|---|---:|---:|---:|",
    ]
    for k in PIECES:
        a, b = off["pieces_ms"][k], on["pieces_ms"][k]
        lines.append(f"| {k} | {a:.3f} | {b:.3f} | {a / b:.1f}x |")
    lines += [
        "", "## Whole runs", "",
        "| measurement | Dask default | tuned | default / tuned |", "|---|---:|---:|---:|",
        f"| Sandblaster evaluation, logistic {out['logistic_shape']} (median ms) | {off['evaluation_ms']:.1f} | "
        f"{on['evaluation_ms']:.1f} | {off['evaluation_ms'] / on['evaluation_ms']:.2f}x |",
        f"| sync SGD, 1 replica, ms per step (of which computing) | {off['sync_step_ms']:.2f} "
        f"({off['sync_compute_ms']:.2f}) | {on['sync_step_ms']:.2f} ({on['sync_compute_ms']:.2f}) | "
        f"{off['sync_step_ms'] / on['sync_step_ms']:.2f}x |", "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--logistic-rows", type=int, default=400_000)
    parser.add_argument("--lbfgs-iterations", type=int, default=10)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.allocator",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    acoustic = acoustic_splits(args.data_dir, 60_000, 64)
    path = args.data_dir / f"logistic-{args.logistic_rows}x100-allocator"
    try:
        from dasklbfgs import ShardedDataset

        logistic = ShardedDataset.open(path / "train")
    except Exception:
        logistic = make_dataset("logistic", path, rows=args.logistic_rows, features=100,
                                shard_rows=args.logistic_rows // 8, overwrite=True)["train"]
    out: dict = {"command": command, "machine": machine(),
                 "logistic_shape": f"{logistic.n_samples:,} x {logistic.n_features}"}
    out["default"] = measure(False, args, acoustic, logistic)
    out["tuned"] = measure(True, args, acoustic, logistic)
    write_result("allocator", out)
    report = render(out, args)
    write_report("allocator", report)
    print(report)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
