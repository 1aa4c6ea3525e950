"""A wide sparse Sandblaster evaluation, where its time goes, and the ways to send it, in one run.

    python -m benchmarks.wide_evaluation                     # ctr 200,000 x 4,194,304, 2 workers
    python -m benchmarks.wide_evaluation --rows 50000 --features 262144   # a quick look

One LocalCluster of 2 workers x 1 thread holds the ``ctr`` recipe's shards (50,000 rows, ~1.7M
non-zeros each). Each way evaluates the loss and gradient at ``--repeats`` points:

- *compact direct calls on the active parameters* (what a run does:
  :mod:`dasklbfgs.solvers.sandblaster.active`): the compact calls below, the parameters and
  the gradient as long as the columns the rows read (12% of them here) rather than as the model;
- *compact direct calls*: each worker is sent, per shard it holds, only the
  parameters that shard reads (its columns' coefficients and the intercept), and answers
  with the gradient's values there;
- *whole-vector direct calls*: each worker is sent the whole parameter vector (how direct
  calls worked before; forced here past the 64 MiB limit that sent it by tasks);
- *tasks*: one task per portion, the parameters scattered once (what a 2^22 model on two
  workers used before).

For each: the wall time, the busiest worker's portion compute (as the workers report it for
direct calls, and from Dask's task stream for tasks), the client's reduction of the portions'
sums into the gradient (timed apart on the same sums), and the rest (messages, where the
shards are); the non-zeros a second; and a read of the same bytes on the workers (each cached
shard's values and column indices summed where it lives, the shards shared between the
workers), the floor a kernel that touches each non-zero once could reach.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from typing import Any

import numpy as np

from benchmarks import evaluation_costs
from benchmarks._common import HERE, machine, publish, report_header
from benchmarks.ctr import logistic, open_data

ACTIVE = "compact direct calls on the active parameters"
WAYS = (ACTIVE, "compact direct calls", "whole-vector direct calls", "tasks")


def _read_seconds(shard: Any) -> float:
    """Seconds to read a cached sparse shard's values and column indices once (a sum of each)."""
    X = shard[0].local
    started = time.perf_counter()
    X.data.sum()
    X.indices.sum(dtype=np.int64)
    return time.perf_counter() - started


def _read_floor(client: Any, evaluator: Any, workers: int, repeats: int) -> float:
    """The workers' read of every cached shard's bytes, shared between them: the median over
    ``repeats`` of the shards' summed read seconds, divided by the workers."""
    shards = evaluator.cached.shards
    totals = [sum(client.gather([client.submit(_read_seconds, s, pure=False) for s in shards]))
              for _ in range(repeats)]
    return statistics.median(totals) / workers


def _reduce_seconds(evaluator: Any, x: np.ndarray, repeats: int) -> tuple[float, float]:
    """The client's reduction of one evaluation's portion sums (as they arrived by direct
    calls; the evaluator's tree of groups by blocks), and the same additions as
    ``SparseSum.add_to`` made them before it viewed the values with numpy's own dtype
    (``np.add.at`` on the values as unpickled)."""
    from dasklbfgs.models.sums import SparseSum, reduce_in_blocks

    parts = evaluator._call_direct(x, time.perf_counter()).sums
    ordered = [parts[i] for i in range(len(evaluator.portions))]
    now, before = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        reduce_in_blocks(ordered, evaluator.direct.blocks)
        now.append(time.perf_counter() - started)
        started = time.perf_counter()
        total = np.zeros(x.size)
        for _, sums in ordered:
            if isinstance(sums, SparseSum):
                np.add.at(total, sums.index, sums.values)
            else:
                total += sums
        before.append(time.perf_counter() - started)
    return statistics.median(now), statistics.median(before)


def _sent_bytes(evaluator: Any, x: np.ndarray) -> int:
    """Parameter bytes one evaluation by direct calls sends (each worker's, added)."""
    from dasklbfgs.solvers.sandblaster.direct_calls import parameters_to_send

    return parameters_to_send(x, evaluator.direct_plan(), evaluator.direct.portion_positions(evaluator.portions))[1]


