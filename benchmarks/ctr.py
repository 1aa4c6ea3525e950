"""Sparse logistic regression on click-through-like data: Sandblaster against its peers.

    python -m benchmarks.ctr                          # as recorded in RESULTS-ctr.md
    python -m benchmarks.ctr --rows 100000 --repeats 1   # a quick look

Workload: the ``ctr`` recipe (:mod:`dasklbfgs.data.ctr`), 1,000,000 training impressions
and 200,000 held out, 2^22 hashed columns, ~34 non-zeros a row, ~3% positives, stored as
sparse (CSR) shards of 50,000 rows. Objective, the same for every method: the mean
log-loss with an intercept plus ``l2 / 2 ||w||^2`` (the intercept unpenalised), which is
scikit-learn's with ``C = 1 / (l2 n)``. Methods, each in a fresh process (its peak memory
its own):

- Sandblaster L-BFGS on a 2-worker embedded cluster, with the local and the sharded
  L-BFGS state (time includes loading the shards);
- scikit-learn ``LogisticRegression`` with ``lbfgs`` and with ``saga`` on the CSR matrix in
  this process (data in RAM, not counted);
- Spark MLlib's ``LogisticRegression`` in ``local[2]`` on the same rows read from a LIBSVM
  file (sparse vectors; time excludes reading them), ``regParam = l2``,
  ``standardization=False``, stopped after 150 iterations (about as many as Sandblaster
  needs; at ~2 s an iteration it did not reach the optimum in 20 minutes), its gap reported;
- dask-glm's ``lbfgs`` on the dataset's dask array (sparse chunks), where it accepts them;
- Downpour SGD with FTRL-Proximal at the parameter shards (2 replicas, row-sparse pushes and
  fetches, two epochs): a different objective (no l2 term), so only its held-out log-loss
  and time compare.

The L-BFGS methods stop at the same gradient tolerance (max |g| <= 1e-8 on this objective);
every solution is scored with the objective in numpy; f* is the lowest any method found, and
a method reaches the optimum when it is within 1e-6 (relative) of it. Held-out log-loss is
on the 200,000 rows none of them trained on.

Two measurements of their own follow the table, each also runnable alone into the recorded
results: the coordinator's peak memory at 2^26 features in sharded state (``--wide-only``),
and held-out log-loss against time for Sandblaster and Downpour FTRL (``--curves-only``):
Sandblaster scores every iterate in its callback, the scoring's own time taken off the
clock; Downpour scores its parameters at regular global steps after the run
(``defer_eval``), each point at the time its parameters were taken.

Writes ``benchmarks/results/ctr.json``, ``benchmarks/RESULTS-ctr.md``,
``benchmarks/ctr-seconds.png`` and ``benchmarks/ctr-curves.png``; ``--from-results`` redraws
from the recorded JSON.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import (
    OUT,
    Skipped,
    add_comparison_arguments,
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

L2 = 1e-4
DEFAULT_ROWS = 1_000_000
GTOL = 1e-8
MAXITER = 1000
SAGA_EPOCHS = 30
SPARK_ITERATIONS = 150  # Spark takes ~2 s an iteration here: as many as Sandblaster needs, then its gap
FTRL_RATE, FTRL_EPOCHS = 0.5, 2
ONLINE_PASSES, ONLINE_RATE = 1, 0.05  # benchmarks.online_start's best start on this recipe
VW_BFGS_PASSES = 30
UNCUT = "Sandblaster, local state, whole vectors"
METHODS = ("Sandblaster, local state", "Sandblaster, sharded state", "Sandblaster, online then batch", UNCUT,
           "scikit-learn lbfgs", "scikit-learn saga", "Spark MLlib", "dask-glm lbfgs",
           "Vowpal Wabbit, online pass", "Vowpal Wabbit, online then BFGS", "Downpour FTRL")
#: methods that minimise our l2 objective: Downpour FTRL has none, and Vowpal Wabbit's BFGS
#: penalises its constant too, which shares the hashed table with the columns
OPTIMUM_METHODS = METHODS[:8]
SANDBLASTER = METHODS[:4]  # their iterations' timeline is reported
WIDE = "Sandblaster, sharded state, wide"
WIDE_FEATURES, WIDE_ROWS, WIDE_ITERATIONS = 2**26, 200_000, 5
CURVES = ("Sandblaster, local state", "Downpour FTRL")
FTRL_EVAL_EVERY = 100  # global steps between Downpour's held-out scores (2,000 steps in all)


def data_path(root: Path, rows: int, features: int) -> Path:
    return root / f"ctr-{rows}x{features}"


def open_data(root: Path, rows: int, features: int) -> tuple[Any, Any]:
    """The train and test datasets, written by the ``ctr`` recipe on first use."""
    from dasklbfgs import ShardedDataset, make_dataset

    path = data_path(root, rows, features)
    try:
        return ShardedDataset.open(path / "train"), ShardedDataset.open(path / "test")
    except Exception:
        make_dataset("ctr", path, rows=rows, features=features, overwrite=True)
        return ShardedDataset.open(path / "train"), ShardedDataset.open(path / "test")


def logistic(data: Any, l2: float = L2) -> Any:
    from dasklbfgs.models import Logistic

    return Logistic(data.n_features, l2=l2, fit_intercept=True)


# -- one method, in its own process ---------------------------------------------------------

def _sandblaster(state: str, cut: bool = True, **options: Any):
    """Sandblaster L-BFGS; ``cut=False`` keeps every vector as long as the model (the run
    before :mod:`dasklbfgs.solvers.sandblaster.active`, for the timeline's comparison)."""
    def run(train, test, root):
        from dasklbfgs import connect, sandblaster_lbfgs
        from dasklbfgs.solvers.sandblaster import active

        if not cut:
            active.MOST_ACTIVE = 0.0  # this (fresh) process only
        spans = evaluation_spans()
        with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
            client.wait_for_workers(2)
            started = time.perf_counter()
            res = sandblaster_lbfgs(logistic(train), train, client=client, maxiter=MAXITER, gtol=GTOL, ftol=1e-15,
                                    state=state, **options)
            seconds = time.perf_counter() - started
            workers = worker_peaks(client)
        stats = res.stats
        return seconds, res.x, {"iterations": int(res.nit), "evaluations": int(res.nfev), "message": res.message,
                                "trace": [(e["time"], e["loss"]) for e in res.history],
                                "active_parameters": stats.get("active_parameters"),
                                "online_seconds": stats["online"]["seconds"] if "online" in stats else None,
                                "steady_own_seconds": steady_own_seconds(res.history, spans, int(res.nfev)),
                                **{key: stats.get(key) for key in ("load_seconds", "eval_seconds_median",
                                                                   "eval_seconds_total", "total_seconds",
                                                                   "busiest_worker_compute_seconds",
                                                                   "gather_seconds_total", "adding_seconds_total")},
                                **workers}
    return run


def evaluation_spans() -> list[tuple[float, float]]:
    """Every evaluation's ``(start, end)`` (``time.perf_counter``) from now on in this (fresh)
    process: the coordinator's whole-evaluation calls, timed from outside."""
    from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator

    spans: list[tuple[float, float]] = []
    evaluate = MegaBatchEvaluator.evaluate

    def timed(self, x):
        began = time.perf_counter()
        out = evaluate(self, x)
        spans.append((began, time.perf_counter()))
        return out

    MegaBatchEvaluator.evaluate = timed  # type: ignore[method-assign]
    return spans


def steady_own_seconds(history: list[dict], spans: list[tuple[float, float]], nfev: int,
                       skip: int = 5) -> float | None:
    """The coordinator's work outside the evaluations in a steady iteration: the median over
    the iterations after the first ``skip`` of each one's wall time less its evaluations'.

    A history entry's ``time`` counts from the run's start, which is where its first
    evaluation (the starting point's) begins: that span anchors the iterations' ends. The
    run's ``nfev`` evaluations are the last spans (a run that ends on a failed line search
    made some after its last iteration)."""
    if len(history) <= skip + 1 or len(spans) < nfev:
        return None  # (the sharded state's evaluations leave their sums on the workers: not timed here)
    first = len(spans) - nfev
    anchor = spans[first][0]
    ends = [anchor + entry["time"] for entry in history]
    own = []
    for begin, end in zip(ends[skip:], ends[skip + 1:]):
        inside = sum(min(b, end) - max(a, begin) for a, b in spans[first:] if b > begin and a < end)
        own.append(end - begin - inside)
    return float(np.median(own))


def _sklearn(solver: str):
    def run(train, test, root):
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        X, y = train.load_rows(0, train.n_samples)
        options = dict(tol=GTOL, max_iter=MAXITER) if solver == "lbfgs" else dict(tol=1e-8, max_iter=SAGA_EPOCHS)
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # saga's cap on epochs: its gap is reported
            est = LogisticRegression(C=1.0 / (L2 * X.shape[0]), solver=solver, **options).fit(X, y)
        seconds = time.perf_counter() - started
        return seconds, np.concatenate([est.coef_.ravel(), est.intercept_]), {"iterations": int(est.n_iter_[0])}
    return run


def _spark(train, test, root):
    try:
        from pyspark.ml.classification import LogisticRegression
        from pyspark.sql import SparkSession
    except ImportError:
        raise Skipped("pyspark is not installed (pip install -e '.[bench]'; it needs Java 17)") from None
    libsvm = _libsvm_file(train, root)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "8g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.read.format("libsvm").option("numFeatures", str(train.n_features)).load(str(libsvm)).cache()
        df.count()
        started = time.perf_counter()
        est = LogisticRegression(regParam=L2, elasticNetParam=0.0, fitIntercept=True, standardization=False,
                                 family="binomial", maxIter=SPARK_ITERATIONS, tol=1e-10).fit(df)
        seconds = time.perf_counter() - started
        x = np.concatenate([est.coefficients.toArray(), [est.intercept]])
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # local[2]: one JVM
        facts = {"iterations": est.summary.totalIterations, "other_peak_rss_mib": peak_rss_mib(jvm),
                 "other_processes": "the JVM"}
    finally:
        spark.stop()
    return seconds, x, facts


def _libsvm_file(train: Any, root: Path) -> Path:
    """The training rows as a LIBSVM text file (1-based columns, as Spark reads them)."""
    from sklearn.datasets import dump_svmlight_file

    path = data_path(root, train.n_samples, train.n_features) / "train.libsvm"
    if not path.exists():
        X, y = train.load_rows(0, train.n_samples)
        partial = path.with_suffix(".partial")
        dump_svmlight_file(X, y, str(partial), zero_based=False)
        partial.rename(path)
    return path


def _dask_glm(train, test, root):
    try:
        from dask_glm.algorithms import lbfgs
        from dask_glm.families import Logistic as GLMLogistic
    except ImportError:
        raise Skipped("dask-glm is not installed (pip install -e '.[bench]')") from None
    from distributed import wait

    from dasklbfgs import connect

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        X, y = train.to_dask()
        X, y = client.persist([X, y.astype(float)])
        wait([X, y])
        started = time.perf_counter()
        # dask-glm minimises sum(loss) + lamduh ||w||^2 / 2 and has no intercept option: ours is n l2
        beta = lbfgs(X, y, regularizer="l2", lamduh=train.n_samples * L2, family=GLMLogistic, max_iter=MAXITER,
                     tol=GTOL)
        seconds = time.perf_counter() - started
        workers = worker_peaks(client)
    return seconds, np.concatenate([np.asarray(beta), [0.0]]), workers


def _vw_file(data: Any, name: str) -> Path:
    """Rows as Vowpal Wabbit's text input, beside the dataset: ``label | column:value ...``
    (labels -1/1) in the default namespace, whose hash is 0, so a column's index in VW's
    table is the column."""
    path = Path(data.path).parent / f"{name}.vw"
    if path.exists():
        return path
    X, y = data.load_rows(0, data.n_samples)[:2]
    X = X.tocsr()
    partial = path.with_suffix(".partial")
    with open(partial, "w") as out:
        for start in range(0, X.shape[0], 10_000):
            block = X[start : start + 10_000]
            for i in range(block.shape[0]):
                lo, hi = block.indptr[i], block.indptr[i + 1]
                features = " ".join(f"{j}:{v:g}" for j, v in zip(block.indices[lo:hi], block.data[lo:hi]))
                out.write(f"{1 if y[start + i] > 0 else -1} | {features}\n")
    partial.rename(path)
    return path


def _vowpal_wabbit(bfgs: bool):
    """Vowpal Wabbit in this process, from its command line: one online pass (its defaults:
    adaptive, normalised, invariant updates; no l2), then, with ``bfgs``, ``--bfgs`` passes
    from that pass's weights (``--predict_only_model``) with ``--l2 = n * l2``: VW's BFGS
    minimises the summed log-loss plus ``l2/2 ||w||^2``, ours the mean. Held-out log-loss from
    VW's own predictions of the test rows."""
    def run(train, test, root):
        try:
            from vowpalwabbit import Workspace
        except ImportError:
            raise Skipped("vowpalwabbit is not installed (pip install -e '.[bench]')") from None
        import tempfile

        train_file, test_file = _vw_file(train, "train"), _vw_file(test, "test")
        bits = int(np.log2(train.n_features))
        common = f"--loss_function logistic -b {bits} --quiet"
        with tempfile.TemporaryDirectory() as tmp:
            online, final = Path(tmp) / "online.model", Path(tmp) / "bfgs.model"
            started = time.perf_counter()
            _vw(Workspace, f"-d {train_file} {common} -f {online} --predict_only_model")
            online_seconds = time.perf_counter() - started
            if bfgs:
                _vw(Workspace, f"-d {train_file} {common} --bfgs --passes {VW_BFGS_PASSES} --holdout_off "
                    f"--cache_file {Path(tmp) / 'cache'} -i {online} --predict_only_model "
                    f"--l2 {L2 * train.n_samples:g} -f {final}")
            seconds = time.perf_counter() - started
            predictions = Path(tmp) / "predictions"
            _vw(Workspace, f"-d {test_file} -t -i {final if bfgs else online} --predict_only_model "
                f"--link logistic -p {predictions} --quiet")
            p = np.clip(np.loadtxt(predictions), 1e-15, 1 - 1e-15)
        y = test.load_rows(0, test.n_samples)[1] > 0
        heldout = float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))
        return seconds, None, {"heldout_logloss": heldout, "online_seconds": online_seconds,
                               "iterations": VW_BFGS_PASSES if bfgs else 1}
    return run


