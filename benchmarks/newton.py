"""Sandblaster's Newton procedure on narrow GLMs against L-BFGS, statsmodels' IRLS, scikit-learn's
newton-cholesky and glum, to the same optimum, in one run.

    python -m benchmarks.newton                      # as recorded: 1,000,000 rows
    python -m benchmarks.newton --rows 100000        # a quick look

Problems (dense float64 rows, 8 shards, no penalty, an intercept):

- **logistic 50** and **logistic 200**: labels drawn from a logistic model on standard normal
  features (coefficients of size ``1 / sqrt(d)``);
- **logistic 50, ill-conditioned**: the same with the columns' scales spread over 4 decades;
- **Poisson 50 with offsets**: counts with a log-exposure offset per row.

Methods, each to a gradient tolerance of 1e-10 where it has one (statsmodels: ``tol=1e-10`` on
the deviance's change):

- **newton**: ``dasklbfgs.minimize(model, data, "newton", gtol=1e-10)`` on a LocalCluster of 2
  workers (one thread each); its passes are its evaluations (each sums the Hessian beside the
  gradient), its seconds the run's less the first loading of the shards;
- **newton, gtol 1e-12**: the same, one tolerance tighter: a gradient of 1e-10 leaves the
  coefficients about ``1e-10 / lambda_min(H)`` from the optimum (1e-9 relative here), and one
  more Newton step takes them to statsmodels' last digits;
- **sandblaster** (L-BFGS): the same cluster, ``gtol=1e-10, ftol=0``, at most 2,000 iterations;
- **scikit-learn** ``newton-cholesky`` (``C=inf``; it takes no offset: left out there),
  **statsmodels** ``GLM(...).fit()`` (IRLS) and **glum** ``GeneralizedLinearRegressor(alpha=0)``
  (IRLS with coordinate descent), in this process with the rows in memory (not counted), on the
  same 2 cores.

Every method's coefficients are compared with statsmodels' (the largest difference relative
to the largest coefficient) and scored with the objective in numpy.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import HERE, machine, publish, report_header, timed_quietly

SHARDS = 8
GTOL = 1e-10


def problems(rows: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    """The rows of each problem, in memory."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, d, family, decades in (("logistic 50", 50, "binomial", 0.0), ("logistic 200", 200, "binomial", 0.0),
                                     ("logistic 50, ill-conditioned", 50, "binomial", 4.0),
                                     ("Poisson 50 with offsets", 50, "poisson", 0.0)):
        X = rng.normal(size=(rows, d))
        coef = rng.normal(size=d) / np.sqrt(d)
        scales = 10.0 ** np.linspace(-decades / 2, decades / 2, d)
        offset = None
        if family == "binomial":
            y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-(0.2 + X @ coef)))).astype(np.float64)
        else:
            offset = np.log(rng.uniform(0.2, 1.0, size=rows))
            y = rng.poisson(np.exp(-1.0 + 0.5 * X @ coef + offset)).astype(np.float64)
        out[name] = {"X": X * scales, "y": y, "offset": offset, "family": family, "d": d}
    return out


