"""Downpour SGD: the cost of a fetch + push, and time to a held-out accuracy with 1 and 2 replicas.

    python -m benchmarks.downpour                     # as recorded in RESULTS-downpour.md
    python -m benchmarks.downpour --rows 20000        # a quick look

Measured in one run on one machine; writes ``benchmarks/results/downpour.json`` and
``benchmarks/RESULTS-downpour.md``.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks._common import HERE, machine, report_header, write_report, write_result
from dasklbfgs import ShardedDataset, connect
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.downpour import ParameterShard, downpour_sgd, param_bounds
from dasklbfgs.downpour.replica import epoch_order
from dasklbfgs.models import Softmax
from dasklbfgs.models.metrics import evaluate_model
from dasklbfgs.optim.updates import adagrad
from dasklbfgs.sandblaster import sandblaster_lbfgs


def fetch_push_seconds(shards, bounds, n_params, repeats, dtype):
    """Median time of one replica step's communication, measured inside a replica task:
    a push to every shard whose reply carries the updated slice (the fetch)."""
    from distributed import secede

    from dasklbfgs.downpour.wire import Wire

    secede()
    wire = Wire(bounds, dtype)
    grad = np.full(n_params, 1e-6)
    versions = [c.result()[1] for c in [s.fetch(dtype) for s in shards]]
    params = np.zeros(n_params)
    times = []
    for _ in range(repeats + 2):
        t0 = time.perf_counter()
        calls = [s.push(p, v, 0, 1, 0.0, True) for s, p, v in zip(shards, wire.payloads(grad, None), versions)]
        replies = [c.result() for c in calls]
        wire.apply_fetched(params, [r[2] for r in replies])
        versions = [r[0] for r in replies]
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def in_process_sgd(model, train, test, *, batch_size, learning_rate, epochs, eval_every, target, seed):
    """The Downpour loop with one replica and the shards in this process, on one thread."""
    X, y = train.load_rows(0, train.n_samples)
    rule = adagrad(learning_rate)
    w = np.zeros(model.n_params)
    state = rule.init(w)
    step, started = 0, time.perf_counter()
    with threadpool_limits(1):
        for epoch in range(epochs):
            order = epoch_order(train.n_samples, seed, 0, epoch)
            for start in range(0, train.n_samples, batch_size):
                index = np.sort(order[start:start + batch_size])
                _, g = model.objective(w, X[index], y[index])
                delta, state = rule.update(g, state)
                w += delta
                step += 1
                if step % eval_every == 0:
                    accuracy = evaluate_model(model, w, test)["accuracy"]
                    if accuracy >= target:
                        return time.perf_counter() - started, step, accuracy
    return None, step, evaluate_model(model, w, test)["accuracy"]


def time_to_target(result, target):
    for entry in result.history:
        if entry.get("eval_accuracy", 0.0) >= target:
            return entry["time"], entry["step"]
    return None, result.nit


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=440)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--params", type=int, default=1_000_000, help="parameters for the fetch+push cost")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.downpour",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine()}

    with connect(n_workers=2, dashboard_address=None) as client:
        client.wait_for_workers(2)
        workers = sorted(client.scheduler_info()["workers"])
        # 1. Fetch + push of 1M parameters over 2 shards, measured inside a replica task.
        bounds = param_bounds(args.params, 2)
        futures = [client.submit(ParameterShard, i, a, b, np.zeros(b - a), "adagrad", {"learning_rate": 0.1},
                                 actor=True, workers=[workers[i]]) for i, (a, b) in enumerate(bounds)]
        shards = [f.result() for f in futures]
        out["fetch_push"] = {"params": args.params, "shards": 2}
        for dtype in ("float64", "float32"):
            out["fetch_push"][dtype] = client.submit(
                fetch_push_seconds, shards, bounds, args.params, args.repeats, dtype,
                workers=[workers[0]], pure=False).result()
        del shards, futures

        # 2. Time to a held-out accuracy: 1 vs 2 replicas, and one process.
        root = args.data_dir / f"multinomial-{args.rows}x{args.features}x{args.classes}"
        problem = SyntheticProblem("multinomial", n_features=args.features, n_classes=args.classes, seed=0)
        train = _dataset(root / "train", problem.blocks(args.rows))
        test = _dataset(root / "test", problem.blocks(max(args.rows // 10, 1000), first_block=10**6))
        model = Softmax(args.features, args.classes, l2=1e-5)
        best = sandblaster_lbfgs(model, train, client=client, maxiter=200)
        best_accuracy = evaluate_model(model, best.x, test)["accuracy"]
        target = best_accuracy - 0.02
        out["target"] = {"sandblaster_accuracy": best_accuracy, "target_accuracy": target,
                         "sandblaster_seconds": best.timing["total_seconds"]}
        runs = {}
        for replicas in (1, 2):
            result = downpour_sgd(model, train, client=client, n_replicas=replicas, n_param_shards=2,
                                  batch_size=args.batch_size, learning_rate=args.learning_rate,
                                  epochs=args.epochs, eval_data=test, eval_every=args.eval_every, defer_eval=True,
                                  poll_interval=0.01)
            seconds, step = time_to_target(result, target)
            runs[replicas] = {"seconds_to_target": seconds, "steps_to_target": step,
                              "final_accuracy": result.final["eval_accuracy"],
                              "updates_per_second": result.stats["updates_per_second"],
                              "examples_per_second": result.stats["examples_per_second"],
                              "staleness": result.stats["staleness"]}
        seconds, step, accuracy = in_process_sgd(model, train, test, batch_size=args.batch_size,
                                                 learning_rate=args.learning_rate, epochs=args.epochs,
                                                 eval_every=args.eval_every, target=target, seed=0)
        out["runs"] = {"1": runs[1], "2": runs[2],
                       "in_process": {"seconds_to_target": seconds, "steps_to_target": step,
                                      "final_accuracy": accuracy}}
        if runs[1]["seconds_to_target"] and runs[2]["seconds_to_target"]:
            out["two_over_one"] = runs[2]["seconds_to_target"] / runs[1]["seconds_to_target"]

    write_result("downpour", out)
    report = render(out, args)
    write_report("downpour", report)
    print(report)


def _dataset(path, blocks):
    try:
        return ShardedDataset.open(path)
    except Exception:
        return ShardedDataset.from_blocks(path, blocks, shard_rows=25_000, overwrite=True)


def render(out, args) -> str:
    m, fp, t, r = out["machine"], out["fetch_push"], out["target"], out["runs"]

    def secs(v):
        return "not reached" if v is None else f"{v:.2f}"

    lines = [
        *report_header('Downpour SGD benchmark', out["command"], m),
        f"One step's communication for {fp['params']:,} parameters over {fp['shards']} Adagrad shards, from a "
        f"replica task (push, with the updated slice in the reply; median of {args.repeats}): "
        f"**{1e3 * fp['float32']:.1f} ms** with float32 on the wire, {1e3 * fp['float64']:.1f} ms with float64.", "",
        f"Time to {t['target_accuracy']:.3f} held-out accuracy (Sandblaster's optimum {t['sandblaster_accuracy']:.3f} "
        f"minus 0.02) on softmax {args.rows:,} x {args.features}, {args.classes} classes; batch {args.batch_size}, "
        f"Adagrad rate {args.learning_rate}, held-out scored every {args.eval_every} global steps (after each run, `defer_eval=True`, so scoring takes no "
        "CPU from the workers):", "",
        "| run | seconds to target | steps to target | final accuracy | updates/s | staleness (lag: pushes) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, label in (("1", "Downpour, 1 replica"), ("2", "Downpour, 2 replicas")):
        x = r[name]
        lines.append(f"| {label} | {secs(x['seconds_to_target'])} | {x['steps_to_target']} | {x['final_accuracy']:.3f} | "
                     f"{x['updates_per_second']:.0f} | {x['staleness']} |")
    x = r["in_process"]
    lines.append(f"| one process, one thread, same loop | {secs(x['seconds_to_target'])} | {x['steps_to_target']} | "
                 f"{x['final_accuracy']:.3f} | | |")
    if "two_over_one" in out:
        lines += ["", f"2 replicas / 1 replica time to target: **{out['two_over_one']:.2f}**"]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
