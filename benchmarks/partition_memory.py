"""A model too big for one worker trains on two: Downpour with ``model_partitions`` (model parallelism).

    python -m benchmarks.partition_memory                    # as recorded in RESULTS-partition-memory.md
    python -m benchmarks.partition_memory --memory-limit 1GiB --rows 4096

On a 2-worker embedded cluster with a memory limit per worker (one thread each), a
speech-like MLP (440 inputs, three wide sigmoid layers, a large softmax) whose Downpour run
holds more than one worker may use: the parameter shards' values and Adagrad state, and the
replica's parameters, accrued gradient and the gradient's arithmetic. With K = 1 the run is
refused before it starts (``InsufficientMemoryError``, its message recorded); with K = 2
each worker holds one partition and that partition's shards, and the run trains. For
reference, K = 1 also runs on workers with a larger limit (``--reference-limit``), to
measure what it takes. Recorded per run: what Downpour planned for each worker and each
worker's measured peak resident memory (VmHWM, fresh workers), the training loss of the first
and last polls.

Writes ``benchmarks/results/partition_memory.json`` and ``benchmarks/RESULTS-partition-memory.md``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import machine, peak_rss_mib, publish, read_result, report_header

HIDDEN, CLASSES, FEATURES = (2560, 2560, 2560), 2000, 440


def build() -> Any:
    from dasklbfgs.models import MLP

    return MLP(FEATURES, HIDDEN, CLASSES)


def dataset(root: Path, rows: int) -> Any:
    """Rows whose label depends on the features (so that the loss can fall), float32."""
    from dasklbfgs import ShardedDataset

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    y = (np.abs(X[:, :11]).argmax(axis=1) * (CLASSES // 11)).astype(np.int64)
    return ShardedDataset.create(root / "data", X, y, shard_rows=rows // 4)


def attempt(k: int, data: Any, memory_limit: str, epochs: int, batch_size: int) -> dict[str, Any]:
    """One run on fresh workers with ``model_partitions=k``: refused or trained, with the
    workers' memory."""
    from dasklbfgs import connect, downpour_sgd
    from dasklbfgs.errors import InsufficientMemoryError

    model = build()
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None, memory_limit=memory_limit) as client:
        client.wait_for_workers(2)
        before = client.run(peak_rss_mib)
        started = time.perf_counter()
        try:
            result = downpour_sgd(model, data, client=client, n_replicas=1, model_partitions=k, epochs=epochs,
                                  batch_size=batch_size, learning_rate=0.002, n_param_shards=2)
        except InsufficientMemoryError as exc:
            return {"refused": str(exc), "seconds": time.perf_counter() - started}
        seconds = time.perf_counter() - started
        peaks = client.run(peak_rss_mib)
        losses = [h["loss"] for h in result.history if "loss" in h]
        planned = result.stats["planned_memory_bytes"]
        return {"seconds": seconds, "steps": int(result.nit), "message": result.message,
                "first_loss": losses[0], "last_loss": losses[-1],
                "workers": [{"planned_mib": planned.get(w, 0) / 2**20, "rss_before_mib": before[w],
                             "peak_rss_mib": peaks[w]} for w in sorted(peaks)],
                "examples_per_second": result.stats["examples_per_second"]}


def render(out: dict) -> str:
    lines = report_header("A model too big for one worker, trained on two (Downpour, model_partitions)",
                          out["command"], out["machine"])
    n, limit = out["n_params"], out["memory_limit_mib"]
    lines += [f"{out['model']}: {n:,} parameters, {8 * n / 2**20:.0f} MiB of float64 values and as much again of "
              f"Adagrad state on the parameter shards; a replica holds its parameters, accrued gradient and the "
              f"gradient's arithmetic besides. Two workers of {limit:.0f} MiB each, one replica, "
              f"{out['rows']} rows, batch {out['batch_size']}.", ""]
    one = out["k"]["1"]
    lines += ["K = 1: " + (f"refused before starting, in {one['seconds']:.1f} s: `{one['refused']}`"
                           if "refused" in one else f"ran ({one.get('message')})"), ""]
    runs = [(f"K = 2, workers of {limit:.0f} MiB", out["k"]["2"]),
            (f"K = 1, workers of {out['reference_limit_mib']:.0f} MiB (reference)", out["reference"])]
    for title, run in runs:
        if "workers" not in run:
            lines += [f"{title}: {run}", ""]
            continue
        lines += [f"{title}: trained {run['steps']} steps in {run['seconds']:.1f} s, "
                  f"{run['examples_per_second']:.0f} examples/s end to end ({run['message']}); mini-batch "
                  f"loss {run['first_loss']:.3f} at the first poll, {run['last_loss']:.3f} at the last.", ""]
    lines += ["| run | worker | planned by Downpour MiB | resident before MiB | peak resident MiB | limit MiB |",
              "|---|---|---|---|---|---|"]
    for (title, run), run_limit in zip(runs, (limit, out["reference_limit_mib"])):
        lines += [f"| {title.split(',')[0]} | {i} | {w['planned_mib']:.0f} | {w['rss_before_mib']:.0f} | "
                  f"{w['peak_rss_mib']:.0f} | {run_limit:.0f} |" for i, w in enumerate(run.get("workers", []))]
    return "\n".join(lines + [""])


def _limit_mib(text: str) -> float:
    from dask.utils import parse_bytes

    return parse_bytes(text) / 2**20


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-limit", default="1GiB", help="each worker's memory limit")
    parser.add_argument("--reference-limit", default="3GiB", help="the workers' limit of the K = 1 reference run")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--from-results", action="store_true", help="only re-render results/partition_memory.json")
    args = parser.parse_args(argv)
    if args.from_results:
        publish("partition_memory", read_result("partition_memory"), render, record=False)
        return
    command = " ".join(["python -m benchmarks.partition_memory", *map(shlex.quote, argv if argv is not None else
                                                                     sys.argv[1:])])
    model = build()
    out: dict[str, Any] = {"command": command, "machine": machine(), "model": repr(model), "n_params": model.n_params,
                           "memory_limit_mib": _limit_mib(args.memory_limit), "rows": args.rows,
                           "batch_size": args.batch_size, "reference_limit_mib": _limit_mib(args.reference_limit),
                           "k": {}}
    with tempfile.TemporaryDirectory() as root:
        data = dataset(Path(root), args.rows)
        for k in (1, 2):
            print(f"K = {k} ...", flush=True)
            out["k"][str(k)] = attempt(k, data, args.memory_limit, args.epochs, args.batch_size)
            print(f"   {out['k'][str(k)]}", flush=True)
        print("K = 1 on larger workers ...", flush=True)
        out["reference"] = attempt(1, data, args.reference_limit, args.epochs, args.batch_size)
    publish("partition_memory", out, render)


if __name__ == "__main__":
    main()
