"""Caching shards from an object store: Sandblaster's shard load on a dataset in an
S3-compatible bucket (a moto server on loopback, started here) against fetching the same
objects with s3fs alone from the same workers (``fs.cat`` of all of a worker's keys at once:
what the store and the network give), zarr's own read of the same shards, and the same
caching from a local copy.

    python -m benchmarks.remote                 # 150,000 x 100 float64 (120 MB), 8 shards, 2 workers
    python -m benchmarks.remote --rows 60000    # smaller

The ratio that matters is the s3fs fetch's time over the caching's (target >= 0.8x: the
caching, which also decodes and checks the write, takes at most 1.25x the bare fetch).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import HERE, cache_shards, machine, publish, report_header

BUCKET = "dasklbfgs-bench"


def start_server() -> tuple[Any, dict[str, Any]]:
    """A moto S3 server on 127.0.0.1 (a free port) with the benchmark's bucket, and the
    storage_options that reach it."""
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k",
                 aws_secret_access_key="s").create_bucket(Bucket=BUCKET)
    return server, {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


def datasets(args, options: dict[str, Any]) -> tuple[Any, Any]:
    """The same rows written locally (under --data-dir, reused) and into the bucket."""
    from dasklbfgs import ShardedDataset

    local_path = args.data_dir / f"remote-{args.rows}x{args.features}-{args.shard_rows}"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, args.features))
    y = (X @ rng.normal(size=args.features) > 0).astype(np.float64)
    try:
        local = ShardedDataset.open(local_path)
    except Exception:
        local = ShardedDataset.create(local_path, X, y, shard_rows=args.shard_rows, overwrite=True)
    started = time.perf_counter()
    remote = ShardedDataset.create(f"s3://{BUCKET}/train.zarr", X, y, shard_rows=args.shard_rows,
                                   storage_options=options)
    print(f"wrote {remote.nbytes_stored() / 1e6:.0f} MB to the bucket in {time.perf_counter() - started:.1f} s",
          flush=True)
    return local, remote


def shard_keys(data: Any) -> list[list[str]]:
    """Per shard, the bucket paths of its chunk objects (X and y), as the dataset names them."""
    import zarr

    from dasklbfgs.data._chunks import chunk_keys

    group = zarr.open_group(data.location.zarr_store(read_only=True), mode="r", zarr_format=3)
    root = data.url.split("://", 1)[1]
    out = []
    for i, (_, stop) in enumerate(data.shard_bounds):
        out.append([f"{root}/{name}/{key}" for name in ("X", "y")
                    for key in chunk_keys(group[name].metadata, i, stop)])
    return out


def cat_keys(keys: list[str], options: dict[str, Any]) -> int:
    """On a worker: every key fetched with s3fs's ``cat`` at once; the bytes received."""
    import s3fs

    return sum(len(v) for v in s3fs.S3FileSystem(**options).cat(keys).values())


def zarr_reads(data: Any, shards: list[int]) -> int:
    """On a worker: the shards read through zarr's own fetch, one after the other."""
    import zarr

    group = zarr.open_group(data.location.zarr_store(read_only=True), mode="r", zarr_format=3)
    total = 0
    for i in shards:
        start, stop = data.shard_bounds[i]
        total += np.asarray(group["X"][start:stop]).nbytes + np.asarray(group["y"][start:stop]).nbytes
    return total


def per_worker(n_shards: int, workers: list[str]) -> dict[str, list[int]]:
    """The shards each worker caches (ShardCache's placement: runs of sequential shards)."""
    out: dict[str, list[int]] = {w: [] for w in workers}
    for i in range(n_shards):
        out[workers[i * len(workers) // n_shards]].append(i)
    return out


def measure(client, local, remote, options: dict[str, Any], repeats: int) -> dict[str, Any]:
    from distributed import wait

    workers = sorted(client.scheduler_info()["workers"])
    placement = per_worker(remote.n_shards, workers)
    keys = shard_keys(remote)

    def s3fs_cat() -> None:
        futures = [client.submit(cat_keys, [k for i in shards for k in keys[i]], options, workers=[w],
                                 pure=False) for w, shards in placement.items()]
        wait(futures)
        assert sum(f.result() for f in futures) > 0

    def through_zarr() -> None:
        futures = [client.submit(zarr_reads, remote, shards, workers=[w], pure=False)
                   for w, shards in placement.items()]
        wait(futures)
        for f in futures:
            f.result()

    cases = {"caching_remote": lambda: cache_shards(client, remote, workers), "s3fs_cat": s3fs_cat,
             "zarr_reads": through_zarr, "caching_local": lambda: cache_shards(client, local, workers)}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for case in cases.values():  # warm up: imports, connections, the page cache of the local copy
        case()
    for _ in range(repeats):  # interleaved: the machine's load falls on every case alike
        for name, case in cases.items():
            started = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - started)
    out: dict[str, Any] = {f"{name}_s": float(np.median(t)) for name, t in times.items()}
    out["all_s"] = times
    out["s3fs_over_caching"] = out["s3fs_cat_s"] / out["caching_remote_s"]
    out["zarr_over_caching"] = out["zarr_reads_s"] / out["caching_remote_s"]
    out["local_over_remote"] = out["caching_local_s"] / out["caching_remote_s"]
    out["objects"] = sum(len(k) for k in keys)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=150_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=18_750)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.remote", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from dasklbfgs import connect

    server, options = start_server()
    try:
        local, remote = datasets(args, options)
        with connect(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as client:
            client.wait_for_workers(args.workers)
            out = measure(client, local, remote, options, args.repeats)
        out.update(command=command, machine=machine(), rows=args.rows, features=args.features,
                   shards=remote.n_shards, workers=args.workers, repeats=args.repeats,
                   nbytes_in_memory=remote.nbytes_in_memory, nbytes_stored=remote.nbytes_stored())
    finally:
        server.stop()
    publish("remote", out, render)


def render(out: dict[str, Any]) -> str:
    mb = 1e6
    nbytes = out["nbytes_in_memory"]
    rows = [("**Sandblaster shard caching from the bucket**", out["caching_remote_s"]),
            ("s3fs alone: `cat` of each worker's chunk objects at once", out["s3fs_cat_s"]),
            ("zarr's own read of the same shards, shard by shard", out["zarr_reads_s"]),
            ("Sandblaster shard caching from a local copy", out["caching_local_s"])]
    lines = report_header("Caching shards from an object store", out["command"], out["machine"]) + [
        f"Data: {out['rows']:,} x {out['features']} float64 and y, {out['shards']} shards "
        f"({out['objects']} chunk objects), {nbytes / mb:.0f} MB in memory, {out['nbytes_stored'] / mb:.0f} MB "
        f"stored (Blosc lz4, the writer's default), in a bucket of a moto S3 server on loopback in the benchmark's "
        f"process; {out['workers']} workers x 1 thread, each loading its own shards. Medians of {out['repeats']} "
        "interleaved repeats.", "",
        "| load every shard on the workers | seconds | MB/s (in memory) |", "|---|---:|---:|",
        *[f"| {name} | {s:.3f} | {nbytes / s / mb:.0f} |" for name, s in rows], "",
        f"The caching runs at **{out['s3fs_over_caching']:.2f}x** the rate of s3fs fetching the same objects "
        f"(target >= 0.8x), **{out['zarr_over_caching']:.1f}x** zarr's own read, and takes "
        f"{1 / out['local_over_remote']:.1f}x the time of the same caching from local disk "
        "(the loopback server, a Python process sharing the machine's two cores, is what bounds the remote rate).",
        ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
