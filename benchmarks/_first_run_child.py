"""One user's first run, measured in a fresh interpreter (run by ``benchmarks.first_run``).

    python benchmarks/_first_run_child.py DATASET ORDER MAXITER

Run by path, so that the ``dasklbfgs`` it imports is whichever tree ``PYTHONPATH`` names
(main's, for the "before" numbers), and self-contained: it imports nothing of
``benchmarks``. It is a user's script: its imports are at the top, so the workers the
embedded cluster spawns import them too (multiprocessing's spawn runs the script's module
in each of them) while the cluster starts. Prints one JSON line: the interpreter's own
timeline (importing dasklbfgs, starting the embedded cluster, the first Sandblaster run and
the same call again, each run's service start, shard load and evaluations) and, in another
new cluster of the same shape, the workers filling as much new memory as the shards take
(``ORDER``: before or after the run's cluster).
"""

from __future__ import annotations

import json
import sys
import time

STARTED = time.perf_counter()

import dasklbfgs  # noqa: E402 - timed from the interpreter's start
from dasklbfgs import Logistic, ShardedDataset, connect, minimize  # noqa: E402

IMPORTED = time.perf_counter()

CLUSTER = {"n_workers": 2, "threads_per_worker": 1, "dashboard_address": None}


def fill_seconds(nbytes: int, pieces: int) -> float:
    """On a worker: seconds to fill ``nbytes`` of new memory held in ``pieces`` arrays (as
    its cached shards are held)."""
    import numpy as np

    held = []
    started = time.perf_counter()
    for _ in range(pieces):
        held.append(np.ones(nbytes // pieces // 8))
    return time.perf_counter() - started


class ServiceClock:
    """Times the portion service's start inside each run (the evaluator calls it by name)."""

    def __init__(self) -> None:
        import dasklbfgs.solvers.sandblaster.evaluator as evaluator

        self.seconds: list[float] = []
        self._start = evaluator.start_service
        evaluator.start_service = self  # type: ignore[assignment]

    def __call__(self, client: object) -> None:
        started = time.perf_counter()
        self._start(client)
        self.seconds.append(time.perf_counter() - started)


def one_run(client, data, clock: ServiceClock, maxiter: int) -> dict[str, float]:
    before = len(clock.seconds)
    started = time.perf_counter()
    result = minimize(Logistic(data.n_features, l2=1e-4), data, "sandblaster", client=client, maxiter=maxiter)
    seconds = time.perf_counter() - started
    stats = result.stats
    service = sum(clock.seconds[before:])
    return {"seconds": seconds, "service_s": service, "load_s": stats["load_seconds"],
            "evaluations_s": stats["eval_seconds_total"], "evaluations": stats["evaluations"],
            "rest_s": seconds - service - stats["load_seconds"] - stats["eval_seconds_total"]}


def main() -> None:
    path, order, maxiter = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = ShardedDataset.open(path)
    out: dict = {"dasklbfgs": dasklbfgs.__file__, "import_s": IMPORTED - STARTED}
    nbytes = data.nbytes_in_memory // CLUSTER["n_workers"]
    pieces = -(-data.n_shards // CLUSTER["n_workers"])

    def fill() -> None:
        with connect(**CLUSTER) as client:
            client.wait_for_workers(CLUSTER["n_workers"])
            workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
            out["fill_s"] = max(client.gather([client.submit(fill_seconds, nbytes, pieces, workers=[w], pure=False)
                                               for w in workers]))

    if order == "fill-first":
        fill()
    clock = ServiceClock()
    started = time.perf_counter()
    with connect(**CLUSTER) as client:
        client.wait_for_workers(CLUSTER["n_workers"])
        out["cluster_s"] = time.perf_counter() - started
        out["first"] = one_run(client, data, clock, maxiter)
        out["again"] = one_run(client, data, clock, maxiter)
    if order != "fill-first":
        fill()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
