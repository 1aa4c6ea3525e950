"""Scoring by the workers: predictions to Zarr, evaluation after a fit, exact distributed AUC.

    python -m benchmarks.scoring                      # 1,000,000 x 100 logistic rows, 10 shards
    python -m benchmarks.scoring --rows 200000        # smaller

Measured in one run, on a LocalCluster of 2 workers (one thread each), each figure the
median of ``--repeats`` rounds:

- ``dasklbfgs.predict(..., output=zarr, kind="proba")`` against the work it cannot avoid,
  each alone: one read pass of X by the workers (a task per shard) plus the write of the
  predictions (a task per shard writing an array of that shape into a store chunked the
  same way); against dask-ml's ``ParallelPostFit(...).predict_proba`` over the dataset's
  dask array then ``da.to_zarr``, and scikit-learn's ``predict_proba`` in one process on the
  rows already in memory (the read into memory timed apart);
- the training set's metrics at the end of a Sandblaster fit (``score=True``: on the
  shards it cached; the median of ``--repeats`` fits, the workers' imports of the scoring
  code done before the first, as a fit's median leaves out its first evaluation) and by
  ``dasklbfgs.evaluate`` after it (from the store), against one of the fit's own
  evaluations (its median), and against the same figures computed in the client, shard
  after shard (the way every report scored before);
- the exact ROC AUC of ``--auc-rows`` scores (with ties) in 10 shards, from each shard's
  sorted score counts finished in their parts of the score range (here, one after another), against
  ``sklearn.metrics.roc_auc_score`` on the whole array.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import HERE, machine, median_seconds, publish, report_header


def _read_pass(client: Any, data: Any) -> None:
    import dask

    def rows_of(index: int) -> int:
        X, _ = data.load_shard(index)
        return int(X.shape[0])

    client.compute([dask.delayed(rows_of, pure=False)(i) for i in range(data.n_shards)], sync=True)


def _write_alone(client: Any, data: Any, where: Path) -> None:
    """The predictions' write, without the model: an array of their shape, a task per shard."""
    import dask
    import zarr

    shutil.rmtree(where, ignore_errors=True)
    zarr.create_array(str(where), shape=(data.n_samples, 2), chunks=(data.shard_rows, 2), dtype=np.float64)

    def write(start: int, stop: int) -> int:
        array = zarr.open_array(str(where), mode="r+")
        array[start:stop] = np.full((stop - start, 2), 0.5) + np.arange(stop - start)[:, None] * 1e-9
        return stop - start

    client.compute([dask.delayed(write, pure=False)(a, b) for a, b in data.shard_bounds], sync=True)


def _import_scoring() -> None:
    import scipy.special  # noqa: F401

    import dasklbfgs.scoring.evaluation  # noqa: F401


def _sklearn_estimator(model: Any, x: np.ndarray) -> Any:
    from sklearn.linear_model import LogisticRegression

    W, b = model.unpack(x)
    estimator = LogisticRegression()
    estimator.classes_ = np.array([0, 1])
    estimator.coef_ = np.asarray(W, dtype=np.float64).reshape(1, -1)
    estimator.intercept_ = np.asarray(b, dtype=np.float64).reshape(1)
    estimator.n_features_in_ = model.n_features
    return estimator


def auc_round(rows: int, seed: int = 0) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    from dasklbfgs.scoring.evaluation import merged_in_a_tree
    from dasklbfgs.scoring.ranking import ScoreCounts

    rng = np.random.default_rng(seed)
    scores = np.round(rng.random(rows), 5)  # 100,001 distinct values: many ties
    positive = rng.random(rows) < scores
    weight = np.ones(rows)
    started = time.perf_counter()
    parts = [ScoreCounts.of(s, p, w) for s, p, w in zip(np.array_split(scores, 10), np.array_split(positive, 10),
                                                           np.array_split(weight, 10))]
    ours = merged_in_a_tree(parts, lambda a, b: a.merge(b)).roc_auc()
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    theirs = roc_auc_score(positive, scores)
    return {"rows": rows, "ours_seconds": ours_seconds, "sklearn_seconds": time.perf_counter() - started,
            "ours": ours, "sklearn": theirs, "difference": abs(ours - theirs)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=100_000)
    parser.add_argument("--auc-rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.scoring", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])

    import dask.array as da
    from dask_ml.wrappers import ParallelPostFit

    from dasklbfgs import ShardedDataset, connect, evaluate, make_dataset, predict, sandblaster_lbfgs
    from dasklbfgs.models import Logistic
    from dasklbfgs.scoring.evaluation import evaluated
    from dasklbfgs.scoring.summaries import METRICS

    root = args.data_dir / f"scoring-{args.rows}x{args.features}"
    if not (root / "train").exists():
        make_dataset("logistic", root, rows=args.rows, features=args.features, shard_rows=args.shard_rows,
                     test_fraction=0.0, seed=0, overwrite=True)
    data = ShardedDataset.open(root / "train")
    model = Logistic(data.n_features, l2=1e-4)
    out: dict[str, Any] = {"command": command, "machine": machine(), "rows": data.n_samples,
                           "features": data.n_features, "shards": data.n_shards,
                           "stored_mb": data.nbytes_stored() / 1e6}
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        client.run(_import_scoring)  # once per worker process, as the fit's median leaves out its first evaluation
        fits = [sandblaster_lbfgs(model, data, client=client, maxiter=20, score=True) for _ in range(args.repeats)]
        result = fits[-1]
        x = result.x
        fit_eval = float(np.median([fit.stats["eval_seconds_median"] for fit in fits]))
        in_the_fit = float(np.median([fit.stats["score_seconds"] for fit in fits]))  # on the shards each fit cached
        after_fit = median_seconds(lambda: evaluate(model, x, data, client=client), args.repeats, warmup=0)
        in_client = median_seconds(lambda: evaluated(model, x, data, METRICS["classification"], client=None), 1,
                                   warmup=0)
        target = args.data_dir / "scoring-predictions"
        predicting = median_seconds(lambda: predict(model, x, data, output=target, kind="proba", client=client,
                                             overwrite=True), args.repeats, warmup=0)
        reading = median_seconds(lambda: _read_pass(client, data), args.repeats, warmup=0)
        alone = args.data_dir / "scoring-write-alone"
        writing = median_seconds(lambda: _write_alone(client, data, alone), args.repeats, warmup=0)
        wrapped = ParallelPostFit(_sklearn_estimator(model, x))
        dask_ml_target = args.data_dir / "scoring-dask-ml"
        dask_ml = median_seconds(lambda: da.to_zarr(wrapped.predict_proba(data.to_dask()[0]), str(dask_ml_target),
                                             overwrite=True), args.repeats, warmup=0)
        ours = np.asarray(predict(model, x, data, kind="proba").compute())
    started = time.perf_counter()
    X, _ = data.load_rows(0, data.n_samples)
    load = time.perf_counter() - started
    estimator = _sklearn_estimator(model, x)
    in_process = median_seconds(lambda: estimator.predict_proba(X), args.repeats, warmup=0)
    out["agree"] = float(np.abs(estimator.predict_proba(X) - ours).max())
    out["predict"] = {"ours": predicting, "read_pass": reading, "write_alone": writing, "dask_ml": dask_ml,
                      "sklearn_in_process": in_process, "sklearn_load": load}
    out["evaluate"] = {"in_the_fit": in_the_fit, "after_fit": after_fit, "fit_evaluation": fit_eval,
                       "in_client": in_client,
                       "fit_iterations": result.nit}
    out["auc"] = auc_round(args.auc_rows)
    for path in (args.data_dir / "scoring-predictions", args.data_dir / "scoring-write-alone", dask_ml_target):
        shutil.rmtree(path, ignore_errors=True)
    publish("scoring", out, render)


