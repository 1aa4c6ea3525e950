"""Sandblaster L-BFGS side by side with its peers, to the same optimum on the same data.

    python -m benchmarks.versus                                   # as recorded in RESULTS-versus.md
    python -m benchmarks.versus --rows 100000 --softmax-rows 20000 --softmax-classes 20   # a quick look

Workloads (float64, l2-penalised, no intercept): logistic 1e6 x 100 well- and
ill-conditioned, softmax 2e5 x 440 with 100 classes, least squares 1e6 x 100. Methods:

- Sandblaster L-BFGS on a 2-worker embedded cluster (time includes loading the shards);
- ``scipy.optimize.minimize(method="L-BFGS-B")`` in this process, data in RAM (it sets f*);
- scikit-learn: ``LogisticRegression(solver="lbfgs")`` with ``C = 1 / (l2 n)``, ``Ridge``
  with ``alpha = l2 n`` for least squares;
- dask-glm ``lbfgs`` on the same cluster (logistic and least squares; it has no softmax);
- Spark MLlib ``LogisticRegression`` / ``LinearRegression`` (l-bfgs) in ``local[2]``, with
  ``regParam = l2``, ``standardization=False`` (time excludes building the DataFrame);
- the hardware limit: one read pass ``X @ v`` over X in memory (1 thread).

Each method runs to its own tight tolerance; every solution is scored with the same
objective in numpy, and a run counts as reaching the optimum when its objective is within
1e-6 (relative) of f*, scipy's optimum or the best objective any method found when that is
lower. Each (workload, method) runs in a fresh process, so its peak memory (VmHWM of
that process: the driver, not Dask's workers or Spark's JVM) is its own.
A peer that is missing or fails is reported as such.

Repeats are interleaved (every method once, then every method again), so drift in the
machine's load falls on all methods alike; a method is repeated while its runs take less
than ``--repeat-below`` seconds (a 2-minute run that never reaches the optimum gains
nothing from a second try). Seconds are medians, shown with the min-max of the runs.

Writes ``benchmarks/results/versus.json``, ``benchmarks/RESULTS-versus.md`` and
``benchmarks/versus-seconds.png``; ``--from-results`` redraws the report and the plot from
the recorded JSON without measuring.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import (
    OUT,
    Skipped,
    add_comparison_arguments,
    cache_shards,
    interleaved_runs,
    machine,
    peak_rss_mib,
    publish,
    pyplot,
    read_result,
    report_header,
    run_fresh,
    save_figure,
    worker_peaks,
)

METHODS = ("scipy L-BFGS-B", "Sandblaster L-BFGS", "scikit-learn", "dask-glm lbfgs", "Spark MLlib")
L2 = 1e-4
MAXITER = 1000  # per method; the ill-conditioned workload shows who needs more


def workloads(args) -> dict[str, dict[str, Any]]:
    return {
        "logistic": dict(kind="logistic", rows=args.rows, features=100, classes=2, ill=False),
        "logistic, ill-conditioned": dict(kind="logistic", rows=args.rows, features=100, classes=2, ill=True),
        "softmax": dict(kind="multinomial", rows=args.softmax_rows, features=440, classes=args.softmax_classes,
                        ill=False),
        "least squares": dict(kind="regression", rows=args.rows, features=100, classes=None, ill=False),
    }


def open_data(spec: dict[str, Any], root: Path):
    from dasklbfgs import ShardedDataset
    from dasklbfgs.data.synthetic import SyntheticProblem

    name = f"{spec['kind']}-{spec['rows']}x{spec['features']}x{spec['classes']}{'-ill' if spec['ill'] else ''}-versus"
    path = root / name
    try:
        return ShardedDataset.open(path)
    except Exception:
        problem = SyntheticProblem(spec["kind"], n_features=spec["features"], n_classes=spec["classes"] or 2,
                                   seed=0, ill_conditioned=spec["ill"])
        return ShardedDataset.from_blocks(path, problem.blocks(spec["rows"]), shard_rows=max(spec["rows"] // 8, 1),
                                          overwrite=True)


def make_model(spec: dict[str, Any]):
    from dasklbfgs.models import LeastSquares, Logistic, Softmax

    d = spec["features"]
    if spec["kind"] == "logistic":
        return Logistic(d, l2=L2, fit_intercept=False)
    if spec["kind"] == "multinomial":
        return Softmax(d, spec["classes"], l2=L2, fit_intercept=False)
    return LeastSquares(d, l2=L2, fit_intercept=False)


# -- one method, in its own process ---------------------------------------------------------

def _scipy(model, data, spec, load):
    from scipy.optimize import minimize

    X, y = load()
    started = time.perf_counter()
    res = minimize(lambda w: model.objective(w, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                   options={"maxiter": MAXITER, "gtol": 1e-9, "ftol": 1e-15})
    return time.perf_counter() - started, res.x, {"iterations": int(res.nit), "evaluations": int(res.nfev)}


def _sandblaster(model, data, spec, load):
    from dasklbfgs import connect, sandblaster_lbfgs

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        # ill-conditioned features: optimise in standardised coordinates (same objective and optimum)
        res = sandblaster_lbfgs(model, data, client=client, maxiter=MAXITER, gtol=1e-9, ftol=1e-15, cache=True,
                                standardize=spec["ill"])
        seconds = time.perf_counter() - started
        workers = worker_peaks(client)
        # the same caching again, in workers now warmed up (imports, codecs, the page cache)
        started = time.perf_counter()
        cache_shards(client, data, sorted(client.scheduler_info(n_workers=-1)["workers"]))
        reload = time.perf_counter() - started
    return seconds, res.x, {"iterations": int(res.nit), "evaluations": int(res.nfev),
                            "load_seconds": res.stats["load_seconds"], "reload_seconds": reload,
                            "eval_seconds": res.stats["eval_seconds_total"], **workers}


def _sklearn(model, data, spec, load):
    from sklearn.linear_model import LogisticRegression, Ridge

    X, y = load()
    n = X.shape[0]
    started = time.perf_counter()
    if model.task == "regression":
        est = Ridge(alpha=L2 * n, fit_intercept=False, solver="cholesky").fit(X, y)
        return time.perf_counter() - started, est.coef_.ravel(), {}
    est = LogisticRegression(C=1.0 / (L2 * n), fit_intercept=False, tol=1e-10, max_iter=MAXITER).fit(X, y)
    coef = est.coef_.ravel() if est.coef_.shape[0] == 1 else est.coef_.T.ravel()
    return time.perf_counter() - started, coef, {"iterations": int(np.max(est.n_iter_))}


def _dask_glm(model, data, spec, load):
    try:
        from dask_glm.algorithms import lbfgs
        from dask_glm.families import Logistic as GLMLogistic
        from dask_glm.families import Normal
    except ImportError:
        raise Skipped("dask-glm is not installed (pip install -e '.[bench]')") from None
    if model.task == "classification" and getattr(model, "n_classes", 2) > 2:
        raise Skipped("dask-glm has no softmax (multinomial) family")
    from distributed import wait

    from dasklbfgs import connect

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        Xd, yd = data.to_dask()
        Xd, yd = client.persist([Xd, yd.astype(float)])
        wait([Xd, yd])
        # dask-glm minimises sum(loss) + lamduh ||w||^2 / 2; its Normal loss is r^2 (ours 0.5 r^2),
        # so least squares needs twice the lamduh to be our objective times 2n
        n = data.n_samples
        family, lamduh = (GLMLogistic, n * L2) if model.task == "classification" else (Normal, 2 * n * L2)
        started = time.perf_counter()
        beta = lbfgs(Xd, yd, regularizer="l2", lamduh=lamduh, family=family, max_iter=MAXITER, tol=1e-10)
        seconds = time.perf_counter() - started
        workers = worker_peaks(client)
    return seconds, np.asarray(beta), workers


def _spark(model, data, spec, load):
    try:
        from pyspark.ml.classification import LogisticRegression
        from pyspark.ml.linalg import DenseMatrix  # noqa: F401  (checks the ML package is there)
        from pyspark.ml.regression import LinearRegression
        from pyspark.sql import SparkSession
    except ImportError:
        raise Skipped("pyspark is not installed (pip install -e '.[bench]'; it needs Java 17)") from None
    import pandas as pd
    from pyspark.ml.feature import VectorAssembler

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "8g").config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    X, y = load()
    try:
        columns = [f"x{j}" for j in range(X.shape[1])]
        frame = pd.DataFrame(X, columns=columns)
        frame["label"] = y.astype(float)
        df = VectorAssembler(inputCols=columns, outputCol="features").transform(spark.createDataFrame(frame))
        df = df.select("features", "label").cache()
        df.count()
        started = time.perf_counter()
        if model.task == "regression":
            # Spark penalises in units of the label's spread: regParam = l2 / std(y) gives our objective
            est = LinearRegression(regParam=L2 / float(np.std(y, ddof=1)), elasticNetParam=0.0, fitIntercept=False,
                                   standardization=False, solver="l-bfgs", maxIter=MAXITER, tol=1e-12).fit(df)
            coef = est.coefficients.toArray()
        else:
            family = "binomial" if getattr(model, "n_classes", 2) == 2 and model.name == "logistic" else "multinomial"
            est = LogisticRegression(regParam=L2, elasticNetParam=0.0, fitIntercept=False, standardization=False,
                                     family=family, maxIter=MAXITER, tol=1e-12).fit(df)
            coef = (est.coefficients.toArray() if family == "binomial"
                    else est.coefficientMatrix.toArray().T.ravel())
        seconds = time.perf_counter() - started
        iterations = est.summary.totalIterations if est.hasSummary else None
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # local[2]: one JVM
        other = {"other_peak_rss_mib": peak_rss_mib(jvm), "other_processes": "the JVM"}
    finally:
        spark.stop()
    return seconds, coef, {"iterations": iterations, **other}


RUNNERS = {"scipy L-BFGS-B": _scipy, "Sandblaster L-BFGS": _sandblaster, "scikit-learn": _sklearn,
           "dask-glm lbfgs": _dask_glm, "Spark MLlib": _spark}


def _one(method: str, spec: dict, root: str) -> dict:
    """Run one method on one workload in this (fresh) process: its outcome, scored."""
    data = open_data(spec, Path(root))
    model = make_model(spec)
    seconds, x, facts = RUNNERS[method](model, data, spec, lambda: data.load_rows(0, data.n_samples))
    peak = peak_rss_mib()  # before loading X to score the solution
    X, y = data.load_rows(0, data.n_samples)
    fun = model.objective(np.asarray(x, dtype=np.float64), X, y)[0]
    return {"seconds": seconds, "fun": float(fun), **facts, "peak_rss_mib": peak}


def run_one(method: str, spec: dict, root: Path, timeout: float) -> dict:
    return run_fresh(_one, (method, spec, str(root)), timeout)


def read_pass_seconds(data, repeats: int) -> float:
    from threadpoolctl import threadpool_limits

    X, _ = data.load_rows(0, data.n_samples)
    v = np.ones(X.shape[1])
    times = []
    with threadpool_limits(1):
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            X @ v
            times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--softmax-rows", type=int, default=200_000)
    parser.add_argument("--softmax-classes", type=int, default=100)
    add_comparison_arguments(parser, METHODS, timeout=600.0, repeats=3, repeat_below=45.0)
    parser.add_argument("--from-results", action="store_true",
                        help="only redraw the report and plot from results/versus.json")
    args = parser.parse_args(argv)
    if args.from_results:
        finish(read_result("versus"), record=False)
        return
    command = " ".join(["python -m benchmarks.versus", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine(), "l2": L2, "workloads": {}, "repeats": args.repeats,
                 "repeat_below": args.repeat_below}
    for name, spec in workloads(args).items():
        data = open_data(spec, args.data_dir)
        entry: dict = {"spec": spec, "read_pass_seconds": read_pass_seconds(data, 5), "methods": {}}
        entry["methods"] = interleaved_runs(
            args.methods, args.repeats, args.repeat_below,
            lambda method, spec=spec: run_one(method, spec, args.data_dir, args.timeout),
            label=f"{name}: ")
        out["workloads"][name] = entry
    finish(out)


def finish(out: dict, record: bool = True) -> None:
    publish("versus", out, render, plot, OUT / "versus-seconds.png", record)


IN_PROCESS = ("scipy L-BFGS-B", "scikit-learn")


def _other_peak(method: str, r: dict) -> str:
    """The peak of the processes besides the driver: Dask workers, Spark's JVM."""
    if method in IN_PROCESS:
        return "none"
    if "other_peak_rss_mib" not in r:
        return "not measured"
    return f"{r['other_peak_rss_mib']:.0f} ({r['other_processes']})"


