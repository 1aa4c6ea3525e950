"""Sandblaster's online-then-batch on wide sparse data: L-BFGS from zeros against L-BFGS
after ``online_passes`` passes of Adagrad over the shards (each shard's own, averaged), at a
few online learning rates, all in one run.

    python -m benchmarks.online_start                  # ctr 200,000 x 4,194,304, l2 = 1e-4
    python -m benchmarks.online_start --rows 50000 --features 262144   # a quick look

Each configuration is one fit on the same LocalCluster of 2 workers x 1 thread, default
tolerances; the held-out log-loss is on the recipe's test rows. The online start's own
held-out log-loss is measured on the averaged point before L-BFGS (a fit with
``maxiter=1`` would move it).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

import numpy as np

from benchmarks._common import HERE, machine, publish, report_header
from benchmarks.ctr import L2, logistic, open_data

#: (online passes, online learning rate) of each fit, plain L-BFGS first
CONFIGS = ((0, None), (1, 0.02), (1, 0.05), (1, 0.1), (2, 0.05))


def _online_point(client: Any, model: Any, train: Any, passes: int, rate: float) -> np.ndarray:
    """The averaged point of ``passes`` online passes alone (what L-BFGS then starts from)."""
    from dasklbfgs.models.online_pass import averaged
    from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
    from dasklbfgs.solvers.sandblaster.shard_passes import online_pass_by_shard

    evaluator = MegaBatchEvaluator(client, model, train)
    try:
        x = np.zeros(model.n_params)
        for number in range(passes):
            x = averaged(x, online_pass_by_shard(evaluator, x, rate, number))
        return x
    finally:
        evaluator.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=2**22)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.online_start",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from dasklbfgs import connect, evaluate, sandblaster_lbfgs

    train, test = open_data(HERE / "out", args.rows, args.features)
    model = logistic(train)
    fits = []
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        for passes, rate in CONFIGS:
            options = {"online_passes": passes, **({"online_learning_rate": rate} if rate else {})}
            started = time.perf_counter()
            result = sandblaster_lbfgs(model, train, client=client, **options)
            seconds = time.perf_counter() - started
            held_out = evaluate(model, result.x, test, client=client, metrics=["log_loss"])["log_loss"]
            online = result.stats.get("online") or {}
            start_held_out = None
            if passes:
                point = _online_point(client, model, train, passes, rate)
                start_held_out = evaluate(model, point, test, client=client, metrics=["log_loss"])["log_loss"]
            fits.append({"passes": passes, "rate": rate, "seconds": seconds, "iterations": result.nit,
                         "evaluations": result.nfev, "fun": result.fun, "held_out": held_out,
                         "online_seconds": online.get("seconds"), "start_held_out": start_held_out,
                         "eval_seconds": result.stats["eval_seconds_median"]})
            print(fits[-1], flush=True)
    best = min(fit["fun"] for fit in fits)
    out = {"command": command, "machine": machine(), "rows": train.n_samples, "features": train.n_features,
           "l2": L2, "fits": fits, "best": best}
    publish("online_start", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("Online, then batch: Sandblaster's warm start on wide sparse data", out["command"],
                          out["machine"])
    plain = out["fits"][0]
    lines += [
        f"Data: the `ctr` recipe, {out['rows']:,} training rows x {out['features']:,} hashed columns; logistic "
        f"regression, l2 = {out['l2']:g}; a LocalCluster of 2 workers x 1 thread, default tolerances, one fit each. "
        "f* is the lowest objective of the fits.", "",
        "| online passes | online rate | seconds | against plain | online seconds | held-out log-loss of the "
        "online start | iterations | evaluations | objective - f* (relative) | held-out log-loss |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fit in out["fits"]:
        start = "" if fit["start_held_out"] is None else f"{fit['start_held_out']:.5f}"
        online_seconds = "" if fit["online_seconds"] is None else f"{fit['online_seconds']:.2f}"
        gap = (fit["fun"] - out["best"]) / abs(out["best"])
        lines.append(f"| {fit['passes']} | {fit['rate'] or ''} | {fit['seconds']:.1f} | "
                     f"{fit['seconds'] / plain['seconds']:.2f}x | {online_seconds} | {start} | {fit['iterations']} | "
                     f"{fit['evaluations']} | {gap:.1e} | {fit['held_out']:.5f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
