"""Where a Sandblaster evaluation's time goes, and the floor of Dask's ways to reach a worker.

Used by :mod:`benchmarks.sandblaster` inside its cluster: the workers' compute per evaluation
(what the workers report for their direct calls, plus any tasks' compute from Dask's task
stream) against the evaluation's wall time, and the fixed cost of an evaluation on tiny data
(by direct calls, the default, and by a task per portion) beside the bare round trips:
one direct call per worker, one task, one task per worker, and one actor call per worker.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import benchmarks

TINY_ROWS, TINY_FEATURES, TINY_PORTIONS = 8000, 10, 8


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm: connections, imports
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def breakdown(client: Any, evaluator: Any, points: list[np.ndarray]) -> dict[str, Any]:
    """Mean wall time of evaluations at ``points`` and what the workers computed meanwhile
    (their direct calls' and portion tasks' compute, summed per worker and evaluation); the
    rest is the runtime's."""
    from distributed import get_task_stream

    walls = []
    direct_before = dict(evaluator.stats.direct_compute_seconds)
    directs_before = evaluator.stats.direct_evaluations
    with get_task_stream(client) as stream:
        for x in points:
            started = time.perf_counter()
            evaluator.evaluate(x)
            walls.append(time.perf_counter() - started)
    compute: dict[str, float] = defaultdict(float)
    for worker, seconds in evaluator.stats.direct_compute_seconds.items():
        compute[worker] += seconds - direct_before.get(worker, 0.0)
    tasks = 0
    for task in stream.data:
        if "sandblaster-" not in task["key"]:
            continue
        tasks += 1
        compute[task["worker"]] += sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
    per_worker = {w: seconds / len(points) for w, seconds in sorted(compute.items())}
    wall = statistics.mean(walls)  # a mean, like the compute per evaluation it is compared with
    busiest = max(per_worker.values(), default=0.0)
    return {"wall_s": wall, "worker_compute_s": list(per_worker.values()), "busiest_compute_s": busiest,
            "runtime_s": wall - busiest, "tasks_per_evaluation": tasks / len(points),
            "direct_share": (evaluator.stats.direct_evaluations - directs_before) / len(points)}


class _Echo:
    def ping(self) -> int:
        return 1


def _one() -> int:
    return 1


def fixed_costs(client: Any, root: Path, repeats: int = 30) -> dict[str, float]:
    """Milliseconds: an evaluation of a tiny dataset in ``TINY_PORTIONS`` portions (its fixed
    cost), and the bare round trips: one task and its result, one task per worker gathered,
    one actor call per worker."""
    from dasklbfgs import ShardedDataset
    from dasklbfgs.models import Logistic
    from dasklbfgs.sandblaster import MegaBatchEvaluator

    rng = np.random.default_rng(0)
    X = rng.normal(size=(TINY_ROWS, TINY_FEATURES))
    path = root / f"tiny-{TINY_ROWS}x{TINY_FEATURES}"
    try:
        data = ShardedDataset.open(path)
    except Exception:
        data = ShardedDataset.create(path, X, (X[:, 0] > 0).astype(np.int64), shard_rows=TINY_ROWS // TINY_PORTIONS,
                                     overwrite=True)
    from distributed import Client

    from dasklbfgs.solvers.sandblaster.direct_calls import call_workers

    evaluator = MegaBatchEvaluator(client, Logistic(TINY_FEATURES), data, portion_rows=TINY_ROWS // TINY_PORTIONS)
    by_tasks = MegaBatchEvaluator(client, Logistic(TINY_FEATURES), data, portion_rows=TINY_ROWS // TINY_PORTIONS,
                                  direct=False)
    plain_client = Client(client.scheduler.address)  # as Dask users make one: direct_to_workers left to Dask
    plain = MegaBatchEvaluator(plain_client, Logistic(TINY_FEATURES), data, portion_rows=TINY_ROWS // TINY_PORTIONS)
    x = np.zeros(TINY_FEATURES + 1)
    workers = sorted(client.scheduler_info()["workers"])
    actors = [client.submit(_Echo, actor=True, workers=[w], pure=False).result() for w in workers]
    empty = {w: [] for w in workers}
    sent = {w: (x, {}) for w in workers}
    try:
        return {
            "evaluation_ms": _median_ms(lambda: evaluator.evaluate(x), repeats),
            "evaluation_tasks_ms": _median_ms(lambda: by_tasks.evaluate(x), repeats),
            "evaluation_plain_client_ms": _median_ms(lambda: plain.evaluate(x), repeats),
            "direct_call_per_worker_ms": _median_ms(
                lambda: call_workers(client, "bench", evaluator.model, sent, empty, time.perf_counter(), None),
                repeats),
            "one_task_ms": _median_ms(lambda: client.submit(_one, pure=False).result(), repeats),
            "task_per_worker_ms": _median_ms(lambda: client.gather([client.submit(_one, workers=[w], pure=False)
                                                                     for w in workers]), repeats),
            "actor_call_per_worker_ms": _median_ms(
                lambda actors=actors: [c.result() for c in [a.ping() for a in actors]], repeats),
        }
    finally:
        evaluator.close()
        by_tasks.close()
        plain.close()
        plain_client.close()
        del actors


def render(e: dict[str, Any], read_pass_s: float) -> list[str]:
    """The breakdown's lines for RESULTS-sandblaster.md."""
    b, f = e["breakdown"], e["fixed"]
    computes = ", ".join(f"{s * 1e3:.1f}" for s in b["worker_compute_s"])
    return [
        "",
        "Where an evaluation's time goes (cached shards, means per evaluation; "
        "the workers' compute as they report it for "
        "their direct calls, and from Dask's task stream for tasks):",
        "",
        "| part | ms | of one read pass |",
        "|---|---:|---:|",
        f"| evaluation, wall | {b['wall_s'] * 1e3:.1f} | {b['wall_s'] / read_pass_s:.2f}x |",
        f"| the busiest worker's portion compute ({b['direct_share']:.0%} of the evaluations by direct calls alone, "
        f"{b['tasks_per_evaluation']:.1f} tasks per evaluation; per worker: {computes} ms) | "
        f"{b['busiest_compute_s'] * 1e3:.1f} | {b['busiest_compute_s'] / read_pass_s:.2f}x |",
        f"| the rest: where the shards are, messages, the client's reduction | {b['runtime_s'] * 1e3:.1f} | "
        f"{b['runtime_s'] / read_pass_s:.2f}x |",
        "",
        f"Fixed cost: an evaluation of {TINY_ROWS} x {TINY_FEATURES} rows in {TINY_PORTIONS} portions takes "
        f"**{f['evaluation_ms']:.1f} ms** by direct calls to the workers (the default; "
        f"{f['evaluation_tasks_ms']:.1f} ms by a task per portion; "
        f"{f.get('evaluation_plain_client_ms', float('nan')):.1f} ms from a client made as `Client(address)`, Dask's "
        "default, whose workers answer a direct call). In the same cluster: one direct call per worker "
        f"with nothing to compute {f['direct_call_per_worker_ms']:.1f} ms (the direct path's floor; the rest is "
        f"asking the scheduler where the shards are and the portions' compute), one task and its result "
        f"{f['one_task_ms']:.1f} ms, one task per worker gathered {f['task_per_worker_ms']:.1f} ms (the task "
        f"path's floor), one actor call per worker {f['actor_call_per_worker_ms']:.1f} ms.",
    ]
