"""The fixed cost of a Sandblaster iteration on small data, with and without held-out scoring.

    python -m benchmarks.iteration_costs

The shipped ``pipelines/digits-softmax.yaml`` problem (scikit-learn's digits: 1,437 training
rows, 360 held out, softmax with ``l2=3e-2``, ``standardize=True``) on a LocalCluster of 2
workers (one thread each), measured in one run:

- the whole run without held-out data and with it (scored every iteration, the default):
  seconds, iterations, the evaluations' seconds and the ratio of the two (target: at most 2x);
- one held-out scoring as a run makes it (the held-out shards cached, a direct call per worker:
  ``dasklbfgs.solvers.sandblaster.held_out``) against one by a task per shard reading the store
  (``dasklbfgs.scoring.evaluation.held_out_metrics``, how runs scored before), and one
  evaluation: medians of ``--repeats``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import HERE, machine, publish, report_header
from benchmarks.evaluation_costs import _median_ms


def measure(root: Path, repeats: int) -> dict[str, Any]:
    import dasklbfgs
    from dasklbfgs import ShardedDataset, make_dataset
    from dasklbfgs.models import Softmax
    from dasklbfgs.scoring.evaluation import held_out_metrics
    from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
    from dasklbfgs.solvers.sandblaster.held_out import HeldOutScorer

    path = root / "iteration-costs-digits"
    if not (path / "test").exists():
        make_dataset("digits", path, shard_rows=500, overwrite=True)
    train, test = ShardedDataset.open(path / "train"), ShardedDataset.open(path / "test")
    model = Softmax(train.n_features, 10, l2=3e-2)
    out: dict[str, Any] = {"rows": train.n_samples, "held_out_rows": test.n_samples}
    with dasklbfgs.connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        for name, eval_data in (("without held-out data", None), ("held-out scored every iteration", test)):
            started = time.perf_counter()
            result = dasklbfgs.minimize(model, train, "sandblaster", client=client, maxiter=300, standardize=True,
                                        eval_data=eval_data)
            out[name] = {"seconds": time.perf_counter() - started, "iterations": result.nit,
                         "evaluations": result.nfev, "evaluation_seconds": result.stats["eval_seconds_total"]}
        x = result.x
        scorer = HeldOutScorer(client, model, test)
        evaluator = MegaBatchEvaluator(client, model, train)
        try:
            out["scoring_ms"] = {"direct calls on cached shards": _median_ms(lambda: scorer(x), repeats),
                                 "a task per shard reading the store": _median_ms(
                                     lambda: held_out_metrics(model, x, test, client), repeats),
                                 "one evaluation (for scale)": _median_ms(lambda: evaluator.evaluate(x), repeats)}
        finally:
            scorer.close()
            evaluator.close()
    return out


def render(out: dict[str, Any]) -> str:
    lines = report_header("The fixed cost of a Sandblaster iteration", out["command"], out["machine"])
    lines += [f"scikit-learn's digits: {out['rows']:,} training rows, {out['held_out_rows']:,} held out; softmax, "
              "standardize=True, 2 workers.", "",
              "| run | iterations | seconds | evaluations' seconds | run / evaluations |", "|---|---:|---:|---:|---:|"]
    for name in ("without held-out data", "held-out scored every iteration"):
        r = out[name]
        lines.append(f"| {name} | {r['iterations']} | {r['seconds']:.2f} | {r['evaluation_seconds']:.2f} | "
                     f"{r['seconds'] / r['evaluation_seconds']:.2f}x |")
    lines += ["", f"One held-out scoring (median of {out['repeats']}):", "", "| how | ms |", "|---|---:|"]
    lines += [f"| {how} | {ms:.1f} |" for how, ms in out["scoring_ms"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out", help="where the dataset is written once")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.iteration_costs " + shlex.join(sys.argv[1:] if argv is None else argv)
    out = {"command": command.strip(), "machine": machine(), "repeats": args.repeats,
           **measure(args.data_dir, args.repeats)}
    publish("iteration_costs", out, render)


if __name__ == "__main__":
    main()
