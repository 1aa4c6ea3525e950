"""Helpers shared by the benchmarks: timing, machine description, result files."""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
#: Where reports, plots and results go: ``benchmarks/`` itself, or the folder the suite
#: runner names in $DASKLBFGS_BENCH_OUT (the quick suite's, so that quick numbers never
#: overwrite the recorded ones).
OUT = Path(os.environ.get("DASKLBFGS_BENCH_OUT", HERE))
RESULTS = OUT / "results"


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1,
                   before: Callable[[], Any] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeats`` calls, after ``warmup`` calls; ``before`` is
    called, untimed, before each timed call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed_quietly(fit: Callable[[], Any]) -> tuple[float, Any]:
    """``fit()``'s seconds and result, its warnings silenced (a peer library's convergence notes)."""
    import warnings

    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fit()
    return time.perf_counter() - started, out


def machine() -> dict[str, Any]:
    versions = {}
    for dist in ("dasklbfgs", "numpy", "scipy", "dask", "distributed", "zarr", "dask-glm"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "versions": versions,
    }


def codec_name(codec: Any) -> str:
    """A Zarr compressor as ``blosc-<cname>-<clevel>``, ``<name>-<level>`` or ``none``."""
    if codec is None:
        return "none"
    described = codec.to_dict()
    config = described.get("configuration", {})
    if described["name"] == "blosc":
        return f"blosc-{config['cname']}-{config['clevel']}"
    return f"{described['name']}-{config.get('level', '')}"


def stored_codec(data: Any) -> str:
    """:func:`codec_name` of the compressor a dense dataset's ``X`` is stored with."""
    import zarr

    compressors = zarr.open_group(str(data.path), mode="r")["X"].compressors
    return codec_name(compressors[0] if compressors else None)


def write_report(name: str, text: str) -> Path:
    """``RESULTS-<name>.md`` in :data:`OUT`."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"RESULTS-{name}.md"
    path.write_text(text)
    return path


def report_header(title: str, command: str, machine_info: dict[str, Any]) -> list[str]:
    """The first lines of every report: title, the exact command, the machine and versions."""
    m = machine_info
    return [f"# {title}", "", f"Command: `{command}`", "",
            f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
            + ", ".join(f"{a} {b}" for a, b in m["versions"].items()), ""]


def write_result(name: str, payload: dict[str, Any]) -> Path:
    payload = {**payload, "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    return path


def publish(name: str, out: dict[str, Any], render: Callable[[dict[str, Any]], str],
            plot: Callable[[dict[str, Any], Path], None] | None = None, png: Path | None = None,
            record: bool = True) -> None:
    """Record the results as ``results/<name>.json`` (unless redrawing recorded ones), draw the
    plot (if there is one), write ``RESULTS-<name with dashes>.md`` and print it."""
    if record:
        write_result(name, out)
    if plot is not None and png is not None:
        plot(out, png)
    report = render(out)
    write_report(name.replace("_", "-"), report)
    print(report)


def cache_shards(client, data, workers: list[str]) -> None:
    """Sandblaster's shard caching once (ShardCache, what the evaluator's load_seconds times), then drop it."""
    from dasklbfgs.solvers.sandblaster.shard_cache import ShardCache

    ShardCache(client, data, uuid.uuid4().hex[:8], workers).close()


def read_result(name: str) -> dict[str, Any]:
    """The recorded ``results/<name>.json`` (to re-render a report without measuring again)."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, write as PNG at the reports' resolution, and free the figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def accuracy_curve(history: list[dict[str, Any]], key: str = "eval_accuracy") -> list[tuple[float, float]]:
    """(wall time, held-out metric) pairs from a solver's history."""
    return [(h["time"], h[key]) for h in history if key in h]


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """First time the curve reaches ``target`` (None: never)."""
    return next((t for t, a in curve if a >= target), None)


