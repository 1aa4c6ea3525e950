"""Sandblaster L-BFGS against the memory-bandwidth limit, in-process numpy, scipy and dask-glm.

    python -m benchmarks.sandblaster                       # 1,000,000 x 100, as recorded
    python -m benchmarks.sandblaster --rows 100000         # a quick look

Everything is measured in one run on one machine, and reported as ratios of medians over
repeats, because the machines we share are noisy. Writes ``benchmarks/results/sandblaster.json``
and ``benchmarks/RESULTS-sandblaster.md``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from threadpoolctl import threadpool_limits

from benchmarks import evaluation_costs
from benchmarks._common import HERE, codec_name, machine, median_seconds, stored_codec, write_report, write_result
from dasklbfgs import ShardedDataset, connect
from dasklbfgs.data._shard_format import DEFAULT_CODEC
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.models import Logistic
from dasklbfgs.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs

PLAIN_MAXITER = 3000


def naive_objective(X, y, l2):
    """Logistic loss and gradient as a user writes them in numpy: two full passes over X."""
    n = X.shape[0]

    def f(w):
        z = X @ w
        loss = np.logaddexp(0.0, z).sum() - y @ z
        g = X.T @ (expit(z) - y)
        return loss / n + 0.5 * l2 * (w @ w), g / n + l2 * w

    return f


def dataset(path: Path, rows: int, features: int, shard_rows: int, ill: bool = False) -> ShardedDataset:
    """The logistic data at ``path``, written again unless it has this shape and the writer's
    current default codec (the shard load is measured with the default)."""
    try:
        ds = ShardedDataset.open(path)
        if (ds.n_samples, ds.n_features, ds.shard_rows) == (rows, features, shard_rows) and \
                stored_codec(ds) == codec_name(DEFAULT_CODEC):
            return ds
    except Exception:
        pass
    problem = SyntheticProblem("logistic", n_features=features, seed=0, ill_conditioned=ill)
    return ShardedDataset.from_blocks(path, problem.blocks(rows), shard_rows=shard_rows, overwrite=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--shard-rows", type=int, default=125_000)
    parser.add_argument("--l2", type=float, default=1e-4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--skip-dask-glm", action="store_true")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.sandblaster",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])

    data = dataset(args.data_dir / f"logistic-{args.rows}x{args.features}", args.rows, args.features, args.shard_rows,
                   False)
    X, y = data.load_rows(0, data.n_samples)
    y = y.astype(np.float64)
    d = X.shape[1]
    model = Logistic(d, l2=args.l2, fit_intercept=False)
    rng = np.random.default_rng(1)
    w = rng.normal(scale=0.1, size=d)
    v = np.ones(d)
    out: dict = {"command": command, "machine": machine(), "rows": args.rows, "features": d,
                 "workers": args.workers, "repeats": args.repeats}

    # 1. The kernel against one read pass of X, one thread each (a worker has one thread).
    with threadpool_limits(1):
        read = median_seconds(lambda: X @ v, args.repeats)
        kernel = median_seconds(lambda: model.loss_grad_sum(w, X, y), args.repeats)
        naive_1 = median_seconds(lambda: naive_objective(X, y, args.l2)(w), args.repeats)
    naive_all = median_seconds(lambda: naive_objective(X, y, args.l2)(w), args.repeats)
    out["kernel"] = {
        "read_pass_s": read, "blocked_eval_s": kernel, "naive_eval_1thread_s": naive_1,
        "naive_eval_all_threads_s": naive_all,
        "blocked_over_read": kernel / read, "naive_over_read": naive_1 / read,
    }

    with connect(n_workers=args.workers, dashboard_address=None) as client:
        client.wait_for_workers(args.workers)
        # 2. One Sandblaster evaluation (broadcast, portions, reduction) on cached shards.
        evaluator = MegaBatchEvaluator(client, model, data)
        points = [rng.normal(scale=0.1, size=d) for _ in range(args.repeats + 1)]
        it = iter(points)
        per_eval = median_seconds(lambda: evaluator.evaluate(next(it)), args.repeats)
        parts = evaluation_costs.breakdown(client, evaluator, [rng.normal(scale=0.1, size=d)
                                                                for _ in range(args.repeats)])
        evaluator.close()
        out["evaluation"] = {
            "sandblaster_eval_s": per_eval,
            "portions": len(evaluator.portions),
            "shard_load_s": evaluator.stats.load_seconds,
            "over_naive_all_threads": per_eval / naive_all,
            "over_naive_1thread": per_eval / naive_1,
            "over_read_pass": per_eval / read,
            "breakdown": parts,
            "fixed": evaluation_costs.fixed_costs(client, args.data_dir),
        }

        # 3. Time to the optimum: scipy in-process, Sandblaster, dask-glm on the same cluster.
        t0 = time.perf_counter()
        ref = minimize(naive_objective(X, y, args.l2), np.zeros(d), jac=True, method="L-BFGS-B")
        scipy_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ours = sandblaster_lbfgs(model, data, client=client, maxiter=1000)
        ours_s = time.perf_counter() - t0
        out["to_optimum"] = {
            "scipy": {"seconds": scipy_s, "fun": ref.fun, "nit": int(ref.nit), "nfev": int(ref.nfev)},
            "sandblaster": {"seconds": ours_s, "fun": ours.fun, "nit": ours.nit, "nfev": ours.nfev,
                            "fun_minus_scipy": ours.fun - ref.fun,
                            "shard_load_s": ours.stats["load_seconds"]},
            "scipy_over_sandblaster": scipy_s / ours_s,
            "scipy_over_sandblaster_cached": scipy_s / (ours_s - ours.stats["load_seconds"]),
        }
        if not args.skip_dask_glm:
            glm = out["to_optimum"]["dask_glm"] = run_dask_glm(client, data, args.l2, ours.fun)
            if "seconds" in glm:
                out["to_optimum"]["dask_glm_over_sandblaster"] = glm["seconds"] / ours_s
                out["to_optimum"]["dask_glm_over_sandblaster_cached"] = (
                    glm["seconds"] / (ours_s - ours.stats["load_seconds"]))

    # 4. Standardisation on badly scaled features (a smaller problem: plain L-BFGS is slow there).
    ill_rows = min(args.rows, 100_000)
    ill = dataset(args.data_dir / f"logistic-ill-{ill_rows}x{args.features}", ill_rows, args.features,
                  min(args.shard_rows, ill_rows), True)
    ill_model = Logistic(d, l2=args.l2)
    with connect(n_workers=args.workers, dashboard_address=None) as client:
        plain = sandblaster_lbfgs(ill_model, ill, client=client, maxiter=PLAIN_MAXITER)
        scaled = sandblaster_lbfgs(ill_model, ill, client=client, maxiter=20000, standardize=True)
    out["standardize"] = {
        "rows": ill_rows, "plain_nit": plain.nit, "standardized_nit": scaled.nit,
        "plain_fun": plain.fun, "standardized_fun": scaled.fun,
        "iteration_ratio": plain.nit / scaled.nit, "plain_hit_limit": not plain.success,
    }

    write_result("sandblaster", out)
    report = render(out)
    write_report("sandblaster", report)
    print(report)


def run_dask_glm(client, data, l2, target):
    try:
        import dask.array as da
        from dask_glm.algorithms import lbfgs
    except ImportError:
        return {"skipped": "dask-glm is not installed (pip install -e '.[bench]')"}
    X, y = data.to_dask()
    X, y = client.persist([X, y.astype(float)])
    from distributed import wait

    wait([X, y])
    t0 = time.perf_counter()
    # dask-glm minimises sum(loss) + lamduh * ||w||^2 / 2: lamduh = n * l2 is our objective times n.
    beta = lbfgs(X, y, regularizer="l2", lamduh=data.n_samples * l2, max_iter=1000, tol=1e-5)
    seconds = time.perf_counter() - t0
    w = np.asarray(beta)
    z = (X @ w).compute()
    yy = y.compute()
    fun = (np.logaddexp(0, z).sum() - yy @ z) / data.n_samples + 0.5 * l2 * (w @ w)
    del da
    return {"seconds": seconds, "fun": float(fun), "fun_minus_sandblaster": float(fun - target)}


def render(out: dict) -> str:
    k, e, o, s = out["kernel"], out["evaluation"], out["to_optimum"], out["standardize"]
    m = out["machine"]
    lines = [
        "# Sandblaster L-BFGS benchmark",
        "",
        f"Command: `{out['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
        + ", ".join(f"{a} {b}" for a, b in m["versions"].items()),
        "",
        f"Data: logistic, {out['rows']:,} x {out['features']} float64, l2-penalised, no intercept; "
        f"{out['workers']} workers x 1 thread; medians of {out['repeats']} repeats.",
        "",
        "| measurement | seconds | ratio |",
        "|---|---:|---:|",
        f"| one read pass `X @ v` (1 thread) | {k['read_pass_s']:.4f} | 1.00 |",
        f"| blocked loss+gradient kernel (1 thread) | {k['blocked_eval_s']:.4f} | "
        f"{k['blocked_over_read']:.2f}x read pass |",
        f"| naive numpy loss+gradient (1 thread) | {k['naive_eval_1thread_s']:.4f} | "
        f"{k['naive_over_read']:.2f}x read pass |",
        f"| naive numpy loss+gradient (all threads) | {k['naive_eval_all_threads_s']:.4f} | |",
        f"| Sandblaster evaluation ({e['portions']} portions, shards cached) | {e['sandblaster_eval_s']:.4f} | "
        f"{e['sandblaster_eval_s'] / k['read_pass_s']:.2f}x read pass, {e['over_naive_1thread']:.2f}x naive 1 thread |",
    ]
    if "breakdown" in e:
        lines += evaluation_costs.render(e, k["read_pass_s"])
    lines += [
        "",
        "Time to the optimum (default tolerances, from zero):",
        "",
        "| solver | seconds | iterations | objective - scipy's |",
        "|---|---:|---:|---:|",
        f"| scipy L-BFGS-B in-process (naive numpy) | {o['scipy']['seconds']:.2f} | {o['scipy']['nit']} | 0 |",
        f"| Sandblaster L-BFGS (incl. {o['sandblaster']['shard_load_s']:.2f} s shard load) | "
        f"{o['sandblaster']['seconds']:.2f} | {o['sandblaster']['nit']} | {o['sandblaster']['fun_minus_scipy']:.1e} |",
    ]
    glm = o.get("dask_glm")
    if glm and "seconds" in glm:
        lines.append(f"| dask-glm lbfgs (same cluster, data persisted) | {glm['seconds']:.2f} | | "
                     f"{glm['fun'] - o['scipy']['fun']:.1e} |")
    elif glm:
        lines.append(f"| dask-glm lbfgs | {glm['skipped']} | | |")
    lines += [
        "",
        f"scipy time / Sandblaster time: **{o['scipy_over_sandblaster']:.2f}** including the one-time "
        f"shard load from Zarr, **{o['scipy_over_sandblaster_cached']:.2f}** with shards already cached "
        "(scipy's data is in RAM before its clock starts)."
        + (f" dask-glm time / Sandblaster time: **{o['dask_glm_over_sandblaster']:.1f}** including the load, "
           f"**{o['dask_glm_over_sandblaster_cached']:.1f}** cached "
           "(dask-glm's data was persisted before its clock started)."
           if "dask_glm_over_sandblaster" in o else ""),
        "",
        f"Standardisation on features scaled over four decades ({s['rows']:,} rows, with intercept): "
        f"{s['plain_nit']}{' (iteration limit hit)' if s['plain_hit_limit'] else ''} iterations plain, "
        f"{s['standardized_nit']} standardised "
        f"(**{s['iteration_ratio']:.1f}x** fewer); objectives {s['plain_fun']:.10f} vs {s['standardized_fun']:.10f}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
