"""5-fold LogisticRegressionCV over 10 Cs: dasklbfgs against scikit-learn's, in one run.

    python -m benchmarks.cv                        # logistic 1,000,000 x 100
    python -m benchmarks.cv --rows 100000          # a quick look

Data: the ``logistic`` recipe (dense, 10% held out). Both estimators get the same rows, the
same folds (``StratifiedKFold(5)`` on the rows in order), the same 10 Cs (1e-4 to 1e4),
``l1_ratios=(0,)``, ``scoring="neg_log_loss"``, ``tol=1e-6`` and a refit at the chosen C:

- **dasklbfgs**: ``dasklbfgs.estimators.LogisticRegressionCV`` fitted on the training
  ``ShardedDataset`` on a 2-worker embedded cluster (the shards cached once for every fold
  and C, each fold's path warm started), from the call, loading included;
- **scikit-learn**: ``sklearn.linear_model.LogisticRegressionCV(solver="lbfgs", n_jobs=2)``
  on the rows in this process's memory (reading them not counted), its folds in 2 processes:
  the same 2 cores;
- **one fit**: dasklbfgs ``LogisticRegression`` at the chosen C on the same cluster, the
  yardstick of what 51 fits cost against one.

Both chosen models are scored on the held-out rows (log-loss, accuracy), and the folds'
scores compared (the largest difference of ``scores_`` between the two).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import warnings
from typing import Any

import numpy as np

from benchmarks._common import OUT, machine, publish, report_header

GRID = {"Cs": 10, "l1_ratios": (0.0,), "scoring": "neg_log_loss", "tol": 1e-6, "use_legacy_attributes": False}


def _data(rows: int, features: int) -> tuple[Any, Any]:
    from dasklbfgs import ShardedDataset, make_dataset

    root = OUT / "out" / f"cv-{rows}x{features}"
    if not (root / "test").exists():
        make_dataset("logistic", root, rows=rows, features=features, test_fraction=0.1, seed=0, overwrite=True)
    return ShardedDataset.open(root / "train"), ShardedDataset.open(root / "test")


def _held_out(estimator: Any, X: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import accuracy_score, log_loss

    p = 1.0 / (1.0 + np.exp(-(X @ np.ravel(estimator.coef_) + float(np.ravel(estimator.intercept_)[0]))))
    return {"log_loss": float(log_loss(y, p)), "accuracy": float(accuracy_score(y, p > 0.5))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.cv", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from sklearn.linear_model import LogisticRegressionCV as SkLogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    from dasklbfgs import connect
    from dasklbfgs.estimators import LogisticRegression, LogisticRegressionCV

    train, test = _data(args.rows, args.features)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        ours = LogisticRegressionCV(cv=5, max_iter=1000, client=client, **GRID).fit(train)
        ours_seconds = time.perf_counter() - started
        print(f"dasklbfgs: {ours_seconds:.1f} s, C = {ours.C_:.4g}", flush=True)
        started = time.perf_counter()
        LogisticRegression(C=ours.C_, l1_ratio=0.0, tol=GRID["tol"], max_iter=1000, client=client).fit(train)
        one_seconds = time.perf_counter() - started
        print(f"one fit: {one_seconds:.1f} s", flush=True)
    X, y = (np.asarray(a) for a in train.load_rows(0, train.n_samples))
    X_test, y_test = (np.asarray(a) for a in test.load_rows(0, test.n_samples))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkLogisticRegressionCV(cv=StratifiedKFold(5), solver="lbfgs", n_jobs=2, max_iter=1000,
                                     **GRID).fit(X, y)
    sk_seconds = time.perf_counter() - started
    print(f"scikit-learn: {sk_seconds:.1f} s, C = {ref.C_:.4g}", flush=True)
    methods = {
        "dasklbfgs LogisticRegressionCV": {"seconds": ours_seconds, "C": float(ours.C_),
                                           "iterations": int(ours.n_iter_.sum()), **_held_out(ours, X_test, y_test)},
        "scikit-learn LogisticRegressionCV (lbfgs, n_jobs=2)": {"seconds": sk_seconds, "C": float(ref.C_),
                                                                "iterations": int(ref.n_iter_.sum()),
                                                                **_held_out(ref, X_test, y_test)},
    }
    out = {"command": command, "machine": machine(), "rows": train.n_samples, "features": train.n_features,
           "test_rows": test.n_samples, "Cs": ours.Cs_.tolist(), "one_fit_seconds": one_seconds,
           "scores_max_difference": float(np.max(np.abs(ours.scores_ - ref.scores_))),
           "mean_scores": np.mean(ours.scores_, axis=0)[0].tolist(), "methods": methods}
    publish("cv", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("5-fold LogisticRegressionCV over 10 Cs", out["command"], out["machine"])
    methods = out["methods"]
    ours = methods["dasklbfgs LogisticRegressionCV"]["seconds"]
    lines += [
        f"Data: the `logistic` recipe, {out['rows']:,} training rows x {out['features']} features (dense), "
        f"{out['test_rows']:,} held out. Both: `StratifiedKFold(5)` on the rows in order, Cs "
        f"{out['Cs'][0]:g} to {out['Cs'][-1]:g} (10), `l1_ratios=(0,)`, `scoring=\"neg_log_loss\"`, `tol=1e-6`, "
        "refit at the chosen C. dasklbfgs on 2 workers x 1 thread from the stored dataset (loading included); "
        "scikit-learn on the rows in memory (reading them not counted), `n_jobs=2`.",
        "",
        "| method | seconds | of dasklbfgs | chosen C | iterations | held-out log-loss | held-out accuracy |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in methods.items():
        lines.append(f"| {name} | {m['seconds']:.1f} | {m['seconds'] / ours:.2f}x | {m['C']:.4g} | "
                     f"{m['iterations']} | {m['log_loss']:.6f} | {m['accuracy']:.4f} |")
    lines += [
        "",
        f"One dasklbfgs fit at the chosen C on the same cluster: {out['one_fit_seconds']:.1f} s, so the 50 fold "
        f"fits and the refit cost {ours / out['one_fit_seconds']:.1f}x one fit (the folds read the store once, "
        "each fold's path warm started along the Cs). The folds' held-out scores (negated log-loss) of the two "
        f"differ by at most {out['scores_max_difference']:.1e}.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