def acoustic_splits(root: Path, rows: int, classes: int) -> dict[str, Any]:
    """The acoustic-like task's train/test datasets, written once under ``root`` and reused."""
    from dasklbfgs import ShardedDataset, make_dataset

    path = root / f"acoustic-{rows}x{classes}"
    try:
        return {s: ShardedDataset.open(path / s) for s in ("train", "test")}
    except Exception:
        return make_dataset("acoustic", path, rows=rows, n_classes=classes, shard_rows=rows // 4, overwrite=True)


# -- one method in a fresh process (its peak memory its own) ----------------------------------

def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent that forked it); this process by default."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_peaks(client) -> dict:
    """The largest peak resident memory of the cluster's worker processes, in MiB."""
    return {"other_peak_rss_mib": max(client.run(peak_rss_mib).values()), "other_processes": "largest worker"}


class Skipped(Exception):
    """A peer that is not installed or has no such method: reported as skipped."""


def run_fresh(target: Callable[..., dict], args: tuple, timeout: float) -> dict:
    """``target(*args)`` in a fresh (spawned) process: the dict it returns, ``{"skipped": why}``
    when it raises :class:`Skipped`, ``{"failed": ..., "traceback": ...}`` when it raises
    anything else (a peer's failure is reported, not hidden), or a failure after ``timeout``
    seconds."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_report, args=(target, args, queue))
    proc.start()
    try:
        return queue.get(timeout=timeout)
    except Exception:
        return {"failed": f"no result within {timeout:.0f} s"}
    finally:
        proc.join(30)
        if proc.is_alive():  # with what it started (Spark's JVM outlives a killed driver)
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()


def _report(target: Callable[..., dict], args: tuple, queue: Any) -> None:
    """In the fresh process: put ``target(*args)``'s outcome on ``queue`` (see :func:`run_fresh`)."""
    try:
        queue.put(target(*args))
    except Skipped as skipped:
        queue.put({"skipped": str(skipped)})
    except Exception as exc:
        queue.put({"failed": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                   "traceback": traceback.format_exc()[-2000:]})


def add_comparison_arguments(parser: Any, methods: tuple[str, ...], *, timeout: float, repeats: int,
                             repeat_below: float) -> None:
    """The options of a comparison run through :func:`interleaved_runs` and :func:`run_fresh`."""
    parser.add_argument("--methods", nargs="+", choices=methods, default=list(methods))
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per method run")
    parser.add_argument("--repeats", type=int, default=repeats, help="runs per method, interleaved")
    parser.add_argument("--repeat-below", type=float, default=repeat_below,
                        help="repeat a method only while its runs take less than this many seconds")
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")


def interleaved_runs(methods: list[str], repeats: int, repeat_below: float, run: Callable[[str], dict],
                     label: str = "") -> dict[str, dict]:
    """``run(method)`` for every method, ``repeats`` rounds interleaved (drift in the machine's
    load falls on all methods alike); a method is repeated only while its runs finish in less
    than ``repeat_below`` seconds. Returns each method's runs summarized (:func:`summarize`)."""
    runs: dict[str, list[dict]] = {method: [] for method in methods}
    for repeat in range(repeats):
        for method, done in runs.items():
            if done and ("seconds" not in done[-1] or done[-1]["seconds"] >= repeat_below):
                continue
            print(f"{label}{method} (run {repeat + 1}) ...", flush=True)
            done.append(run(method))
            print(f"   {done[-1]}", flush=True)
    return {method: summarize(done) for method, done in runs.items()}


def summarize(runs: list[dict]) -> dict:
    """The median run's facts (the faster of the middle two when even; its own seconds as
    ``run_seconds``), with seconds replaced by the median over the runs that finished (and their
    min, max and count); runs that failed are counted, not dropped."""
    timed = [r for r in runs if "seconds" in r]
    if not timed:
        return runs[0]
    seconds = [r["seconds"] for r in timed]
    failed = [r.get("failed", r.get("skipped")) for r in runs if "seconds" not in r]
    median_run = sorted(timed, key=lambda r: r["seconds"])[(len(timed) - 1) // 2]
    return {**median_run, "run_seconds": median_run["seconds"],  # the facts' own run
            "seconds": float(statistics.median(seconds)), "seconds_min": min(seconds),
            "seconds_max": max(seconds), "runs": len(seconds), "all_seconds": seconds,
            **({"failed_runs": failed} if failed else {})}