def _vw(workspace: Any, arguments: str) -> None:
    vw = workspace(arguments)
    try:
        vw.run_parser()
    finally:
        vw.finish()


def _downpour_ftrl(train, test, root):
    from dasklbfgs import connect, downpour_sgd

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        # no l2 in the model: FTRL's own regularisation, and pushes carry only the touched rows
        res = downpour_sgd(logistic(train, l2=0.0), train, client=client, optimizer="ftrl", learning_rate=FTRL_RATE,
                           epochs=FTRL_EPOCHS, batch_size=1000, n_replicas=2, seed=0)
        seconds = time.perf_counter() - started
        workers = worker_peaks(client)
    return seconds, res.x, {"steps": int(res.nit), **workers}


def _wide_sharded(train, test, root):
    """Sandblaster's sharded state at many features: the coordinator's peak memory through the
    last iteration (read at each iteration's event, before the result is gathered) and after."""
    from dasklbfgs import connect, sandblaster_lbfgs
    from dasklbfgs.monitor.events import TOPIC

    peaks: list[float] = []
    solving = [True]  # events arrive late: one read after the result was gathered is not the iterations'
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        client.subscribe_topic(TOPIC, lambda event: peaks.append(peak_rss_mib()) if solving[0] else None)
        started = time.perf_counter()
        res = sandblaster_lbfgs(logistic(train), train, client=client, maxiter=WIDE_ITERATIONS, state="sharded")
        seconds = time.perf_counter() - started
        solving[0] = False
        workers = worker_peaks(client)
    return seconds, res.x, {"iterations": int(res.nit), "evaluations": int(res.nfev),
                            "coordinator_peak_through_iterations_mib": max(peaks) if peaks else None,
                            "iteration_events": len(peaks), **workers}