def render(out: dict[str, Any]) -> str:
    p, e, a = out["predict"], out["evaluate"], out["auc"]
    floor = p["read_pass"] + p["write_alone"]
    lines = report_header("Scoring by the workers", out["command"], out["machine"])
    lines += [
        f"Data: logistic {out['rows']:,} x {out['features']} float64, {out['shards']} shards "
        f"({out['stored_mb']:.0f} MB stored); a LocalCluster of 2 workers x 1 thread. Medians of the rounds.", "",
        "**Predictions of P(y=1), written as Zarr** (seconds):", "",
        "| | seconds | against read + write alone |", "|---|---:|---:|",
        f"| `dasklbfgs.predict(..., output=..., kind=\"proba\")` | {p['ours']:.2f} | {p['ours'] / floor:.2f}x |",
        f"| one read pass of X by the workers, alone | {p['read_pass']:.2f} | |",
        f"| the write of the predictions, alone | {p['write_alone']:.2f} | |",
        f"| dask-ml `ParallelPostFit.predict_proba` + `da.to_zarr` | {p['dask_ml']:.2f} | "
        f"{p['dask_ml'] / floor:.2f}x |",
        f"| scikit-learn `predict_proba` in one process (rows in memory; reading them took "
        f"{p['sklearn_load']:.2f} s) | {p['sklearn_in_process']:.2f} | |", "",
        f"Target <= 1.5x: {p['ours'] / floor:.2f}x. The predictions equal scikit-learn's to "
        f"{out['agree']:.1e}.", "",
        "**Evaluation of the training set after a Sandblaster fit** (every classification metric; seconds):", "",
        "| | seconds | against one of the fit's evaluations |", "|---|---:|---:|",
        f"| `score=True`: by the workers, on the shards the fit cached | {e['in_the_fit']:.2f} | "
        f"{e['in_the_fit'] / e['fit_evaluation']:.2f}x |",
        f"| `dasklbfgs.evaluate` after the fit, by the workers, from the store | {e['after_fit']:.2f} | "
        f"{e['after_fit'] / e['fit_evaluation']:.2f}x |",
        f"| the same in the client, shard after shard (the reports' way before) | {e['in_client']:.2f} | "
        f"{e['in_client'] / e['fit_evaluation']:.2f}x |",
        f"| one evaluation of the fit (median of {e['fit_iterations']} iterations', shards cached; median of the "
        "fits) | "
        f"{e['fit_evaluation']:.2f} | 1.00x |", "",
        f"Target <= 2x: {e['in_the_fit'] / e['fit_evaluation']:.2f}x (`score=True`, what `dasklbfgs train`, "
        "`run` and `demo` use). `evaluate` after the fit reads the shards from the store again (the cache is "
        "released with the fit).", "",
        f"**Exact ROC AUC of {a['rows']:,} scores** (rounded to 5 decimals: ties), 10 shards:", "",
        "| | seconds | AUC |", "|---|---:|---:|",
        f"| sorted score counts per shard, finished in parts | {a['ours_seconds']:.2f} | {a['ours']:.15f} |",
        f"| `sklearn.metrics.roc_auc_score`, one array | {a['sklearn_seconds']:.2f} | {a['sklearn']:.15f} |", "",
        f"Difference {a['difference']:.1e}.", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
