"""Ingest by the workers: a Parquet table (numeric and text columns) into a dataset.

    python -m benchmarks.ingest                      # 1,000,000 rows x (20 numeric + 2 text) columns
    python -m benchmarks.ingest --rows 200000        # smaller

Measured, in one run, on LocalClusters of 1 and 2 workers (one thread each), the second
import on each (the first, also recorded, includes the workers' first imports of pandas,
pyarrow and dask.dataframe):
``ShardedDataset.from_dataframe`` over ``dask.dataframe.read_parquet`` (each partition read,
encoded and written by a task) against the single-process way, ``pandas.read_parquet`` in
the client then ``ShardedDataset.create``; rows a second, and the client process's peak
memory above its start while each runs (sampled every 10 ms), the figure that says whether
rows passed through the client.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import HERE, machine, publish, report_header

CITIES = np.array(["oslo", "paris", "rome", "lima", "pune", "kobe", "nice", "bern"])


def write_table(path: Path, rows: int, numeric: int, partition_rows: int) -> None:
    """A Parquet folder of ``rows`` rows: ``numeric`` float columns, a few-level text column
    (one-hot), a many-level one (hashed) and a 0/1 label, one file per partition."""
    import pandas as pd

    path.mkdir(parents=True, exist_ok=True)
    for part, start in enumerate(range(0, rows, partition_rows)):
        n = min(partition_rows, rows - start)
        rng = np.random.default_rng([0, part])
        frame = pd.DataFrame(rng.normal(size=(n, numeric)), columns=[f"x{j}" for j in range(numeric)])
        frame["city"] = CITIES[rng.integers(0, len(CITIES), n)]
        frame["user"] = np.char.add("u", rng.integers(0, 100_000, n).astype(str))
        frame["label"] = (frame["x0"] + rng.normal(size=n) > 0).astype(np.int64)
        frame.to_parquet(path / f"part-{part:04d}.parquet", index=False)


class PeakMemory:
    """The client process's peak resident memory above its start, sampled every 10 ms."""

    def __enter__(self) -> PeakMemory:
        import psutil

        self._process = psutil.Process()
        self.start = self.peak = self._process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()

    @property
    def grown_mb(self) -> float:
        return (self.peak - self.start) / 1e6


def by_workers(table: Path, target: Path, client: Any, shard_rows: int, hash_features: int) -> tuple[float, float]:
    import dask.dataframe as dd

    from dasklbfgs import ShardedDataset

    with PeakMemory() as memory:
        started = time.perf_counter()
        ShardedDataset.from_dataframe(target, dd.read_parquet(table), label="label", shard_rows=shard_rows,
                                      hash_features=hash_features, client=client, overwrite=True)
        seconds = time.perf_counter() - started
    return seconds, memory.grown_mb


def in_the_client(table: Path, target: Path, shard_rows: int, hash_features: int) -> tuple[float, float]:
    """pandas reads the whole table in the client; the recorded features turn it into X, and
    ``create`` writes it from there (the one-process way)."""
    import pandas as pd

    from dasklbfgs import ShardedDataset

    with PeakMemory() as memory:
        started = time.perf_counter()
        frame = pd.read_parquet(table)
        features = ShardedDataset.open(target).frame_features  # the same encoding, decided already
        assert features is not None
        X, y, _ = features.transform(frame)
        ShardedDataset.create(target.with_name(target.name + "-client"), X, y, shard_rows=shard_rows, overwrite=True)
        seconds = time.perf_counter() - started
    return seconds, memory.grown_mb


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--numeric", type=int, default=20)
    parser.add_argument("--partition-rows", type=int, default=100_000)
    parser.add_argument("--shard-rows", type=int, default=100_000)
    parser.add_argument("--hash-features", type=int, default=2**20)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.ingest", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from dasklbfgs import ShardedDataset, connect

    table = args.data_dir / f"ingest-{args.rows}x{args.numeric}.parquet"
    if not table.exists():
        write_table(table, args.rows, args.numeric, args.partition_rows)
    target = args.data_dir / "ingest-dataset"
    out: dict[str, Any] = {"runs": {}}
    for workers in (1, 2):
        with connect(n_workers=workers, threads_per_worker=1, dashboard_address=None) as client:
            client.wait_for_workers(workers)
            cold, _ = by_workers(table, target, client, args.shard_rows, args.hash_features)
            seconds, grown = by_workers(table, target, client, args.shard_rows, args.hash_features)
        out["runs"][f"workers_{workers}"] = {"seconds": seconds, "client_peak_mb": grown, "first_seconds": cold}
    seconds, grown = in_the_client(table, target, args.shard_rows, args.hash_features)
    out["runs"]["client"] = {"seconds": seconds, "client_peak_mb": grown}
    data = ShardedDataset.open(target)
    out.update(command=command, machine=machine(), rows=args.rows, numeric=args.numeric,
               table_mb=sum(f.stat().st_size for f in table.iterdir()) / 1e6, n_features=data.n_features,
               nnz=data.nnz, shards=data.n_shards, partitions=len(list(table.iterdir())))
    shutil.rmtree(target.with_name(target.name + "-client"), ignore_errors=True)
    publish("ingest", out, render)


def render(out: dict[str, Any]) -> str:
    runs = out["runs"]
    names = {"workers_1": "`from_dataframe(read_parquet(...))`, 1 worker",
             "workers_2": "`from_dataframe(read_parquet(...))`, 2 workers",
             "client": "`pandas.read_parquet` + `create` in the client (one process)"}
    lines = report_header("Ingest: a Parquet table into a dataset, by the workers", out["command"], out["machine"])
    lines += [
        f"Data: {out['rows']:,} rows in {out['partitions']} Parquet files ({out['table_mb']:.0f} MB): "
        f"{out['numeric']} float columns, a text column of 8 levels (one-hot), one of ~100,000 levels (hashed "
        f"into 2^{int(np.log2(out['n_features'] - out['numeric'] - 8))} columns) and a 0/1 label; the dataset has "
        f"{out['n_features']:,} columns, {out['nnz']:,} non-zeros, {out['shards']} shards.", "",
        "| writer | seconds | rows/s | client's peak above its start | first import on fresh workers |",
        "|---|---:|---:|---:|---:|",
        *[f"| {names[k]} | {r['seconds']:.1f} | {out['rows'] / r['seconds']:,.0f} | {r['client_peak_mb']:.0f} MB | "
          + (f"{r['first_seconds']:.1f} s |" if "first_seconds" in r else "|") for k, r in runs.items()], "",
        f"Two workers ingest at {runs['workers_1']['seconds'] / runs['workers_2']['seconds']:.2f}x the rate of one, "
        f"and at {runs['client']['seconds'] / runs['workers_2']['seconds']:.2f}x the rate of the one-process way; "
        f"the client's memory grows by {runs['workers_2']['client_peak_mb']:.0f} MB with the workers against "
        f"{runs['client']['client_peak_mb']:.0f} MB when it holds the rows.", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