def _sandblaster_curve(train, test, root):
    """Sandblaster (local state) scoring every iterate on the held-out rows in its callback;
    the time the scoring takes is taken off the clock (the workers wait meanwhile)."""
    from dasklbfgs import connect, sandblaster_lbfgs

    Xt, yt = test.load_rows(0, test.n_samples)
    points: list[tuple[float, float]] = []
    scoring = [0.0]

    def score(intermediate) -> None:
        entered = time.perf_counter()
        points.append((entered - started - scoring[0], heldout_logloss(intermediate.x, Xt, yt)))
        scoring[0] += time.perf_counter() - entered

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        sandblaster_lbfgs(logistic(train), train, client=client, maxiter=MAXITER, gtol=GTOL, ftol=1e-15,
                          callback=score)
    return {"points": points, "scoring_seconds": scoring[0]}


def _downpour_curve(train, test, root):
    """Downpour FTRL as in the table, its parameters kept every FTRL_EVAL_EVERY global steps and
    scored after the run; the points' times are from the call (set-up included), as the table's."""
    from dasklbfgs import connect, downpour_sgd

    offsets: list[float] = []  # call clock - the run's own clock, read at each progress entry

    def clock(entry) -> None:
        offsets.append(time.perf_counter() - started - entry.time)

    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        res = downpour_sgd(logistic(train, l2=0.0), train, client=client, optimizer="ftrl", learning_rate=FTRL_RATE,
                           epochs=FTRL_EPOCHS, batch_size=1000, n_replicas=2, seed=0, eval_data=test,
                           eval_every=FTRL_EVAL_EVERY, defer_eval=True, callback=clock)
    offset = min(offsets)  # the entry nearest its own time
    # with no l2 in the model the held-out objective is the held-out mean log-loss
    return {"points": [(e["time"] + offset, e["eval_objective"]) for e in res.history if "eval_objective" in e]}


