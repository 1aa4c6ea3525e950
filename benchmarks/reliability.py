"""Reliability figures: stragglers with and without backup tasks, and recovery from killed workers.

    python -m benchmarks.reliability                  # as recorded in RESULTS-reliability.md

1. Sandblaster with one worker slowed 4x (a sleep per portion on that worker): median
   evaluation time relative to the same cluster unslowed, with backup tasks on and off, for
   2, 3 and 4 single-thread workers (median over repeated evaluations, so it includes the
   drift of work away from the straggler).
2. Sandblaster, a worker SIGKILLed in the middle of an evaluation: the result is bitwise the
   undisturbed one; how much longer that evaluation took.
3. Downpour on 3 workers: a replica's worker killed, then a parameter shard's worker killed
   (restored from a checkpoint): run time and held-out accuracy against an undisturbed run,
   and the time to re-create the shard.

Writes ``benchmarks/results/reliability.json`` and ``benchmarks/RESULTS-reliability.md``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import numpy as np
from distributed import get_worker

from benchmarks._common import HERE, machine, report_header, write_report, write_result
from dasklbfgs import ShardedDataset, connect, downpour_sgd, make_dataset
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.sandblaster import MegaBatchEvaluator
from dasklbfgs.scoring import evaluate

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SlowOnOneWorker(Logistic):
    """Portions on ``slow_worker`` sleep ``delay`` seconds first: a machine ``delay`` slower."""

    def __init__(self, n_features, slow_worker, delay, **kw):
        super().__init__(n_features, **kw)
        self.slow_worker, self.delay = slow_worker, delay

    def loss_grad_sum(self, params, X, y):
        try:
            here = get_worker().address
        except ValueError:
            here = None
        if here == self.slow_worker and self.delay:
            time.sleep(self.delay)
        return super().loss_grad_sum(params, X, y)


class SlowSoftmax(Softmax):
    def loss_grad_sum(self, params, X, y):
        time.sleep(0.002)
        return super().loss_grad_sum(params, X, y)


def median_evaluation(evaluator, x, repeats) -> float:
    evaluator.evaluate(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        evaluator.evaluate(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stragglers(data, args) -> list[dict]:
    rows = []
    x = np.full(data.n_features + 1, 0.01)
    for n_workers in args.workers:
        with connect(n_workers=n_workers, threads_per_worker=1, dashboard_address=None) as client:
            client.wait_for_workers(n_workers)
            slow = sorted(client.scheduler_info()["workers"])[-1]
            base_model = SlowOnOneWorker(data.n_features, slow, 0.0)
            evaluator = MegaBatchEvaluator(client, base_model, data, portion_rows=args.portion_rows)
            base = median_evaluation(evaluator, x, args.repeats)
            per_portion = base * n_workers / len(evaluator.portions)  # a portion's compute time
            evaluator.close()
            delay = (args.slowdown - 1) * per_portion
            row = {"workers": n_workers, "portions": len(evaluator.portions), "unslowed_seconds": base,
                   "delay_per_portion": delay}
            for backups in (True, False):
                model = SlowOnOneWorker(data.n_features, slow, delay)
                evaluator = MegaBatchEvaluator(client, model, data, portion_rows=args.portion_rows,
                                               backup_tasks=backups)
                seconds = median_evaluation(evaluator, x, args.repeats)
                evaluator.close()
                row["backups" if backups else "no_backups"] = {"seconds": seconds, "ratio": seconds / base}
            rows.append(row)
    return rows


class SlowLogistic(Logistic):
    def loss_grad_sum(self, params, X, y):
        time.sleep(0.05)
        return super().loss_grad_sum(params, X, y)


def killed_evaluation(data) -> dict:
    x = np.full(data.n_features + 1, 0.01)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        evaluator = MegaBatchEvaluator(client, SlowLogistic(data.n_features), data, portion_rows=25_000)
        undisturbed = evaluator.evaluate(x)
        t0 = time.perf_counter()
        evaluator.evaluate(x)
        clean = time.perf_counter() - t0
        out: dict = {}
        thread = threading.Thread(target=lambda: out.setdefault("r", evaluator.evaluate(x)))
        t0 = time.perf_counter()
        thread.start()
        time.sleep(clean / 3)
        victim = sorted(client.scheduler_info()["workers"])[0]
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        thread.join()
        disturbed = time.perf_counter() - t0
        evaluator.close()
    loss, grad = out["r"]
    return {"bitwise_equal": bool(loss == undisturbed[0] and np.array_equal(grad, undisturbed[1])),
            "undisturbed_seconds": clean, "killed_seconds": disturbed}


def downpour_faults(root: Path) -> dict:
    splits = make_dataset("multinomial", root / "dp-mn", rows=8000, features=10, n_classes=3, shard_rows=2000,
                          seed=4, overwrite=True)
    kw = dict(n_replicas=2, n_param_shards=2, batch_size=50, learning_rate=0.2, epochs=3)
    out = {}
    for case, victim_index in (("undisturbed", None), ("replica worker killed", 2), ("shard worker killed", 1)):
        with connect(n_workers=3, threads_per_worker=1, dashboard_address=None) as client:
            client.wait_for_workers(3)
            victim = sorted(client.scheduler_info()["workers"])[victim_index] if victim_index is not None else None
            killed: dict = {}

            def callback(entry, victim=victim, killed=killed, client=client):
                if victim and "at" not in killed and entry.step >= 200:
                    killed["at"], killed["time"] = entry.step, entry.time
                    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)

            ckpt = root / f"dp-ckpt-{victim_index}"
            result = downpour_sgd(SlowSoftmax(10, 3, l2=1e-4), splits["train"], client=client, callback=callback,
                                  checkpoint_path=ckpt, checkpoint_every=40, **kw)
            accuracy = evaluate(Softmax(10, 3, l2=1e-4), result.x, splits["test"])["accuracy"]
            out[case] = {"seconds": result.stats["wall_seconds"], "accuracy": accuracy, "steps": result.nit,
                         "killed_at_step": killed.get("at"), "recoveries": result.stats["shard_recoveries"],
                         "replica_first_steps": result.stats["replica_first_steps"], "success": bool(result.success)}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--portion-rows", type=int, default=12_500)
    parser.add_argument("--slowdown", type=float, default=4.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.reliability",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine()}
    path = args.data_dir / f"logistic-{args.rows}x{args.features}-shards50k"
    try:
        data = ShardedDataset.open(path)
    except Exception:
        problem = SyntheticProblem("logistic", n_features=args.features, seed=0)
        data = ShardedDataset.from_blocks(path, problem.blocks(args.rows), shard_rows=50_000, overwrite=True)
    out["stragglers"] = stragglers(data, args)
    out["killed_evaluation"] = killed_evaluation(data)
    out["downpour"] = downpour_faults(args.data_dir)
    write_result("reliability", out)
    report = render(out, args)
    write_report("reliability", report)
    print(report)


def render(out, args) -> str:
    m = out["machine"]
    lines = [
        *report_header('Reliability benchmark', out["command"], m),
        "## Stragglers: one worker slowed, Sandblaster evaluation time", "",
        f"Logistic loss+gradient over {args.rows:,} x {args.features} rows in portions of {args.portion_rows:,}; "
        f"the last worker sleeps {args.slowdown - 1:g}x a portion's compute time before each of its portions "
        f"(a machine {args.slowdown:g}x slower). Median of {args.repeats} evaluations, relative to the same "
        "cluster with no slow worker. Workers have one thread each; this machine has 2 cores, so 3 and 4 "
        "workers share them.", "",
        "| workers | unslowed (s) | slowed, backup tasks (s) | ratio | slowed, no backups (s) | ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in out["stragglers"]:
        lines.append(f"| {r['workers']} | {r['unslowed_seconds']:.3f} | {r['backups']['seconds']:.3f} | "
                     f"**{r['backups']['ratio']:.2f}** | {r['no_backups']['seconds']:.3f} | "
                     f"{r['no_backups']['ratio']:.2f} |")
    k = out["killed_evaluation"]
    lines += [
        "", "With backup tasks, once a worker is idle the straggler's outstanding portions are copied to it (the "
        "helper fetches the shard from the straggler's memory); the first copy to finish wins. The helper keeps "
        "the shard, and the next evaluations place that shard's portions by measured speed, so work drifts "
        "away from the straggler. The slowdown is a sleep, which frees a core: with 3 and 4 workers on this "
        "2-core machine the unslowed runs are oversubscribed, so the slowed runs with backups can beat them. "
        "Without backups every evaluation waits for the straggler.", "",
        "## A worker killed in the middle of a Sandblaster evaluation", "",
        f"Result bitwise equal to the undisturbed evaluation: **{k['bitwise_equal']}**; the evaluation took "
        f"{k['killed_seconds']:.2f} s instead of {k['undisturbed_seconds']:.2f} s (its portions were rescued on "
        "the surviving worker, which reloaded the lost shards from Zarr).", "",
        "## Downpour: killed workers (3 workers, 2 replicas, 2 parameter shards, checkpoint every 40 steps)", "",
        "| case | success | seconds | held-out accuracy | global steps | killed at step | shard re-created in | "
        "replica resumed at step |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for case, r in out["downpour"].items():
        rec = "; ".join(f"shard {x['shards']} from step {x['restored_step']} in {x['seconds']:.2f} s"
                        for x in r["recoveries"]) or "-"
        lines.append(f"| {case} | {r['success']} | {r['seconds']:.2f} | {r['accuracy']:.3f} | {r['steps']} | "
                     f"{r['killed_at_step'] or '-'} | {rec} | {r['replica_first_steps']} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
