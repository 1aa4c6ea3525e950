"""Poisson and Tweedie regression on 1e6 x 100 claim counts: dasklbfgs against glum,
scikit-learn, statsmodels (IRLS) and H2O, to the same optimum, in one run.

    python -m benchmarks.glm                      # the `counts` recipe, 1,000,000 x 100
    python -m benchmarks.glm --rows 100000        # a quick look

Data: the ``counts`` recipe (dense, Poisson counts of mean about 0.25 a row: claim
frequencies; 10% held out). Objective for every method: the mean half deviance of the family
with the log link and an intercept, no penalty (the maximum-likelihood fit statsmodels' IRLS
computes): Poisson, then Tweedie with power 1.5 on the same counts.

- **dasklbfgs**: ``dasklbfgs.minimize(Poisson(d) or Tweedie(d, power=1.5), train)``,
  Sandblaster L-BFGS on a 2-worker embedded cluster from the stored dataset, loading
  included, ``gtol=1e-6``;
- **glum**: ``GeneralizedLinearRegressor(family=..., alpha=0)`` (its IRLS with a Cholesky solve);
- **scikit-learn**: ``PoissonRegressor`` / ``TweedieRegressor(link="log")`` with ``alpha=0``,
  ``solver="lbfgs"`` and ``solver="newton-cholesky"``;
- **statsmodels**: ``GLM(y, X, family=Poisson() / Tweedie(var_power=1.5)).fit()`` (IRLS);
- **H2O**: ``H2OGeneralizedLinearEstimator(family=..., lambda_=0)`` on a local H2O started by
  the benchmark with 2 threads, when the ``h2o`` package is installed (its time excludes
  uploading the rows to H2O).

The in-process methods get the rows in memory (reading them is not counted) and run on the
same 2 cores. Every method's coefficients are scored with the objective in numpy on the
training rows, against the lowest any method reached.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks._common import OUT, machine, publish, report_header

FAMILIES = {"poisson": 1.0, "tweedie 1.5": 1.5}


def _data(rows: int, features: int) -> tuple[Any, Any]:
    from dasklbfgs import ShardedDataset, make_dataset

    root = OUT / "out" / f"glm-{rows}x{features}"
    if not (root / "test").exists():
        make_dataset("counts", root, rows=rows, features=features, test_fraction=0.1, seed=0, overwrite=True)
    return ShardedDataset.open(root / "train"), ShardedDataset.open(root / "test")


def objective(X: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float, power: float) -> float:
    """The mean half deviance less what depends on y alone (dasklbfgs's loss), in numpy."""
    from dasklbfgs.models._kernels import tweedie_link

    return tweedie_link(X @ coef + intercept, y, power=power)[0] / len(y)


def _timed(fit: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fit()
    return time.perf_counter() - started, out


def _in_process(X: np.ndarray, y: np.ndarray, power: float) -> dict[str, dict[str, Any]]:
    from glum import GeneralizedLinearRegressor, TweedieDistribution
    from sklearn.linear_model import PoissonRegressor, TweedieRegressor

    def sklearn(solver: str) -> Any:
        if power == 1.0:
            return PoissonRegressor(alpha=0.0, solver=solver, tol=1e-8, max_iter=1000)
        return TweedieRegressor(power=power, link="log", alpha=0.0, solver=solver, tol=1e-8, max_iter=1000)

    family = "poisson" if power == 1.0 else f"tweedie ({power})"
    glum = GeneralizedLinearRegressor(family="poisson" if power == 1.0 else TweedieDistribution(power), alpha=0.0,
                                      gradient_tol=1e-8)
    methods = {}
    for name, model in (("glum (IRLS)", glum), ("scikit-learn lbfgs", sklearn("lbfgs")),
                        ("scikit-learn newton-cholesky", sklearn("newton-cholesky"))):
        seconds, fitted = _timed(lambda model=model: model.fit(X, y))
        methods[name] = {"seconds": seconds, "coef": np.ravel(fitted.coef_), "intercept": float(fitted.intercept_)}
        print(f"{family} {name}: {seconds:.1f} s", flush=True)
    try:
        import statsmodels.api as sm
    except ImportError:
        print("statsmodels is not installed: its row is left out", flush=True)
    else:
        family_of = sm.families.Poisson() if power == 1.0 else sm.families.Tweedie(var_power=power,
                                                                                   link=sm.families.links.Log())
        seconds, fitted = _timed(lambda: sm.GLM(y, sm.add_constant(X, prepend=False), family=family_of).fit())
        methods["statsmodels (IRLS)"] = {"seconds": seconds, "coef": np.asarray(fitted.params[:-1]),
                                         "intercept": float(fitted.params[-1])}
        print(f"{family} statsmodels: {seconds:.1f} s", flush=True)
    return methods


@contextlib.contextmanager
def _h2o() -> Iterator[Callable[[np.ndarray, np.ndarray, float], dict[str, Any]] | None]:
    """A local H2O (2 threads, on 127.0.0.1) for the run, shut down after it, and the fit to
    run on it; None when the ``h2o`` package is not installed."""
    try:
        import h2o
        from h2o.estimators import H2OGeneralizedLinearEstimator
    except ImportError:
        print("h2o is not installed: its row is left out", flush=True)
        yield None
        return

    frames: dict[int, Any] = {}  # the rows uploaded once, for every family

    def fit(X: np.ndarray, y: np.ndarray, power: float) -> dict[str, Any]:
        if id(X) not in frames:
            frames[id(X)] = h2o.H2OFrame(np.column_stack([X, y]),
                                         column_names=[*(f"x{j}" for j in range(X.shape[1])), "y"])
        frame = frames[id(X)]
        options = {"family": "poisson"} if power == 1.0 else {"family": "tweedie", "tweedie_variance_power": power,
                                                               "tweedie_link_power": 0}
        model = H2OGeneralizedLinearEstimator(lambda_=0.0, standardize=False, **options)
        seconds, _ = _timed(lambda: model.train(x=frame.columns[:-1], y="y", training_frame=frame))
        coefficients = model.coef()
        print(f"h2o power {power}: {seconds:.1f} s", flush=True)
        return {"seconds": seconds, "coef": np.array([coefficients[f"x{j}"] for j in range(X.shape[1])]),
                "intercept": float(coefficients["Intercept"])}

    h2o.init(nthreads=2, max_mem_size="8G", ip="127.0.0.1", verbose=False)
    try:
        yield fit
    finally:
        h2o.cluster().shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.glm", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from dasklbfgs import connect, minimize
    from dasklbfgs.models import Poisson, Tweedie

    train, _ = _data(args.rows, args.features)
    d = train.n_features
    ours: dict[float, dict[str, Any]] = {}
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        for power in FAMILIES.values():
            model = Poisson(d) if power == 1.0 else Tweedie(d, power=power)
            seconds, result = _timed(lambda model=model: minimize(model, train, client=client, gtol=1e-6))
            ours[power] = {"seconds": seconds, "coef": result.x[:d], "intercept": float(result.x[d]),
                           "iterations": int(result.nit), "evaluations": int(result.nfev),
                           "load_seconds": float(result.stats.get("load_seconds", 0.0))}
            print(f"dasklbfgs power {power}: {seconds:.1f} s, {result.nit} iterations", flush=True)
    X, y = (np.asarray(a, dtype=np.float64) for a in train.load_rows(0, train.n_samples))
    families: dict[str, dict[str, dict[str, Any]]] = {}
    for name, power in FAMILIES.items():
        families[name] = {"dasklbfgs (Sandblaster L-BFGS, 2 workers)": ours[power], **_in_process(X, y, power)}
    with _h2o() as h2o_fit:
        for name, power in FAMILIES.items():
            if h2o_fit is not None:
                families[name]["H2O (IRLSM, 2 threads)"] = h2o_fit(X, y, power)
    for name, methods in families.items():
        power = FAMILIES[name]
        for method in methods.values():
            method["objective"] = objective(X, y, np.asarray(method.pop("coef")), method.pop("intercept"), power)
        best = min(m["objective"] for m in methods.values())
        for method in methods.values():
            method["gap"] = (method["objective"] - best) / abs(best)
    out = {"command": command, "machine": machine(), "rows": train.n_samples, "features": d,
           "mean_count": float(y.mean()), "families": families}
    publish("glm", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("Poisson and Tweedie regression on claim counts", out["command"], out["machine"])
    lines += [
        f"Data: the `counts` recipe, {out['rows']:,} training rows x {out['features']} features (dense), mean count "
        f"{out['mean_count']:.3f}. Objective: the mean half deviance with the log link, an intercept, no penalty. "
        "dasklbfgs on 2 workers x 1 thread from the stored dataset (loading included); the others in this process "
        "on the rows in memory (reading them not counted), on the same 2 cores.",
    ]
    for family, methods in out["families"].items():
        ours = methods["dasklbfgs (Sandblaster L-BFGS, 2 workers)"]["seconds"]
        lines += ["", f"### {family}", "",
                  "| method | seconds | of dasklbfgs | objective gap (relative) |", "|---|---:|---:|---:|"]
        for name, m in methods.items():
            lines.append(f"| {name} | {m['seconds']:.1f} | {m['seconds'] / ours:.2f}x | {m['gap']:.1e} |")
        first = methods["dasklbfgs (Sandblaster L-BFGS, 2 workers)"]
        if "load_seconds" in first:
            lines += ["", f"dasklbfgs: {first['iterations']} iterations, {first['evaluations']} evaluations; of its "
                          f"{first['seconds']:.1f} s, {first['load_seconds']:.1f} s loading the shards from the store "
                          "into the workers (the others' rows were in memory before their clocks started)."]
    lines += ["", "The gap is against the lowest objective any method reached on the training rows."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