CURVE_RUNNERS = {"Sandblaster, local state": _sandblaster_curve, "Downpour FTRL": _downpour_curve}
assert set(CURVE_RUNNERS) == set(CURVES)


RUNNERS = {"Sandblaster, local state": _sandblaster("local"), "Sandblaster, sharded state": _sandblaster("sharded"),
           "Sandblaster, online then batch": _sandblaster("local", online_passes=ONLINE_PASSES,
                                                          online_learning_rate=ONLINE_RATE),
           UNCUT: _sandblaster("local", cut=False),
           "scikit-learn lbfgs": _sklearn("lbfgs"), "scikit-learn saga": _sklearn("saga"), "Spark MLlib": _spark,
           "dask-glm lbfgs": _dask_glm, "Vowpal Wabbit, online pass": _vowpal_wabbit(bfgs=False),
           "Vowpal Wabbit, online then BFGS": _vowpal_wabbit(bfgs=True), "Downpour FTRL": _downpour_ftrl,
           WIDE: _wide_sharded}
assert set(RUNNERS) == {*METHODS, WIDE}


def scores(x: np.ndarray, train: Any, test: Any) -> dict[str, float]:
    """The l2 objective on the training rows and the log-loss on the held-out rows."""
    X, y = train.load_rows(0, train.n_samples)
    fun = logistic(train).objective(np.asarray(x, dtype=np.float64), X, y)[0]
    Xt, yt = test.load_rows(0, test.n_samples)
    return {"fun": float(fun), "heldout_logloss": heldout_logloss(x, Xt, yt)}


