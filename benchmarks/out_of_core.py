"""Sandblaster on a dataset several times larger than the workers' memory limits.

    python -m benchmarks.out_of_core                      # as recorded in RESULTS-out-of-core.md
    python -m benchmarks.out_of_core --rows 1000000       # a quick look (it then fits: cached)

Two workers with a small memory limit each; a logistic dataset at least 3x their summed
limit. ``sandblaster_lbfgs(cache="auto")`` sees that the shards do not fit and streams
them from Zarr on every evaluation. Measured in one run on the same cluster: the raw
read + decompress throughput of the store (every shard read by a task, both workers busy)
and the throughput one streamed evaluation achieves (the same bytes, plus the loss and
gradient), as decoded bytes per second and as a ratio.

Writes ``benchmarks/results/out_of_core.json`` and ``benchmarks/RESULTS-out-of-core.md``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

from distributed import wait

from benchmarks._common import HERE, machine, report_header, write_report, write_result
from dasklbfgs import Logistic, ShardedDataset, connect, make_dataset, sandblaster_lbfgs


def _read_shard(data, index: int) -> int:
    X, y = data.load_shard(index)
    return X.nbytes + y.nbytes


def raw_read_seconds(client, data, repeats: int) -> float:
    """Median seconds to read and decode every shard once, one task per shard."""
    times = []
    for r in range(repeats):
        started = time.perf_counter()
        futures = [client.submit(_read_shard, data, i, key=f"raw-read-{r}-{i}", pure=False)
                   for i in range(data.n_shards)]
        wait(futures)
        assert sum(f.result() for f in futures) == data.nbytes_in_memory
        times.append(time.perf_counter() - started)
        client.cancel(futures)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=50_000)
    parser.add_argument("--memory-limit", default="512MiB", help="per worker")
    parser.add_argument("--maxiter", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.out_of_core",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    path = args.data_dir / f"logistic-{args.rows}x{args.features}-ooc"
    try:
        data = ShardedDataset.open(path / "train")
        written = None
    except Exception:
        started = time.perf_counter()
        data = make_dataset("logistic", path, rows=args.rows, features=args.features, shard_rows=args.shard_rows,
                            test_fraction=0.01, overwrite=True)["train"]
        written = time.perf_counter() - started
    out: dict = {"command": command, "machine": machine(), "rows": data.n_samples, "features": data.n_features,
                 "nbytes_in_memory": data.nbytes_in_memory, "nbytes_stored": data.nbytes_stored(),
                 "write_seconds": written}
    with connect(n_workers=2, threads_per_worker=1, memory_limit=args.memory_limit,
                 dashboard_address=None) as client:
        client.wait_for_workers(2)
        limits = [w["memory_limit"] for w in client.scheduler_info(n_workers=-1)["workers"].values()]
        out["memory_limits"] = limits
        out["raw_read_seconds"] = raw_read_seconds(client, data, args.repeats)
        result = sandblaster_lbfgs(Logistic(data.n_features, l2=1e-4), data, client=client, maxiter=args.maxiter,
                                   cache="auto")
        out["cached"] = result.stats["cached"]
        out["evaluations"] = result.nfev
        out["eval_seconds_median"] = result.stats["eval_seconds_median"]
        out["eval_seconds"] = result.stats.get("eval_seconds")
        out["objective"] = result.fun
        out["worker_memory_after"] = max(
            client.run(lambda dask_worker: dask_worker.monitor.get_process_memory()).values())
    write_result("out_of_core", out)
    report = render(out)
    write_report("out-of-core", report)
    print(report)


def render(out) -> str:
    m = out["machine"]
    gib = 1 << 30
    limit = sum(out["memory_limits"])
    raw = out["nbytes_in_memory"] / out["raw_read_seconds"]
    achieved = out["nbytes_in_memory"] / out["eval_seconds_median"]
    lines = [
        *report_header('Out of core: Sandblaster streaming shards from Zarr', out["command"], m),
        f"Logistic data {out['rows']:,} x {out['features']} float64: **{out['nbytes_in_memory'] / gib:.2f} GiB** "
        f"decoded ({out['nbytes_stored'] / gib:.2f} GiB stored), against 2 workers with "
        f"{limit / gib:.2f} GiB of memory limits in all: **{out['nbytes_in_memory'] / limit:.1f}x** the limit. "
        f"`cache=\"auto\"` chose to {'cache' if out['cached'] else 'stream'}.", "",
        "| measurement | seconds (median) | decoded GiB/s |", "|---|---:|---:|",
        f"| read + decompress every shard (tasks, both workers) | {out['raw_read_seconds']:.2f} | {raw / gib:.2f} |",
        f"| one streamed Sandblaster evaluation (read + loss + gradient) | {out['eval_seconds_median']:.2f} | "
        f"{achieved / gib:.2f} |", "",
        f"A streamed evaluation reaches **{achieved / raw:.2f}x** the raw read + decompress throughput of the "
        f"store ({out['evaluations']} evaluations; the larger worker process held "
        f"{out['worker_memory_after'] / (1 << 20):.0f} MiB after the run, under its "
        f"{max(out['memory_limits']) / (1 << 20):.0f} MiB limit).", "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