def stored(problem: dict[str, Any], root: Path, name: str) -> Any:
    from dasklbfgs import ShardedDataset

    path = root / ("newton-" + name.replace(" ", "-").replace(",", ""))
    rows = len(problem["y"])
    if path.exists():
        data = ShardedDataset.open(path)
        if data.n_samples == rows:
            return data
    return ShardedDataset.create(path, problem["X"], problem["y"], offset=problem["offset"],
                                 shard_rows=-(-rows // SHARDS), overwrite=True)


def in_process(problem: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """statsmodels, scikit-learn and glum on the rows in memory: seconds, iterations, coefficients."""
    import statsmodels.api as sm
    from glum import GeneralizedLinearRegressor
    from sklearn.linear_model import LogisticRegression

    X, y, offset, family = problem["X"], problem["y"], problem["offset"], problem["family"]
    out: dict[str, dict[str, Any]] = {}
    sm_family = sm.families.Binomial() if family == "binomial" else sm.families.Poisson()
    seconds, fit = timed_quietly(lambda: sm.GLM(y, sm.add_constant(X, prepend=False), family=sm_family,
                                         offset=offset).fit(tol=GTOL))
    out["statsmodels"] = {"seconds": seconds, "passes": int(fit.fit_history["iteration"]),
                          "x": np.asarray(fit.params)}
    if family == "binomial":
        seconds, fit = timed_quietly(lambda: LogisticRegression(C=np.inf, solver="newton-cholesky", tol=GTOL,
                                                         max_iter=100).fit(X, y))
        out["scikit-learn"] = {"seconds": seconds, "passes": int(fit.n_iter_[0]),
                               "x": np.r_[fit.coef_.ravel(), fit.intercept_]}
    seconds, fit = timed_quietly(lambda: GeneralizedLinearRegressor(family=family, alpha=0, gradient_tol=GTOL,
                                                             max_iter=100).fit(X, y, offset=offset))
    out["glum"] = {"seconds": seconds, "passes": int(fit.n_iter_), "x": np.r_[fit.coef_, fit.intercept_]}
    return out


def on_the_cluster(client: Any, data: Any, problem: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from dasklbfgs import minimize
    from dasklbfgs.models import Logistic
    from dasklbfgs.models.glm import Poisson

    d = problem["d"]
    model = Logistic(d) if problem["family"] == "binomial" else Poisson(d)
    out = {}
    for name, solver, options in (("newton", "newton", {"gtol": GTOL}),
                                  ("newton, gtol 1e-12", "newton", {"gtol": 1e-12}),
                                  ("sandblaster", "sandblaster", {"gtol": GTOL, "ftol": 0.0, "maxiter": 2000})):
        result = minimize(model, data, solver, client=client, **options)
        stats = result.stats
        out[name] = {"seconds": stats["total_seconds"] - stats["load_seconds"], "load": stats["load_seconds"],
                     "passes": result.nfev, "x": result.x, "message": result.message}
    return out


def objective(problem: dict[str, Any], x: np.ndarray) -> float:
    from dasklbfgs.models import Logistic
    from dasklbfgs.models.glm import Poisson

    d = problem["d"]
    model = Logistic(d) if problem["family"] == "binomial" else Poisson(d)
    loss, _ = model.loss_grad_sum(x, problem["X"], problem["y"], None, problem["offset"])
    return loss / len(problem["y"])


def run(rows: int, root: Path) -> dict[str, Any]:
    from dasklbfgs import connect

    results: dict[str, Any] = {}
    made = problems(rows)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        for name, problem in made.items():
            data = stored(problem, root, name)
            methods = {**on_the_cluster(client, data, problem), **in_process(problem)}
            reference = methods["statsmodels"]["x"]
            best = min(objective(problem, m["x"]) for m in methods.values())
            for m in methods.values():
                m["relative_difference"] = float(np.max(np.abs(m["x"] - reference)) / np.max(np.abs(reference)))
                m["objective_above_best"] = objective(problem, m["x"]) - best
                m["x"] = None
            results[name] = methods
    return results


ORDER = ("newton", "newton, gtol 1e-12", "sandblaster", "scikit-learn", "statsmodels", "glum")
LABELS = {"newton": "**newton**, 2 workers", "newton, gtol 1e-12": "newton, gtol 1e-12",
          "sandblaster": "sandblaster (L-BFGS), 2 workers",
          "scikit-learn": "scikit-learn newton-cholesky", "statsmodels": "statsmodels IRLS", "glum": "glum IRLS-CD"}


def render(out: dict[str, Any]) -> str:
    lines = report_header("Newton's method on narrow GLMs", out["command"], out["machine"])
    lines += [f"{out['rows']:,} rows, {SHARDS} shards; gradient tolerance {GTOL:g}. Seconds exclude reading "
              "the rows (the in-process methods get them in memory; the cluster's first loading of the shards is "
              "the `load` column). Passes: evaluations over the data (newton's each sum the Hessian too), IRLS "
              "iterations.", ""]
    for name, methods in out["problems"].items():
        lines += [f"## {name}", "", "| method | passes | seconds | vs newton | coefficients vs statsmodels "
                  "| objective above the best |", "|---|---:|---:|---:|---:|---:|"]
        newton = methods["newton"]["seconds"]
        for method in ORDER:
            if method not in methods:
                continue
            m = methods[method]
            load = f" (+{m['load']:.2f} load)" if "load" in m else ""
            lines.append(f"| {LABELS[method]} | {m['passes']} | {m['seconds']:.2f}{load} | "
                         f"{m['seconds'] / newton:.2f}x | {m['relative_difference']:.1e} | "
                         f"{m['objective_above_best']:.1e} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out", help="where the datasets are written once")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.newton " + shlex.join(sys.argv[1:] if argv is None else argv)
    out = {"command": command.strip(), "machine": machine(), "rows": args.rows,
           "problems": run(args.rows, args.data_dir)}
    publish("newton", out, render)


if __name__ == "__main__":
    main()
