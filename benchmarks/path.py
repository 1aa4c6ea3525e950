"""An L1 regularization path: dasklbfgs against one fit, glum and scikit-learn, in one run.

    python -m benchmarks.path                                  # logistic 1,000,000 x 100, 50 penalties
    python -m benchmarks.path --recipe ctr --rows 200000 --features 4194304 --n-alphas 20 --eps 0.01
    python -m benchmarks.path --rows 100000 --sklearn-rows 20000   # a quick look

Data: the ``logistic`` recipe (dense, 10% held out), or with ``--recipe ctr`` the ``ctr``
recipe's hashed sparse rows (:mod:`benchmarks.ctr`'s data; glum, scikit-learn and the strong
rule's in-process measurement, which would hold its 2^22 columns densely or take hours, are
left out there: ``RESULTS-path-ctr.md``). Objective for every method: the mean
log-loss with an intercept plus ``alpha ||w||_1`` (glum's binomial objective with
``l1_ratio=1``; scikit-learn's with ``C = 1 / (n alpha)``). The penalties: ``n_alphas`` values
from the one that zeroes every coefficient down to ``eps`` times it, the grid
``dasklbfgs.regularization_path`` computes; every method fits exactly these.

- **dasklbfgs path**: ``regularization_path`` on a 2-worker embedded cluster (the shards
  cached once for the path, each fit warm started; held-out scores after each fit), from the
  call, loading included;
- **one fit**: Sandblaster from zeros at the smallest penalty alone, the same cluster
  (the issue's yardstick: a path should cost at most 3x it);
- **glum**: ``GeneralizedLinearRegressor(family="binomial", l1_ratio=1, alpha_search=True,
  alphas=...)`` on the rows in this process's memory (reading them not counted);
- **H2O**: ``H2OGeneralizedLinearEstimator(family="binomial", alpha=1, lambda_=the penalties)``
  on a local H2O started by the benchmark with 2 threads (when ``h2o`` is installed; uploading
  the rows not counted): its lambda path, warm started;
- **scikit-learn**: ``LogisticRegression(solver="saga", warm_start=True)`` looped over the
  same penalties, on the first ``--sklearn-rows`` rows (saga's time grows with the rows; its
  row count is in the table).

Every method's last fit is scored with the objective in numpy on its own rows, against the
lowest any method reached there. Then, in this process, the question whether the sequential
strong rule (Tibshirani et al. 2012) would save OWL-QN iterations along the same path, on the
first ``--strong-rows`` rows: screened coefficients held at zero, KKT-checked and refitted
when violated, against OWL-QN over all coefficients.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

import numpy as np

from benchmarks._common import OUT, machine, publish, report_header


def _data(recipe: str, rows: int, features: int) -> tuple[Any, Any]:
    from dasklbfgs import ShardedDataset, make_dataset

    if recipe == "ctr":
        from benchmarks.ctr import open_data

        return open_data(OUT / "out", rows, features)
    root = OUT / "out" / f"path-{rows}x{features}"
    if not (root / "test").exists():
        make_dataset("logistic", root, rows=rows, features=features, test_fraction=0.1, seed=0, overwrite=True)
    return ShardedDataset.open(root / "train"), ShardedDataset.open(root / "test")


def objective(X: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float, alpha: float) -> float:
    """Mean log-loss + alpha ||coef||_1, in numpy (every method scored the same way)."""
    z = X @ coef + intercept
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + alpha * np.abs(coef).sum())


def _glum(X: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> dict[str, Any]:
    from glum import GeneralizedLinearRegressor

    model = GeneralizedLinearRegressor(family="binomial", l1_ratio=1.0, alpha_search=True, alphas=alphas,
                                       fit_intercept=True, gradient_tol=1e-7)
    started = time.perf_counter()
    model.fit(X, y)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "coef": model.coef_, "intercept": float(model.intercept_),
            "n_nonzero": [int(np.count_nonzero(c[1:] if c.size == X.shape[1] + 1 else c))
                          for c in np.atleast_2d(model.coef_path_)]}


def _sklearn(X: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> dict[str, Any]:
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    n = X.shape[0]
    model = LogisticRegression(l1_ratio=1.0, solver="saga", warm_start=True, tol=1e-6, max_iter=1000)
    started = time.perf_counter()
    nonzero, epochs = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for alpha in alphas:
            model.set_params(C=1.0 / (n * alpha))
            model.fit(X, y)
            nonzero.append(int(np.count_nonzero(model.coef_)))
            epochs.append(int(model.n_iter_[0]))
    return {"seconds": time.perf_counter() - started, "coef": model.coef_[0], "intercept": float(model.intercept_[0]),
            "n_nonzero": nonzero, "epochs": int(np.sum(epochs))}


def _h2o(X: np.ndarray, y: np.ndarray, alphas: np.ndarray) -> dict[str, Any] | None:
    """H2O's GLM over the same penalties (``alpha=1``: the lasso; ``lambda_`` the list, each
    fit warm started from the last), on a local H2O with 2 threads; None without ``h2o``."""
    try:
        import h2o
        from h2o.estimators import H2OGeneralizedLinearEstimator
    except ImportError:
        print("h2o is not installed: its row is left out", flush=True)
        return None
    h2o.init(nthreads=2, max_mem_size="8G", ip="127.0.0.1", verbose=False)
    try:
        names = [f"x{j}" for j in range(X.shape[1])]
        frame = h2o.H2OFrame(np.column_stack([X, y]), column_names=[*names, "y"])
        frame["y"] = frame["y"].asfactor()
        model = H2OGeneralizedLinearEstimator(family="binomial", alpha=1.0, lambda_=[float(a) for a in alphas],
                                              standardize=False, objective_epsilon=1e-10, beta_epsilon=1e-8)
        started = time.perf_counter()
        model.train(x=names, y="y", training_frame=frame)
        seconds = time.perf_counter() - started
        path = H2OGeneralizedLinearEstimator.getGLMRegularizationPath(model)
        last = int(np.argmin(path["lambdas"]))
        coefficients = path["coefficients"][last]
        return {"seconds": seconds, "coef": np.array([coefficients[n] for n in names]),
                "intercept": float(coefficients["Intercept"]), "fits": len(path["lambdas"])}
    finally:
        h2o.cluster().shutdown()


def strong_rule_iterations(X: np.ndarray, y: np.ndarray, alphas: np.ndarray, alpha_max: float,
                           start: np.ndarray) -> dict[str, Any]:
    """OWL-QN iterations along the path in this process, over all coefficients and with the
    sequential strong rule (screened coefficients' l1 weight so large that OWL-QN holds them
    at zero; a fit refitted with the violators let in until the KKT conditions hold)."""
    from dasklbfgs.models import Logistic
    from dasklbfgs.optim.lbfgs import LBFGSOptions
    from dasklbfgs.optim.owlqn import owlqn_minimize

    d = X.shape[1]
    model = Logistic(d)
    options = LBFGSOptions(gtol=1e-6, maxiter=1000)
    out: dict[str, Any] = {}
    for strong in (False, True):
        x, previous = start.copy(), alpha_max
        g = model.objective(x, X, y)[1]
        iterations = refits = 0
        started = time.perf_counter()
        for alpha in alphas:
            weights = np.full(d + 1, alpha)
            weights[d] = 0.0
            kept = (np.abs(g[:d]) >= 2 * alpha - previous) | (x[:d] != 0) if strong else np.ones(d, dtype=bool)
            while True:
                held = weights.copy()
                held[:d][~kept] = 1e300
                result, state = owlqn_minimize(lambda v: model.objective(v, X, y), x, held, options)
                iterations += result.nit
                violated = ~kept & (np.abs(state.g[:d]) > alpha)
                if not violated.any():
                    break
                refits += 1
                kept |= violated
                x = result.x
            x, g, previous = result.x, state.g, alpha
        out["strong" if strong else "plain"] = {"iterations": iterations, "refits": refits,
                                                "seconds": time.perf_counter() - started}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", choices=("logistic", "ctr"), default="logistic")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--n-alphas", type=int, default=50)
    parser.add_argument("--eps", type=float, default=1e-3)
    parser.add_argument("--sklearn-rows", type=int, default=100_000)
    parser.add_argument("--strong-rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.path", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    import dasklbfgs
    from dasklbfgs import connect, sandblaster_lbfgs
    from dasklbfgs.models import Logistic

    train, test = _data(args.recipe, args.rows, args.features)
    wide = args.recipe == "ctr"
    d = train.n_features
    model = Logistic(d, l1=1.0)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        started = time.perf_counter()
        path = dasklbfgs.regularization_path(model, train, n_alphas=args.n_alphas, eps=args.eps, eval_data=test,
                                             client=client)
        path_seconds = time.perf_counter() - started
        print(f"path: {path_seconds:.1f} s, {int(path.nit.sum())} iterations", flush=True)
        started = time.perf_counter()
        one = sandblaster_lbfgs(Logistic(d, l1=float(path.alphas[-1])), train, client=client)
        one_seconds = time.perf_counter() - started
        print(f"one fit: {one_seconds:.1f} s, {one.nit} iterations", flush=True)
    X, y = train.load_rows(0, train.n_samples)
    X, y = (X if wide else np.asarray(X)), np.asarray(y, dtype=np.float64)
    alpha = float(path.alphas[-1])
    methods: dict[str, dict[str, Any]] = {
        "dasklbfgs path": {"seconds": path_seconds, "rows": train.n_samples, "coef": path.coef(-1)[:d],
                           "intercept": float(path.coef(-1)[d]), "iterations": int(path.nit.sum()),
                           "evaluations": int(path.nfev.sum()), "n_nonzero": path.n_nonzero.tolist()},
        "one fit at the smallest penalty": {"seconds": one_seconds, "rows": train.n_samples, "coef": one.x[:d],
                                            "intercept": float(one.x[d]), "iterations": int(one.nit),
                                            "evaluations": int(one.nfev)},
    }
    if not wide:
        methods["glum"] = {**_glum(X, y, path.alphas), "rows": train.n_samples}
        print(f"glum: {methods['glum']['seconds']:.1f} s", flush=True)
        rows = min(args.sklearn_rows, train.n_samples)
        methods["scikit-learn saga, warm started"] = {**_sklearn(X[:rows], y[:rows], path.alphas), "rows": rows}
        print(f"scikit-learn: {methods['scikit-learn saga, warm started']['seconds']:.1f} s", flush=True)
        found = _h2o(X, y, path.alphas)
        if found is not None:
            methods["H2O (IRLSM, the same penalties, 2 threads)"] = {**found, "rows": train.n_samples}
            print(f"h2o: {found['seconds']:.1f} s over {found['fits']} penalties", flush=True)
    best: dict[int, float] = {}
    for method in methods.values():
        n = method["rows"]
        method["objective"] = objective(X[:n], y[:n], np.asarray(method.pop("coef")), method.pop("intercept"), alpha)
        best[n] = min(best.get(n, np.inf), method["objective"])
    for method in methods.values():
        method["gap"] = (method["objective"] - best[method["rows"]]) / abs(best[method["rows"]])
    strong_n = min(args.strong_rows, train.n_samples)
    start = path.coef(0)  # the intercept-only model the path starts from
    strong = None if wide else strong_rule_iterations(X[:strong_n], y[:strong_n], path.alphas,
                                                      float(path.alpha_max), start)
    held_out = [s.get("eval_accuracy") for s in (path.scores or [])]
    out = {"command": command, "machine": machine(), "recipe": args.recipe, "rows": train.n_samples, "features": d,
           "n_alphas": args.n_alphas, "eps": args.eps, "alpha_max": path.alpha_max, "alphas": path.alphas.tolist(),
           "path_iterations": path.nit.tolist(), "path_n_nonzero": path.n_nonzero.tolist(),
           "held_out_accuracy": held_out, "methods": methods,
           "strong_rule": None if strong is None else {"rows": strong_n, **strong}}
    publish("path_ctr" if wide else "path", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("An L1 regularization path", out["command"], out["machine"])
    methods = out["methods"]
    one = methods["one fit at the smallest penalty"]["seconds"]
    recipe = out.get("recipe", "logistic")
    layout = "hashed, sparse" if recipe == "ctr" else "dense"
    lines += [
        f"Data: the `{recipe}` recipe, {out['rows']:,} training rows x {out['features']:,} features ({layout}), "
        f"{out['n_alphas']} penalties from alpha_max = {out['alpha_max']:.4g} (every coefficient zero) down to "
        f"{out['eps']:g} x it. Objective: mean log-loss + alpha ||w||_1, an unpenalised intercept. dasklbfgs on "
        "2 workers x 1 thread" + ("." if recipe == "ctr" else "; glum and scikit-learn in this process on the rows "
                                  "in memory (reading them not counted)."),
        "",
        "| method | rows | seconds | of one fit at the smallest penalty | iterations | evaluations | objective gap "
        "at the smallest penalty (relative) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in methods.items():
        lines.append(f"| {name} | {m['rows']:,} | {m['seconds']:.1f} | {m['seconds'] / one:.2f}x | "
                     f"{m.get('iterations', '')} | {m.get('evaluations', '')} | {m['gap']:.1e} |")
    nonzero = out["path_n_nonzero"]
    picks = sorted({0, len(nonzero) // 4, len(nonzero) // 2, 3 * len(nonzero) // 4, len(nonzero) - 1})
    lines += [
        "",
        "The gap is against the lowest objective any method reached on the same rows. Along the dasklbfgs path: "
        + ", ".join(f"alpha {out['alphas'][i]:.3g}: {nonzero[i]} non-zero, {out['path_iterations'][i]} iterations"
                    for i in picks) + ".",
    ]
    s = out["strong_rule"]
    if s is None:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"The sequential strong rule, in this process on {s['rows']:,} rows (OWL-QN, gtol 1e-6): "
        f"{s['plain']['iterations']} iterations over all coefficients in {s['plain']['seconds']:.1f} s, "
        f"{s['strong']['iterations']} with screening ({s['strong']['refits']} refits after KKT violations) in "
        f"{s['strong']['seconds']:.1f} s ({s['strong']['iterations'] / s['plain']['iterations']:.2f}x the "
        "iterations).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
