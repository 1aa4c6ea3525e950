"""Shard loading against the store's raw read + decode rate, and the dataset codecs.

    python -m benchmarks.shard_load                        # as recorded
    python -m benchmarks.shard_load --rows 200000 --codec-rows 50000 --acoustic-rows 8000

1. Logistic ``rows x features`` float64 with the writer's default codec: the raw rate of
   the store measured in this process (zarr reading every chunk, on one thread and on as
   many threads as cores; the direct chunk decode of ShardedDataset, the same two ways),
   and Sandblaster's shard caching (``ShardCache``, what ``load_seconds`` times) on a
   ``workers`` x 1-thread cluster in the same run; next to it, the same tasks reading
   through zarr's pipeline (the loading before the direct decode). A profile of the
   caching tasks on each worker says where the time goes. Then the same caching in workers
   started for it (a user's first run), beside such workers filling their share of new memory.
2. Codecs on the recipes' data (logistic and least squares float64 and float32, acoustic
   frames float32): bytes stored, write time, decode rate (one thread, shard by shard, as a
   worker loads) and Sandblaster's time to the optimum including the shard load.

Ratios are measured in one run; the machine's read-pass rate (``X @ v``) is beside them.
Writes ``results/shard_load.json`` and ``RESULTS-shard-load.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr
from threadpoolctl import threadpool_limits

from benchmarks._common import HERE, cache_shards, codec_name, machine, median_seconds, publish
from benchmarks.sandblaster import dataset
from dasklbfgs import ShardedDataset, connect
from dasklbfgs.data._shard_format import DEFAULT_CODEC
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.data.workloads import AcousticFrames
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.sandblaster import sandblaster_lbfgs
from dasklbfgs.solvers.sandblaster.tasks import load_cached_shard

CODECS = {
    "blosc-zstd-1": lambda: zarr.codecs.BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),
    "blosc-zstd-3": lambda: zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
    "blosc-zstd-5": lambda: zarr.codecs.BloscCodec(cname="zstd", clevel=5, shuffle="shuffle"),
    "blosc-lz4-1": lambda: zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"),
    "blosc-lz4-5": lambda: zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    "blosc-lz4-9": lambda: zarr.codecs.BloscCodec(cname="lz4", clevel=9, shuffle="shuffle"),
    "zstd-1": lambda: zarr.codecs.ZstdCodec(level=1),
    "zstd-3": lambda: zarr.codecs.ZstdCodec(level=3),
    "none": lambda: None,
}
DECODE_REPEATS = 7  # a decode pass is short: more repeats for a steadier median
PROFILED = {"_read_file": "read the chunk file", "decompress": "decode (Blosc)", "open_group": "open the Zarr group",
            "_open_group": "open the dataset (schema)", "encode_chunk_key": "chunk keys"}


# -- 1. the store's raw rate and the caching ------------------------------------------------

def zarr_chunk(path: str, name: str, start: int, stop: int) -> np.ndarray:
    """Rows of one array through zarr's own pipeline."""
    return np.asarray(zarr.open_group(path, mode="r")[name][start:stop])


def zarr_shard(data: ShardedDataset, index: int) -> tuple:
    """A shard read as it was before the direct decode: zarr for X, y (and w)."""
    start, stop = data.shard_bounds[index]
    path = str(data.path)
    return (zarr_chunk(path, "X", start, stop), zarr_chunk(path, "y", start, stop),
            zarr_chunk(path, "w", start, stop) if data.is_weighted else None)


def in_process_rates(data: ShardedDataset, repeats: int, threads: int) -> dict:
    """Seconds to read every shard in this process: zarr and the direct decode, on one thread
    and on ``threads`` threads (never the main thread, where Blosc would use threads of its own)."""
    shards = range(data.n_shards)
    out = {}
    for n in (1, threads):
        with ThreadPoolExecutor(n) as pool:
            out[f"zarr_{n}_threads_s"] = median_seconds(lambda: list(pool.map(lambda i: zarr_shard(data, i), shards)),
                                                        repeats)
            out[f"direct_{n}_threads_s"] = median_seconds(lambda: list(pool.map(data.load_shard, shards)), repeats)
    return out


def caching_seconds(client, data: ShardedDataset, workers: list[str], repeats: int) -> float:
    """Median seconds of Sandblaster's shard caching."""
    return median_seconds(lambda: cache_shards(client, data, workers), repeats)