def measure(client: Any, model: Any, train: Any, way: str, repeats: int) -> dict[str, Any]:
    from dasklbfgs.solvers.sandblaster import direct_calls
    from dasklbfgs.solvers.sandblaster import evaluator as evaluation

    rng = np.random.default_rng(0)
    points = [rng.normal(scale=1e-3, size=model.n_params) for _ in range(repeats)]
    limit = direct_calls.DIRECT_UPLOAD_BYTES
    evaluator = evaluation.MegaBatchEvaluator(client, model, train, direct=way != "tasks")
    try:
        if way == "whole-vector direct calls":
            evaluator.direct.positions = [None] * train.n_shards
            direct_calls.DIRECT_UPLOAD_BYTES = 2**40
        if way == ACTIVE:  # as a run cuts its vectors
            from dasklbfgs.solvers.sandblaster.active import active_parameters
            from dasklbfgs.solvers.sandblaster.shard_passes import read_positions_by_shard

            found = active_parameters(model, read_positions_by_shard(evaluator), np.zeros(model.n_params, dtype=bool),
                                      None)
            assert found is not None, "the rows read most of the columns: nothing to cut"
            evaluator.restrict_to(found[0])
            points = [found[0].restrict(p) for p in points]
        evaluator.evaluate(points[0])  # warm: connections, imports
        parts = evaluation_costs.breakdown(client, evaluator, points)
        out = {"way": way, **parts, "nnz_per_second": train.nnz / parts["wall_s"]}
        if way != "tasks":
            out["reduce_s"], out["reduce_before_s"] = _reduce_seconds(evaluator, points[0], repeats)
            out["sent_bytes"] = _sent_bytes(evaluator, points[0])
        out["read_floor_s"] = _read_floor(client, evaluator, len(client.scheduler_info()["workers"]), repeats)
        return out
    finally:
        direct_calls.DIRECT_UPLOAD_BYTES = limit
        evaluator.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=2**22)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.wide_evaluation",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    from dasklbfgs import connect

    train, _ = open_data(HERE / "out", args.rows, args.features)
    model = logistic(train)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        ways = [measure(client, model, train, way, args.repeats) for way in WAYS]
    out = {"command": command, "machine": machine(), "rows": train.n_samples, "features": train.n_features,
           "nnz": train.nnz, "shards": train.n_shards, "repeats": args.repeats, "ways": ways}
    publish("wide_evaluation", out, render)


def render(out: dict[str, Any]) -> str:
    lines = report_header("A wide sparse evaluation: where its time goes", out["command"], out["machine"])
    floor = statistics.median(w["read_floor_s"] for w in out["ways"])
    lines += [
        f"Data: the `ctr` recipe, {out['rows']:,} rows x {out['features']:,} hashed columns, {out['nnz']:,} "
        f"non-zeros in {out['shards']} cached shards; logistic, l2 = 1e-4; 2 workers x 1 thread. Means over "
        f"{out['repeats']} evaluations at distinct points. A read of the same bytes on the workers (each shard's "
        f"values and column indices summed where it lives, the shards shared between the workers): "
        f"{floor * 1e3:.1f} ms.",
        "",
        "| way | evaluation ms | non-zeros a second | busiest worker's compute ms | client's reduction ms | "
        "the rest ms | parameters sent MB | of the first way's wall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    first = out["ways"][0]["wall_s"]
    for w in out["ways"]:
        reduce = w.get("reduce_s")
        rest = w["wall_s"] - w["busiest_compute_s"] - (reduce or 0.0)
        sent = w.get("sent_bytes")
        lines.append(
            f"| {w['way']} | {w['wall_s'] * 1e3:.0f} | {w['nnz_per_second'] / 1e6:.0f}M | "
            f"{w['busiest_compute_s'] * 1e3:.0f} | {'' if reduce is None else f'{reduce * 1e3:.0f}'} | "
            f"{rest * 1e3:.0f} | {'' if sent is None else f'{sent / 1e6:.1f}'} | {w['wall_s'] / first:.2f}x |")
    lines += [
        "",
        "The client's reduction is timed apart on one evaluation's sums as they arrived (for the tasks it is "
        "part of the rest); the same additions before `SparseSum.add_to` viewed the unpickled values with numpy's "
        f"own dtype took {out['ways'][0]['reduce_before_s'] * 1e3:.0f} ms (`np.add.at` leaves its fast loop for an "
        "equal dtype that is not numpy's instance). The busiest worker's compute against the read of the same "
        f"bytes is the kernel's distance from the memory: {out['ways'][0]['busiest_compute_s'] / floor:.1f}x for "
        "the first way.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
