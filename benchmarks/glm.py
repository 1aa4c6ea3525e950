"""Poisson and Tweedie regression on 1e6 x 100 claim counts with exposure offsets: dasklbfgs
against glum, scikit-learn, statsmodels (IRLS), Spark and H2O, to the same optimum, in one
run; then the inference pass against statsmodels' summary.

    python -m benchmarks.glm                      # the `claims` recipe, 1,000,000 x 100
    python -m benchmarks.glm --rows 100000        # a quick look

Data: the ``claims`` recipe (dense: the policies' 9 features and 91 more rating factors; claim
counts of about 0.05 a policy, each policy's ``log(exposure)`` its offset; 10% held out).
Objective for every method: the mean half deviance of the family with the log link, an
intercept and the offset, no penalty (the maximum-likelihood fit statsmodels' IRLS computes):
Poisson, then Tweedie with power 1.5 on the same counts.

- **dasklbfgs**: ``dasklbfgs.minimize(Poisson(d) or Tweedie(d, power=1.5), train)``,
  Sandblaster L-BFGS on a 2-worker embedded cluster from the stored dataset (offsets stored
  with the rows), loading included, ``gtol=1e-6``;
- **glum**: ``GeneralizedLinearRegressor(family=..., alpha=0).fit(X, y, offset=o)`` (IRLS);
- **scikit-learn**: ``PoissonRegressor`` / ``TweedieRegressor(link="log")`` with ``alpha=0``,
  ``solver="lbfgs"`` and ``"newton-cholesky"``; they take no offset, so they fit the
  equivalent rate model, labels ``y / e`` weighted by ``e^(2-p)`` (``e`` the exposure: the same
  minimiser, the deviance scaled by the weights);
- **statsmodels**: ``GLM(y, X, family=..., offset=o).fit()`` (IRLS);
- **Spark**: ``pyspark.ml.regression.GeneralizedLinearRegression(family=..., offsetCol=...)``
  (IRLS), ``local[2]``, on the rows cached in Spark, when ``pyspark`` is installed;
- **H2O**: ``H2OGeneralizedLinearEstimator(family=..., lambda_=0, offset_column=...)`` on a
  local H2O started by the benchmark with 2 threads, when the ``h2o`` package is installed
  (its time excludes uploading the rows).

The in-process methods get the rows in memory (reading them is not counted) and run on the
same 2 cores. Every method's coefficients are scored with the objective in numpy on the
training rows, against the lowest any method reached. **Inference**: ``dasklbfgs.inference``
of the Poisson fit by the workers (the Fisher information summed over the shards), its
seconds and its standard errors against statsmodels' at statsmodels' own estimate.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks._common import OUT, machine, publish, report_header, timed_quietly

FAMILIES = {"poisson": 1.0, "tweedie 1.5": 1.5}


def _data(rows: int, features: int) -> tuple[Any, Any]:
    from dasklbfgs import ShardedDataset, make_dataset

    root = OUT / "out" / f"glm-claims-{rows}x{features}"
    if not (root / "test").exists():
        make_dataset("claims", root, rows=rows, features=features, test_fraction=0.1, seed=0, overwrite=True)
    return ShardedDataset.open(root / "train"), ShardedDataset.open(root / "test")


def objective(X: np.ndarray, y: np.ndarray, offset: np.ndarray, coef: np.ndarray, intercept: float,
              power: float) -> float:
    """The mean half deviance less what depends on y alone (dasklbfgs's loss), in numpy."""
    from dasklbfgs.models._kernels import tweedie_link

    return tweedie_link(X @ coef + intercept + offset, y, power=power)[0] / len(y)


def _in_process(X: np.ndarray, y: np.ndarray, offset: np.ndarray, power: float) -> dict[str, dict[str, Any]]:
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
    exposure = np.exp(offset)
    rate, rate_weight = y / exposure, exposure ** (2.0 - power)  # scikit-learn takes no offset: the rate model
    fits = {"glum (IRLS)": lambda: glum.fit(X, y, offset=offset),
            "scikit-learn lbfgs": lambda: sklearn("lbfgs").fit(X, rate, sample_weight=rate_weight),
            "scikit-learn newton-cholesky": lambda: sklearn("newton-cholesky").fit(X, rate, sample_weight=rate_weight)}
    for name, fit in fits.items():
        seconds, fitted = timed_quietly(fit)
        methods[name] = {"seconds": seconds, "coef": np.ravel(fitted.coef_), "intercept": float(fitted.intercept_)}
        print(f"{family} {name}: {seconds:.1f} s", flush=True)
    try:
        import statsmodels.api as sm
    except ImportError:
        print("statsmodels is not installed: its row is left out", flush=True)
    else:
        family_of = sm.families.Poisson() if power == 1.0 else sm.families.Tweedie(var_power=power,
                                                                                   link=sm.families.links.Log())
        seconds, fitted = timed_quietly(lambda: sm.GLM(y, sm.add_constant(X, prepend=False), family=family_of,
                                                offset=offset).fit())
        methods["statsmodels (IRLS)"] = {"seconds": seconds, "coef": np.asarray(fitted.params[:-1]),
                                         "intercept": float(fitted.params[-1]), "fitted": fitted}
        print(f"{family} statsmodels: {seconds:.1f} s", flush=True)
    return methods


@contextlib.contextmanager
def _h2o() -> Iterator[Callable[[np.ndarray, np.ndarray, np.ndarray, float], dict[str, Any]] | None]:
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

    def fit(X: np.ndarray, y: np.ndarray, offset: np.ndarray, power: float) -> dict[str, Any]:
        if id(X) not in frames:
            frames[id(X)] = h2o.H2OFrame(np.column_stack([X, y, offset]),
                                         column_names=[*(f"x{j}" for j in range(X.shape[1])), "y", "offset"])
        frame = frames[id(X)]
        options = {"family": "poisson"} if power == 1.0 else {"family": "tweedie", "tweedie_variance_power": power,
                                                               "tweedie_link_power": 0}
        model = H2OGeneralizedLinearEstimator(lambda_=0.0, standardize=False, offset_column="offset", **options)
        columns = [f"x{j}" for j in range(X.shape[1])]
        seconds, _ = timed_quietly(lambda: model.train(x=columns, y="y", training_frame=frame))
        coefficients = model.coef()
        print(f"h2o power {power}: {seconds:.1f} s", flush=True)
        return {"seconds": seconds, "coef": np.array([coefficients[f"x{j}"] for j in range(X.shape[1])]),
                "intercept": float(coefficients["Intercept"])}

    h2o.init(nthreads=2, max_mem_size="8G", ip="127.0.0.1", verbose=False)
    try:
        yield fit
    finally:
        h2o.cluster().shutdown()


@contextlib.contextmanager
def _spark(X: np.ndarray, y: np.ndarray, offset: np.ndarray
           ) -> Iterator[Callable[[float], dict[str, Any]] | None]:
    """A local Spark (``local[2]``, on 127.0.0.1) holding the rows as a cached DataFrame (written
    as Parquet and read back: not timed), and the fit to run on it; None without ``pyspark``."""
    try:
        from pyspark.ml.feature import VectorAssembler
        from pyspark.ml.regression import GeneralizedLinearRegression
        from pyspark.sql import SparkSession
    except ImportError:
        print("pyspark is not installed: its row is left out", flush=True)
        yield None
        return
    import pandas as pd

    table = OUT / "out" / f"glm-claims-{X.shape[0]}x{X.shape[1]}.parquet"
    names = [f"x{j}" for j in range(X.shape[1])]
    if not table.exists():
        pd.DataFrame({**dict(zip(names, X.T)), "y": y, "offset": offset}).to_parquet(table)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "8g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = VectorAssembler(inputCols=names, outputCol="features").transform(spark.read.parquet(str(table)))
        rows = rows.select("features", "y", "offset").cache()
        rows.count()

        def fit(power: float) -> dict[str, Any]:
            family = {"family": "poisson"} if power == 1.0 else {"family": "tweedie", "variancePower": power,
                                                                  "linkPower": 0.0}
            estimator = GeneralizedLinearRegression(labelCol="y", offsetCol="offset", regParam=0.0, maxIter=100,
                                                    tol=1e-8, solver="irls", **family)
            seconds, fitted = timed_quietly(lambda: estimator.fit(rows))
            print(f"spark power {power}: {seconds:.1f} s", flush=True)
            return {"seconds": seconds, "coef": fitted.coefficients.toArray(), "intercept": float(fitted.intercept)}

        yield fit
    finally:
        spark.stop()


def _inference(train: Any, client: Any, reference: Any) -> dict[str, Any]:
    """``dasklbfgs.inference`` of the Poisson model at statsmodels' estimate, by the workers:
    its seconds, and its standard errors and log-likelihood against statsmodels'."""
    from dasklbfgs import inference
    from dasklbfgs.models import Poisson

    params = np.asarray(reference.params)
    seconds, found = timed_quietly(lambda: inference(Poisson(train.n_features), params, train, client=client))
    return {"seconds": seconds,
            "std_err_gap": float(np.max(np.abs(found.std_err - reference.bse) / reference.bse)),
            "loglike_gap": abs(found.loglike - reference.llf) / abs(reference.llf)}


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
    X, y = (np.asarray(a, dtype=np.float64) for a in train.load_rows(0, train.n_samples))
    offset = train.load_offsets(0, train.n_samples)
    families: dict[str, dict[str, dict[str, Any]]] = {}
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        for power in FAMILIES.values():
            model = Poisson(d) if power == 1.0 else Tweedie(d, power=power)
            seconds, result = timed_quietly(lambda model=model: minimize(model, train, client=client, gtol=1e-6))
            ours[power] = {"seconds": seconds, "coef": result.x[:d], "intercept": float(result.x[d]),
                           "iterations": int(result.nit), "evaluations": int(result.nfev),
                           "load_seconds": float(result.stats.get("load_seconds", 0.0))}
            print(f"dasklbfgs power {power}: {seconds:.1f} s, {result.nit} iterations", flush=True)
        for name, power in FAMILIES.items():
            families[name] = {"dasklbfgs (Sandblaster L-BFGS, 2 workers)": ours[power],
                              **_in_process(X, y, offset, power)}
        statsmodels = families["poisson"].get("statsmodels (IRLS)")
        inferred = None if statsmodels is None else _inference(train, client, statsmodels.pop("fitted"))
        families["tweedie 1.5"].get("statsmodels (IRLS)", {}).pop("fitted", None)
    with _spark(X, y, offset) as spark_fit:
        for name, power in FAMILIES.items():
            if spark_fit is not None:
                families[name]["Spark GLR (IRLS, local[2])"] = spark_fit(power)
    with _h2o() as h2o_fit:
        for name, power in FAMILIES.items():
            if h2o_fit is not None:
                families[name]["H2O (IRLSM, 2 threads)"] = h2o_fit(X, y, offset, power)
    for name, methods in families.items():
        power = FAMILIES[name]
        for method in methods.values():
            method["objective"] = objective(X, y, offset, np.asarray(method.pop("coef")), method.pop("intercept"),
                                            power)
        best = min(m["objective"] for m in methods.values())
        for method in methods.values():
            method["gap"] = (method["objective"] - best) / abs(best)
    out = {"command": command, "machine": machine(), "rows": train.n_samples, "features": d,
           "mean_count": float(y.mean()), "mean_exposure": float(np.exp(offset).mean()), "families": families,
           "inference": inferred,
           "statsmodels_poisson_seconds": None if statsmodels is None else statsmodels["seconds"]}
    publish("glm", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("Poisson and Tweedie regression on claim counts with exposure offsets", out["command"],
                          out["machine"])
    lines += [
        f"Data: the `claims` recipe, {out['rows']:,} training rows x {out['features']} features (dense), mean count "
        f"{out['mean_count']:.3f} over a mean exposure of {out['mean_exposure']:.2f} years, `log(exposure)` the "
        "offset. Objective: the mean half deviance with the log link, an intercept and the offset, no penalty "
        "(scikit-learn, which takes no offset, fits the equivalent rate model). dasklbfgs on 2 workers x 1 thread "
        "from the stored dataset (loading included); the others on the rows in memory (reading them not counted), "
        "on the same 2 cores.",
    ]
    for family, methods in out["families"].items():
        ours = methods["dasklbfgs (Sandblaster L-BFGS, 2 workers)"]["seconds"]
        lines += ["", f"### {family}", "",
                  "| method | seconds | of dasklbfgs | objective gap (relative) |", "|---|---:|---:|---:|"]
        for name, m in methods.items():
            lines.append(f"| {name} | {m['seconds']:.1f} | {m['seconds'] / ours:.2f}x | {m['gap']:.1e} |")
        first = methods["dasklbfgs (Sandblaster L-BFGS, 2 workers)"]
        lines += ["", f"dasklbfgs: {first['iterations']} iterations, {first['evaluations']} evaluations; of its "
                      f"{first['seconds']:.1f} s, {first['load_seconds']:.1f} s loading the shards from the store "
                      "into the workers (the others' rows were in memory before their clocks started)."]
    lines += ["", "The gap is against the lowest objective any method reached on the training rows."]
    found = out.get("inference")
    if found is not None:
        lines += ["", "### Inference", "",
                  f"`dasklbfgs.inference` of the Poisson fit at statsmodels' estimate, by the workers: "
                  f"**{found['seconds']:.1f} s** (statsmodels' fit, which gives its summary, "
                  f"{out['statsmodels_poisson_seconds']:.1f} s). Standard errors within "
                  f"{found['std_err_gap']:.1e} (relative) of statsmodels', log-likelihood within "
                  f"{found['loglike_gap']:.1e}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