def zarr_tasks_seconds(client, data: ShardedDataset, workers: list[str], repeats: int) -> float:
    """The same placement of one task per shard, reading through zarr's pipeline."""
    from distributed import wait

    def load() -> None:
        n = data.n_shards
        futures = [client.submit(zarr_shard, data, i, workers=[workers[i * len(workers) // n]], pure=False)
                   for i in range(n)]
        wait(futures)
        client.cancel(futures)
    return median_seconds(load, repeats)


def profiled_loads(data: ShardedDataset, indices: list[int]) -> dict:
    """On a worker: load its shards as the cache does, under cProfile; the seconds of the
    functions in :data:`PROFILED` and of the whole."""
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    for i in indices:
        load_cached_shard(data, i)
    profile.disable()
    total = time.perf_counter() - started
    spent = dict.fromkeys(PROFILED, 0.0)
    for (_file, _line, function), (_cc, _nc, own, cumulative, _callers) in pstats.Stats(profile).stats.items():
        for name in spent:  # C functions show as "<built-in method numcodecs.blosc.decompress>"
            if function == name or function.endswith(f".{name}>"):
                spent[name] += own if name == "decompress" else cumulative
    return {"total_s": total, **{f"{k}_s": v for k, v in spent.items()}}


def new_memory_fill_seconds(nbytes: int, pieces: int) -> float:
    """Seconds to fill ``nbytes`` of new memory held in ``pieces`` arrays, as cached shards are:
    the kernel's rate of handing a process memory it has not had before."""
    held = []
    started = time.perf_counter()
    for _ in range(pieces):
        held.append(np.ones(nbytes // pieces // 8))
    return time.perf_counter() - started


FRESH = {"caching_s": "Sandblaster shard caching",
         "fill_s": "first use of new memory: each worker fills its share (np.ones, held), in parallel"}


def fresh_workers_section(data: ShardedDataset, args) -> dict:
    """Each measurement in workers started for it (a new cluster, as a user's first run
    has), the order alternating every round (a cluster may find memory its predecessor just
    freed): the shard caching, and the workers filling their share of new memory. Medians."""
    nbytes, pieces = data.nbytes_in_memory // args.workers, -(-data.n_shards // args.workers)
    runs: dict[str, list[float]] = {key: [] for key in FRESH}
    for r in range(args.repeats):
        for key in list(FRESH)[::1 if r % 2 == 0 else -1]:
            with connect(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as client:
                client.wait_for_workers(args.workers)
                workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
                if key == "caching_s":
                    started = time.perf_counter()
                    cache_shards(client, data, workers)
                    runs[key].append(time.perf_counter() - started)
                else:
                    runs[key].append(max(client.gather([client.submit(new_memory_fill_seconds, nbytes, pieces,
                                                                      workers=[w], pure=False) for w in workers])))
    return {key: float(np.median(v)) for key, v in runs.items()} | {"runs": runs}


def worker_profiles(client, data: ShardedDataset, workers: list[str]) -> dict:
    n = data.n_shards
    share = {w: [i for i in range(n) if workers[i * len(workers) // n] == w] for w in workers}
    futures = {w: client.submit(profiled_loads, data, share[w], workers=[w], pure=False) for w in workers}
    return {w: f.result() for w, f in futures.items()}


def load_section(client, data: ShardedDataset, args) -> dict:
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    nbytes = data.nbytes_in_memory
    rates = in_process_rates(data, args.repeats, args.threads)
    caching = caching_seconds(client, data, workers, args.repeats)
    through_zarr = zarr_tasks_seconds(client, data, workers, args.repeats)
    raw_best = min(rates.values())
    return {
        "nbytes_in_memory": nbytes, "nbytes_stored": data.nbytes_stored(), "shards": data.n_shards,
        "codec": codec_name(DEFAULT_CODEC), "in_process": rates, "caching_s": caching,
        "zarr_tasks_s": through_zarr, "raw_best_s": raw_best,
        "raw_zarr_best_s": min(v for k, v in rates.items() if k.startswith("zarr")),
        "caching_over_raw": raw_best / caching,
        "caching_over_raw_zarr": min(v for k, v in rates.items() if k.startswith("zarr")) / caching,
        "caching_speedup_over_zarr_tasks": through_zarr / caching,
        "profile": worker_profiles(client, data, workers),
    }


# -- 2. codecs on the recipes' data --------------------------------------------------------

def recipe_data(rows: int, features: int, acoustic_rows: int, acoustic_classes: int) -> dict:
    """name -> (row blocks in memory, stored dtype, model, maxiter, rows per shard)."""
    logistic = list(SyntheticProblem("logistic", n_features=features, seed=0).blocks(rows))
    regression = list(SyntheticProblem("regression", n_features=features, seed=0).blocks(rows))
    acoustic = list(AcousticFrames(n_classes=acoustic_classes, seed=0).blocks(acoustic_rows))
    d = acoustic[0][0].shape[1]
    return {
        "logistic float64": (logistic, None, Logistic(features, l2=1e-4), 1000, rows // 8),
        "logistic float32": (logistic, np.float32, Logistic(features, l2=1e-4), 1000, rows // 8),
        "least squares float64": (regression, None, LeastSquares(features, l2=1e-4), 1000, rows // 8),
        "least squares float32": (regression, np.float32, LeastSquares(features, l2=1e-4), 1000, rows // 8),
        "acoustic float32 (softmax)": (acoustic, None, Softmax(d, acoustic_classes, l2=1e-4), 20, acoustic_rows // 8),
    }


def one_codec(client, path: Path, name: str, spec: tuple, repeats: int) -> dict:
    blocks, dtype, model, maxiter, shard_rows = spec
    t0 = time.perf_counter()
    data = ShardedDataset.from_blocks(path, iter(blocks), shard_rows=shard_rows, compressor=CODECS[name](),
                                      dtype=dtype, overwrite=True)
    write_s = time.perf_counter() - t0
    with ThreadPoolExecutor(1) as worker_like:  # one thread that is not the main one, as in a worker
        decode_s = median_seconds(lambda: list(worker_like.map(data.load_shard, range(data.n_shards))),
                                  max(repeats, DECODE_REPEATS))
    t0 = time.perf_counter()
    result = sandblaster_lbfgs(model, data, client=client, maxiter=maxiter)
    total_s = time.perf_counter() - t0
    return {"stored_bytes": data.nbytes_stored(), "in_memory_bytes": data.nbytes_in_memory, "write_s": write_s,
            "decode_s": decode_s, "decode_gb_s": data.nbytes_in_memory / decode_s / 1e9,
            "to_optimum_s": total_s, "load_s": result.stats["load_seconds"], "nit": result.nit, "fun": result.fun}


def codec_section(client, args) -> dict:
    out = {}
    for kind, spec in recipe_data(args.codec_rows, args.features, args.acoustic_rows, args.acoustic_classes).items():
        out[kind] = {}
        for name in CODECS:
            path = args.data_dir / f"codec-{kind.split()[0]}-{name}"
            out[kind][name] = one_codec(client, path, name, spec, args.repeats)
            print(f"{kind:28s} {name:14s} {out[kind][name]['stored_bytes'] / out[kind][name]['in_memory_bytes']:.3f} "
                  f"{out[kind][name]['decode_gb_s']:.2f} GB/s {out[kind][name]['to_optimum_s']:.2f} s", flush=True)
    return out


# -- the run ------------------------------------------------------------------------------

def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=125_000)
    parser.add_argument("--codec-rows", type=int, default=100_000)
    parser.add_argument("--acoustic-rows", type=int, default=20_000)
    parser.add_argument("--acoustic-classes", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="threads of the in-process parallel reads")
    parser.add_argument("--skip-codecs", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.shard_load",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine(), "rows": args.rows, "features": args.features,
                 "workers": args.workers, "repeats": args.repeats, "threads": args.threads}

    data = dataset(args.data_dir / f"logistic-{args.rows}x{args.features}", args.rows, args.features, args.shard_rows)
    X, _ = data.load_rows(0, data.n_samples)
    with threadpool_limits(1):
        out["read_pass_s"] = median_seconds(lambda X=X: X @ np.ones(X.shape[1]), args.repeats)
    del X
    out["fresh_workers"] = fresh_workers_section(data, args)
    with connect(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(args.workers)
        out["load"] = load_section(client, data, args)
        if not args.skip_codecs:
            out["codecs"] = codec_section(client, args)
    publish("shard_load", out, render)


def render(out: dict) -> str:
    from benchmarks._common import report_header

    load, gb = out["load"], 1e9
    nbytes = load["nbytes_in_memory"]
    rate = lambda s: f"{nbytes / s / gb:.2f}"  # noqa: E731
    rows = [("zarr, 1 thread, shard by shard", load["in_process"]["zarr_1_threads_s"]),
            (f"zarr, {out['threads']} threads", load["in_process"][f"zarr_{out['threads']}_threads_s"]),
            ("direct chunk decode, 1 thread", load["in_process"]["direct_1_threads_s"]),
            (f"direct chunk decode, {out['threads']} threads",
             load["in_process"][f"direct_{out['threads']}_threads_s"]),
            (f"**Sandblaster shard caching** ({out['workers']} workers x 1 thread)", load["caching_s"]),
            ("the same tasks reading through zarr (the loading before)", load["zarr_tasks_s"])]
    lines = report_header("Shard loading and dataset codecs", out["command"], out["machine"]) + [
        f"Data: logistic {out['rows']:,} x {out['features']} float64, {load['shards']} shards, codec "
        f"`{load['codec']}` (the writer's default): {nbytes / gb:.2f} GB in memory, "
        f"{load['nbytes_stored'] / gb:.2f} GB "
        f"stored. One read pass `X @ v` (1 thread) over X: {out['read_pass_s']:.4f} s "
        f"({out['rows'] * out['features'] * 8 / out['read_pass_s'] / gb:.1f} GB/s). "
        f"Medians of {out['repeats']} repeats.",
        "", "| read every shard | seconds | GB/s |", "|---|---:|---:|",
        *[f"| {name} | {s:.3f} | {rate(s)} |" for name, s in rows], "",
        f"Caching runs at **{load['caching_over_raw']:.2f}x** the best raw read + decode rate measured in this "
        f"process (target 0.7x), **{load['caching_over_raw_zarr']:.2f}x** zarr's own best, and "
        f"**{load['caching_speedup_over_zarr_tasks']:.1f}x** faster than the same tasks reading through zarr.", "",
        "Where a worker's caching time goes (cProfile of the load tasks, its share of the shards, seconds):", "",
        "| worker | total | " + " | ".join(PROFILED.values()) + " |", "|---|---:|" + "---:|" * len(PROFILED),
    ]
    for worker, p in sorted(load["profile"].items()):
        lines.append(f"| {worker} | {p['total_s']:.3f} | " + " | ".join(f"{p[k + '_s']:.3f}" for k in PROFILED) + " |")
    lines += ["", *limit_lines(out), ""]
    if "fresh_workers" in out:
        lines += fresh_lines(out["fresh_workers"], nbytes, out["workers"])
    if "codecs" in out:
        lines += codec_table(out["codecs"])
    return "\n".join(lines) + "\n"


def fresh_lines(fresh: dict, nbytes: int, workers: int) -> list[str]:
    """The first load in new workers, beside their first use of as much new memory."""
    rate = lambda s: f"{nbytes / s / 1e9:.2f}"  # noqa: E731
    return [f"**In new workers** (a cluster started for each measurement, as for a user's first run; "
            f"{workers} workers; the order alternating every round, medians):", "",
            "| new workers | seconds | GB/s |", "|---|---:|---:|",
            *[f"| {name} | {fresh[key]:.3f} | {rate(fresh[key])} |" for key, name in FRESH.items()], "",
            f"New workers take **{fresh['fill_s'] / fresh['caching_s']:.0%}** of their first load's time to fill as "
            "much new memory as the shards take (the first use of new memory, whose rate depends on the machine: "
            "a virtual machine that hands free memory back to its host backs it again on first touch).", ""]


def limit_lines(out: dict) -> list[str]:
    """What bounds the caching rate: the cores actually free (the in-process parallel speedup)
    and what the load tasks spend their time on (the profile, run once more after the timing)."""
    load, threads = out["load"], out["threads"]
    rates = load["in_process"]
    slowest = max(p["total_s"] for p in load["profile"].values())
    reading = sum(p["_read_file_s"] + p["decompress_s"] for p in load["profile"].values())
    own = sum(p["total_s"] for p in load["profile"].values())
    lines = [f"In this process {threads} threads decoded at "
             f"{rates['direct_1_threads_s'] / rates[f'direct_{threads}_threads_s']:.2f}x "
             f"the rate of one (what the machine's other work left of its cores). Reading the chunk files and decoding "
             f"them are {reading / own:.0%} of the profiled load tasks' time; opening the Zarr group, reading y and "
             "allocating are the rest."]
    if load["caching_over_raw"] < 0.7:
        lines.append(f"The caching's limit in this run is the cores it got: on free cores its wall time would "
                     f"approach the slower worker's profiled {slowest:.3f} s "
                     f"({load['raw_best_s'] / slowest:.2f}x the best raw rate).")
    return lines


def codec_table(codecs: dict) -> list[str]:
    lines = ["Codecs on the recipes' data (stored / in-memory bytes; decode rate on one thread, shard by shard, as a "
             "worker loads; Sandblaster to the optimum on the same cluster, including the shard load; the acoustic "
             "softmax stops at 20 iterations):", ""]
    for kind, by_codec in codecs.items():
        first = next(iter(by_codec.values()))
        lines += [f"**{kind}** ({first['in_memory_bytes'] / 1e6:.0f} MB in memory)", "",
                  "| codec | stored | write s | decode GB/s | load s | to optimum s | iterations |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, r in by_codec.items():
            lines.append(f"| {name} | {r['stored_bytes'] / r['in_memory_bytes']:.3f} | {r['write_s']:.2f} | "
                         f"{r['decode_gb_s']:.2f} | {r['load_s']:.3f} | {r['to_optimum_s']:.2f} | {r['nit']} |")
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