def _reached(r: dict, ref: float | None) -> bool:
    return "fun" in r and ref is not None and abs(r["fun"] - ref) <= 1e-6 * max(1.0, abs(ref))


def plot(out: dict, path: Path) -> None:
    """Seconds per method and workload (log scale), min-max whiskers; hatched bars did not
    reach the optimum."""
    plt = pyplot()
    workloads = list(out["workloads"])
    methods = list(dict.fromkeys(m for e in out["workloads"].values() for m in e["methods"]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(len(methods), 1)
    labelled: set[str] = set()
    for j, method in enumerate(methods):
        for i, name in enumerate(workloads):
            entry = out["workloads"][name]
            r = entry["methods"].get(method, {})
            if "seconds" not in r:
                continue
            found = [m["fun"] for m in entry["methods"].values() if "fun" in m]
            low, high = r.get("seconds_min", r["seconds"]), r.get("seconds_max", r["seconds"])
            ax.bar(i + (j - (len(methods) - 1) / 2) * width, r["seconds"], width, color=f"C{j}",
                   hatch=None if _reached(r, min(found)) else "//", edgecolor="black", linewidth=0.3,
                   yerr=[[r["seconds"] - low], [high - r["seconds"]]], capsize=2,
                   label=None if method in labelled else method)
            labelled.add(method)
    ax.set_yscale("log")
    ax.set_xticks(range(len(workloads)), workloads, fontsize=8)
    ax.set_ylabel("seconds to the optimum (median; hatched: not reached)")
    ax.set_title("Sandblaster L-BFGS and its peers, same data, same machine")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def render(out: dict) -> str:
    lines = report_header("Sandblaster L-BFGS and its peers, to the same optimum", out["command"], out["machine"])
    lines += [
        f"Float64 data, l2 = {out['l2']:g} (our objective: mean loss + l2/2 ||w||^2), no intercept. Each method "
        "ran to its own tight tolerance in a fresh process; every solution is scored with the same objective, "
        f"and **reached** means within 1e-6 (relative) of f*: scipy's objective, or the best any method found when "
        f"that is lower. Every method gets at most {MAXITER} iterations; on the ill-conditioned workload "
        "Sandblaster runs with `standardize=True` (an exact change of variables: same objective and optimum), "
        "the peers as they come. Seconds exclude loading data into RAM for the "
        "in-process methods and building the DataFrame for Spark; Sandblaster's include loading its shards from "
        "Zarr. Peak memory is each process's VmHWM: the driver's before loading X to score the solution (for the "
        "in-process methods it holds the data), and the other processes' at the end of the fit: the largest of the "
        "2 Dask workers' for Sandblaster and dask-glm, Spark's JVM (driver and executors in local mode) for Spark. "
        "Plot: [versus-seconds.png](versus-seconds.png).", "",
    ]
    if "repeats" in out:
        lines += [f"Up to {out['repeats']} runs per method, interleaved (every method once, then again); a method "
                  f"is run again only while its runs take under {out['repeat_below']:g} s. Seconds are the median, "
                  "with the min-max and the number of runs; ratios are of medians.", ""]
    for name, entry in out["workloads"].items():
        spec = entry["spec"]
        methods = entry["methods"]
        found = [r["fun"] for r in methods.values() if "fun" in r]
        ref = min(found) if found else None
        scipy_fun = methods.get("scipy L-BFGS-B", {}).get("fun")
        sand = methods.get("Sandblaster L-BFGS", {}).get("seconds")
        shape = f"{spec['rows']:,} x {spec['features']}" + (
            f", {spec['classes']} classes" if spec["kind"] == "multinomial" else "")
        scipy_note = ("" if scipy_fun is None or ref is None or abs(scipy_fun - ref) <= 1e-6 * max(1.0, abs(ref))
                      else f" scipy stopped {scipy_fun - ref:.2e} above the best objective found, f*.")
        lines += [f"## {name} ({shape})", "",
                  f"One read pass `X @ v` over X (1 thread): {entry['read_pass_seconds']:.3f} s.{scipy_note}", "",
                  "| method | seconds (median) | min-max (runs) | / Sandblaster | objective - f* | reached | "
                  "iterations | evaluations | driver peak MiB | other processes' peak MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for method, r in methods.items():
            if "seconds" not in r:
                lines.append(f"| {method} | {r.get('skipped') or 'failed: ' + r.get('failed', '?')} | | | | | | | | |")
                continue
            gap = r["fun"] - ref if ref is not None else float("nan")
            reached = _reached(r, ref)
            ratio = f"{r['seconds'] / sand:.2f}" if sand else ""
            spread = (f"{r['seconds_min']:.2f}-{r['seconds_max']:.2f} ({r['runs']}"
                      + (f"; {len(r['failed_runs'])} failed" if r.get("failed_runs") else "") + ")"
                      if "runs" in r else "")
            lines.append(f"| {method} | {r['seconds']:.2f} | {spread} | {ratio} | {gap:.2e} | "
                         f"{'yes' if reached else 'no'} | "
                         f"{r.get('iterations', '') if r.get('iterations') is not None else ''} | "
                         f"{r.get('evaluations', '')} | {r['peak_rss_mib']:.0f} | {_other_peak(method, r)} |")
        lines += ["", *_where_sandblaster_time_goes(entry), ""]
    return "\n".join(lines)


def _where_sandblaster_time_goes(entry: dict) -> list[str]:
    """Sandblaster's median run split into the shard load, the evaluations and the rest (the
    coordinator, the service and the end), beside the read pass and scipy's seconds per evaluation."""
    sand, scipy = entry["methods"].get("Sandblaster L-BFGS", {}), entry["methods"].get("scipy L-BFGS-B", {})
    if "run_seconds" not in sand or "eval_seconds" not in sand:  # recorded before the split was measured
        return []
    n = sand["evaluations"]
    rest = sand["run_seconds"] - sand["load_seconds"] - sand["eval_seconds"]
    per_eval = sand["eval_seconds"] / n
    line = (f"Sandblaster's median run ({sand['run_seconds']:.2f} s): loading the shards {sand['load_seconds']:.2f} s "
            f"(the same caching again in the same workers after the fit: {sand['reload_seconds']:.2f} s); "
            f"{n} evaluations {sand['eval_seconds']:.2f} s, {1e3 * per_eval:.0f} ms each "
            f"({per_eval / entry['read_pass_seconds']:.2f}x the read pass); the rest {rest:.2f} s")
    if "seconds" in scipy and scipy.get("evaluations"):
        line += f". scipy: {1e3 * scipy['seconds'] / scipy['evaluations']:.0f} ms per evaluation, with its iterations"
    return [line + "."]


if __name__ == "__main__":
    main()