def heldout_logloss(x: np.ndarray, X: Any, y: np.ndarray) -> float:
    """Mean log-loss of parameters ``x`` (weights, then the intercept) on rows ``X``, ``y``."""
    z = X @ x[:-1] + x[-1]
    return float(np.mean(np.logaddexp(0, z) - y * z))


def _curve(method: str, root: str, rows: int, features: int) -> dict:
    """One method's held-out log-loss curve, in this (fresh) process."""
    train, test = open_data(Path(root), rows, features)
    return CURVE_RUNNERS[method](train, test, Path(root))


def _one(method: str, root: str, rows: int, features: int) -> dict:
    """Run one method in this (fresh) process: its outcome, scored."""
    train, test = open_data(Path(root), rows, features)
    seconds, x, facts = RUNNERS[method](train, test, Path(root))
    peak = peak_rss_mib()  # before loading the rows to score the solution
    scored = {} if x is None else scores(x, train, test)  # (Vowpal Wabbit scores its own predictions)
    return {"seconds": seconds, **scored, **facts, "peak_rss_mib": peak}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--features", type=int, default=2**22)
    add_comparison_arguments(parser, METHODS, timeout=1200.0, repeats=2, repeat_below=60.0)
    parser.add_argument("--wide-features", type=int, default=WIDE_FEATURES,
                        help=f"features of the sharded-state memory run (on {WIDE_ROWS} rows, "
                        f"{WIDE_ITERATIONS} iterations)")
    parser.add_argument("--no-wide", action="store_true", help="skip the sharded-state memory run")
    parser.add_argument("--wide-only", action="store_true",
                        help="only the sharded-state memory run, into the recorded results")
    parser.add_argument("--no-curves", action="store_true", help="skip the held-out log-loss curves")
    parser.add_argument("--curves-only", action="store_true",
                        help="only the held-out log-loss curves, into the recorded results")
    parser.add_argument("--from-results", action="store_true", help="only redraw from results/ctr.json")
    args = parser.parse_args(argv)
    if args.from_results:
        finish(read_result(results_name(args.rows)), record=False)
        return
    command = " ".join(["python -m benchmarks.ctr", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    if args.wide_only:
        finish({**read_result("ctr"), "wide": wide_run(args, command)})
        return
    if args.curves_only:
        finish({**read_result("ctr"), "curves": curves_run(args, command)})
        return
    train, test = open_data(args.data_dir, args.rows, args.features)
    out: dict = {"command": command, "machine": machine(), "l2": L2, "gtol": GTOL, "rows": train.n_samples,
                 "heldout_rows": test.n_samples, "features": train.n_features, "nnz": int(train.nnz),
                 "positives": float(np.mean(train.load_rows(0, train.n_samples)[1])), "methods": {}}
    out["methods"] = interleaved_runs(
        args.methods, args.repeats, args.repeat_below,
        lambda method: run_fresh(_one, (method, str(args.data_dir), args.rows, args.features), args.timeout))
    if not args.no_wide:
        out["wide"] = wide_run(args, command)
    if not args.no_curves:
        out["curves"] = curves_run(args, command)
    finish(out)


def wide_run(args, command: str) -> dict:
    """The sharded-state memory run (a measurement of its own, recorded with its command)."""
    print(f"{WIDE} ({args.wide_features} features) ...", flush=True)
    open_data(args.data_dir, WIDE_ROWS, args.wide_features)
    wide = {"rows": WIDE_ROWS, "features": args.wide_features, "command": command,
            **run_fresh(_one, (WIDE, str(args.data_dir), WIDE_ROWS, args.wide_features), args.timeout)}
    print(f"   {wide}", flush=True)
    return wide


def curves_run(args, command: str) -> dict:
    """Held-out log-loss against time for Sandblaster and Downpour FTRL (a measurement of its own,
    recorded with its command)."""
    curves: dict = {"command": command, "rows": args.rows, "features": args.features}
    for method in CURVES:
        print(f"{method}: held-out log-loss curve ...", flush=True)
        curves[method] = run_fresh(_curve, (method, str(args.data_dir), args.rows, args.features), args.timeout)
    return curves


def results_name(rows: int) -> str:
    """``ctr`` for the recorded size, ``ctr-<rows>`` for another (recorded beside it)."""
    return "ctr" if rows == DEFAULT_ROWS else f"ctr-{rows}"


def finish(out: dict, record: bool = True) -> None:
    name = results_name(out["rows"])
    publish(name, out, render, plot, OUT / f"{name}-seconds.png", record)
    if out.get("curves"):
        plot_curves(out["curves"], OUT / "ctr-curves.png")


def f_star(out: dict) -> float | None:
    funs = [r["fun"] for m, r in out["methods"].items() if m in OPTIMUM_METHODS and "fun" in r]
    return min(funs) if funs else None


def plot(out: dict, path: Path) -> None:
    plt = pyplot()
    timed = {m: r for m, r in out["methods"].items() if "seconds" in r}
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for method, r in timed.items():
        ax.scatter(r["seconds"], r["heldout_logloss"], label=method)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log scale)")
    ax.set_ylabel("held-out log-loss")
    ax.set_title(f"ctr {out['rows']:,} x {out['features']:,}: held-out log-loss against time")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_curves(curves: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for method in CURVES:
        if curves.get(method, {}).get("points"):
            t, loss = zip(*curves[method]["points"])
            ax.plot(t, loss, marker=".", label=method)
    ax.set_ylim(top=0.13)  # the first iterates' losses (up to log 2) would flatten the end
    ax.set_xlabel("seconds from the call (Sandblaster: shard loading included)")
    ax.set_ylabel("held-out log-loss")
    ax.set_title(f"ctr {curves['rows']:,} x {curves['features']:,}: held-out log-loss against time")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def first_time_below(points: list, level: float) -> float | None:
    """The first time a curve's held-out log-loss is at most ``level`` (None: never)."""
    return next((t for t, loss in points if loss <= level), None)


def render_curves(curves: dict) -> list[str]:
    lines = ["## Held-out log-loss against time", "",
             f"Measured by `{curves['command']}` ({curves['rows']:,} x {curves['features']:,}; plot: "
             "[ctr-curves.png](ctr-curves.png)). Sandblaster's iterates are scored in its callback, the "
             "scoring's time taken off its clock; Downpour FTRL's parameters are kept every "
             f"{FTRL_EVAL_EVERY} global steps and scored after the run, each point at the time its parameters "
             "were taken. Both clocks start at the call.", ""]
    failed = [m for m in CURVES if not curves.get(m, {}).get("points")]
    for method in failed:
        lines.append(f"{method}: {curves.get(method, {}).get('failed', curves.get(method, {}).get('skipped'))}")
    if failed:
        return lines + [""]
    ftrl_final = curves["Downpour FTRL"]["points"][-1]
    best = min(loss for _, loss in curves["Sandblaster, local state"]["points"])
    lines += ["| held-out log-loss at most | Sandblaster seconds | Downpour FTRL seconds |", "|---|---|---|"]
    # FTRL's last value itself (not rounded: a rounded level could sit just below it), 2% above it,
    # and within 0.1% of Sandblaster's best
    for level in sorted({ftrl_final[1] * 1.02, ftrl_final[1], best * 1.001}, reverse=True):
        found = [first_time_below(curves[m]["points"], level) for m in CURVES]
        lines.append(f"| {level:.5f} | " + " | ".join("never" if t is None else f"{t:.1f}" for t in found) + " |")
    return lines + ["", f"Downpour FTRL's last point: {ftrl_final[1]:.5f} at {ftrl_final[0]:.1f} s; "
                        f"Sandblaster's best: {best:.5f}.", ""]


def seconds_to_optimum(r: dict, ref: float, within: float = 1e-6) -> float | None:
    """When a Sandblaster run's objective first came within ``within`` (relative) of ``ref``, by
    its iterations' clock (from the call, as its seconds)."""
    return next((t for t, f in r.get("trace", []) if f - ref <= within * abs(ref)), None)


@dataclass(frozen=True)
class IterationCosts:
    """Where a Sandblaster run's iteration goes, in seconds (from its counters and
    :func:`steady_own_seconds`)."""

    evaluations: float  # an iteration's evaluations
    workers: float  # an evaluation's wall time less the coordinator's gathering: the workers and the messages
    busiest: float  # the busiest worker's computing in an evaluation
    gather: float  # the coordinator gathering the parameters each worker is sent, an evaluation
    adding: float  # the coordinator adding the portions' sums, an evaluation
    vectors: float | None  # the coordinator's work outside the evaluations in a steady iteration
    averaged: float  # all the coordinator's work an iteration, averaged over the run (set-up included)

    @property
    def coordinator(self) -> float | None:
        """All the coordinator's work in a steady iteration: its vector work, and the
        gathering and adding of its evaluations."""
        if self.vectors is None:
            return None
        return self.vectors + self.evaluations * (self.gather + self.adding)


def iteration_costs(r: dict) -> IterationCosts:
    """A Sandblaster run's :class:`IterationCosts`."""
    nit, nfev = max(r["iterations"], 1), max(r["evaluations"], 1)
    gather, adding = (r.get(key) or 0.0 for key in ("gather_seconds_total", "adding_seconds_total"))
    before = r["load_seconds"] + (r.get("online_seconds") or 0.0)
    return IterationCosts(evaluations=nfev / nit, workers=(r["eval_seconds_total"] - gather) / nfev,
                          busiest=r["busiest_worker_compute_seconds"] / nfev, gather=gather / nfev,
                          adding=adding / nfev, vectors=r.get("steady_own_seconds"),
                          averaged=(r["total_seconds"] - before - r["eval_seconds_total"] + gather) / nit)


def render_timeline(out: dict) -> list[str]:
    """Where a Sandblaster iteration's time goes, from each run's own counters."""
    runs = {m: r for m, r in out["methods"].items() if m in SANDBLASTER and "total_seconds" in r}
    if not runs:
        return []
    lines = ["## A wide iteration's time", "",
             "From each run's counters. An evaluation: the workers computing and the messages (the parameters "
             "sent, the sums back and unpacked: its wall time less the coordinator's gathering), the busiest "
             "worker's computing within it (direct calls). The coordinator's work in this process: gathering the "
             "parameters each worker is sent and adding the portions' sums, per evaluation; its vector work "
             "outside the evaluations (L-BFGS's pairs, direction and trial points, the objective from the sums, "
             "the iteration's report) in a steady iteration (the median after the fifth); all of it in a steady "
             "iteration (that median, and the gathering and adding of the run's evaluations an iteration); and "
             "all but the evaluations averaged over the whole run (its set-up and teardown included: the columns' "
             "pass, the cut, the result's expansion). The sharded state's evaluations are not timed apart (their "
             "sums stay on the workers): its average holds the vector work on the workers and their reductions.",
             "",
             "| method | parameters optimised | evaluations an iteration | an evaluation ms | the busiest worker "
             "computing ms | gathering ms an evaluation | adding ms an evaluation | vector work ms an iteration | "
             "the coordinator ms an iteration | the same averaged over the run ms | coordinator / one evaluation "
             "| non-zeros a second per evaluation |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for method, r in runs.items():
        c = iteration_costs(r)
        active = r.get("active_parameters")
        lines.append(f"| {method} | {active or out['features'] + 1:,} | {c.evaluations:.2f} | "
                     f"{1e3 * c.workers:.1f} | {1e3 * c.busiest:.1f} | {1e3 * c.gather:.1f} | {1e3 * c.adding:.1f} | "
                     f"{_ms(c.vectors)} | {_ms(c.coordinator)} | {1e3 * c.averaged:.1f} | "
                     f"{_share(c)} | "
                     f"{out['nnz'] / c.workers / 1e6:.0f}M |")
    return lines + [""]


def _share(c: IterationCosts) -> str:
    """The coordinator's work against an evaluation: in a steady iteration, or averaged over
    the run where the iterations' evaluations were not timed (the sharded state's)."""
    if c.coordinator is not None:
        return f"{c.coordinator / c.workers:.0%}"
    return f"{c.averaged / c.workers:.0%} (averaged)"


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{1e3 * seconds:.1f}"


def render_targets(out: dict) -> list[str]:
    """Sandblaster against the targets it is held to on this workload: its local state, and
    its online-then-batch run against Vowpal Wabbit's online-then-BFGS (the like method)."""
    ref, methods = f_star(out), out["methods"]
    ours, online, sklearn, vw = (methods.get(m, {}) for m in (
        "Sandblaster, local state", "Sandblaster, online then batch", "scikit-learn lbfgs",
        "Vowpal Wabbit, online then BFGS"))
    if ref is None or "trace" not in ours:
        return []
    reached = seconds_to_optimum(ours, ref)
    reached_online = seconds_to_optimum(online, ref)  # (None without a trace)
    lines = ["## Against the targets", ""]
    if reached is not None:
        lines.append(f"- Sandblaster (local state) within 1e-6 of f* after {reached:.1f} s (its iterations' clock, "
                     "from the call, in the run whose counters these are; that run stopped at max |g| <= "
                     f"{GTOL:g} after {ours.get('run_seconds', ours['seconds']):.1f} s); after one online pass, "
                     + ("never" if reached_online is None else f"{reached_online:.1f} s") + ".")
    for name, r, factor in (("0.3x scikit-learn lbfgs's", sklearn, 0.3), ("Vowpal Wabbit's online then BFGS",
                                                                          vw, 1.0)):
        if "seconds" in r and reached is not None:
            bound = factor * r["seconds"]
            lines.append(f"- {name} time: {bound:.1f} s: the local state {_against(reached, bound)}"
                         + ("" if reached_online is None else f", online then batch {_against(reached_online, bound)}")
                         + ".")
    crossing = first_time_below(out.get("curves", {}).get("Sandblaster, local state", {}).get("points", []),
                                vw.get("heldout_logloss", -np.inf))
    if crossing is not None:
        lines.append(f"- Vowpal Wabbit's online then BFGS ends at held-out log-loss {vw['heldout_logloss']:.5f} "
                     f"(not the optimum's); Sandblaster's held-out log-loss is below it after {crossing:.1f} s "
                     "(the curves below).")
    c = iteration_costs(ours)
    lines.append(f"- An evaluation: {out['nnz'] / c.workers / 1e6:.0f}M non-zeros a second on 2 workers (the target: "
                 f"60M): {'met' if out['nnz'] / c.workers >= 60e6 else 'not met'}.")
    if c.coordinator is not None and c.vectors is not None:
        lines.append(f"- The coordinator's work in a steady iteration: {1e3 * c.coordinator:.1f} ms, "
                     f"{c.coordinator / c.workers:.0%} of an evaluation (the target: 20%): "
                     f"{'met' if c.coordinator <= 0.2 * c.workers else 'not met'}; its vector work alone "
                     f"{1e3 * c.vectors:.1f} ms ({c.vectors / c.workers:.0%}), the rest gathering the parameters "
                     "sent and adding the sums.")
    return lines + [""]


def _against(seconds: float | None, bound: float) -> str:
    if seconds is None:
        return "never reached the optimum"
    return f"{'met' if seconds <= bound else 'not met'} ({seconds / bound:.2f}x of it)"


def render(out: dict) -> str:
    ref = f_star(out)
    lines = report_header("Sparse logistic regression on click-through-like data", out["command"], out["machine"])
    lines += [f"Data: the `ctr` recipe, {out['rows']:,} training rows x {out['features']:,} hashed columns, "
              f"{out['nnz'] / out['rows']:.1f} non-zeros a row, {out['positives']:.1%} positives; "
              f"{out['heldout_rows']:,} held-out rows. Objective: mean log-loss + l2/2 ||w||^2, l2 = {out['l2']:g}, "
              f"an unpenalised intercept. f* = {ref!r} (the lowest found).", "",
              "| method | seconds | objective - f* (relative) | held-out log-loss | iterations | "
              "driver peak MiB | other processes' peak MiB |",
              "|---|---|---|---|---|---|---|"]
    for method, r in out["methods"].items():
        if "seconds" not in r:
            lines.append(f"| {method} | {r.get('failed', r.get('skipped'))} | | | | | |")
            continue
        spread = f" ({r['seconds_min']:.1f}-{r['seconds_max']:.1f}, {r['runs']} runs)" if r.get("runs", 1) > 1 else ""
        gap = (f"{(r['fun'] - ref) / abs(ref):.1e}" if method in OPTIMUM_METHODS and ref is not None
               else "other objective")
        other = (f"{r['other_peak_rss_mib']:.0f} ({r['other_processes']})" if "other_peak_rss_mib" in r
                 else "none")
        steps = r.get("iterations", r.get("steps", ""))
        lines.append(f"| {method} | {r['seconds']:.1f}{spread} | {gap} | {r['heldout_logloss']:.5f} | {steps} | "
                     f"{r['peak_rss_mib']:.0f} | {other} |")
    ran = set(out["methods"])
    notes = ["Sandblaster's seconds include loading the shards from Zarr; the others' exclude reading the data. "
             "Seconds are medians of the runs (min-max shown when repeated)."]
    if "Spark MLlib" in ran:
        notes.append(f"Spark is stopped after {SPARK_ITERATIONS} iterations (about as many as Sandblaster needs) and "
                     "its gap shown: left to its own convergence (maxIter 1000, tol 1e-10) it had not finished in "
                     "20 minutes.")
    if "scikit-learn saga" in ran:
        notes.append(f"scikit-learn's saga is stopped after {SAGA_EPOCHS} epochs.")
    if ran & {"Vowpal Wabbit, online pass", "Vowpal Wabbit, online then BFGS"}:
        notes.append("Vowpal Wabbit runs its command line in one process (`vowpalwabbit.Workspace`, its text input "
                     "written beforehand): one online pass with its defaults, then "
                     f"`--bfgs --passes {VW_BFGS_PASSES}` from that pass's weights with `--l2 = n l2` (its BFGS "
                     "sums the log-loss); it also penalises its constant, which shares the hashed table with the "
                     "columns, so only its held-out log-loss (from its own predictions) compares.")
    if "Downpour FTRL" in ran:
        notes.append("Downpour FTRL minimises no l2 objective: only its held-out log-loss compares.")
    if UNCUT in ran:
        notes.append(f"\"{UNCUT}\" is Sandblaster with every vector as long as the model, as it ran before it "
                     "optimised only the parameters the rows can move (docs/algorithms.md §13).")
    lines += ["", " ".join(notes), ""]
    lines += render_timeline(out) + render_targets(out)
    wide = out.get("wide")
    if wide:
        lines += [f"## The coordinator at {wide['features']:,} features (sharded state)", "",
                  f"Sandblaster with `state=\"sharded\"` on `ctr` {wide['rows']:,} x {wide['features']:,} "
                  f"({WIDE_ITERATIONS} iterations; a parameter vector is {wide['features'] * 8 / 2**20:,.0f} MiB), "
                  f"measured by `{wide.get('command', out['command'])}`. The coordinator's peak through the "
                  "iterations is read at each iteration's metrics event while the solver runs; gathering "
                  "`result.x` and `result.jac` at the end (the user's result) adds two parameter vectors and a "
                  "copy while they are joined.", ""]
        if "seconds" in wide:
            lines += ["| coordinator peak through the iterations MiB | coordinator peak with the result MiB | "
                      "largest worker peak MiB | seconds |", "|---|---|---|---|",
                      f"| {wide['coordinator_peak_through_iterations_mib']:.0f} | {wide['peak_rss_mib']:.0f} | "
                      f"{wide['other_peak_rss_mib']:.0f} | {wide['seconds']:.1f} |", ""]
        else:
            lines += [f"Failed: {wide.get('failed', wide.get('skipped'))}", ""]
    if out.get("curves"):
        lines += render_curves(out["curves"])
    return "\n".join(lines)


if __name__ == "__main__":
    main()
