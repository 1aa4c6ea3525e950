"""Chaos: seeded random schedules of worker kills, retirements and scale-ups under every solver.

    python -m benchmarks.chaos                          # as recorded in RESULTS-chaos.md
    python -m benchmarks.chaos --runs 5 --peer-runs 1   # a quick look

Every run starts its own embedded cluster of ``--workers`` single-thread workers (each under
a nanny, so a SIGKILLed worker comes back as a new worker: a departure and an arrival) and
trains while a thread carries out that run's schedule: 1 to 3 events at uniformly random
times within the first 80% of the undisturbed run's duration (events not yet due when a run
ends are not carried out, and counted apart), each one of

- ``kill``: SIGKILL a random worker's process;
- ``retire``: ``client.retire_workers([w])`` on a random worker, asked again every 2 s (at
  most 3 times) while the worker is still there, as an adaptive deployment does: Dask
  cannot move actors, so a request is refused while the worker holds one of the run's;
- ``scale-down``: ``cluster.scale(n - 1)`` (Dask retires a worker of its choice, then closes it);
- ``scale-up``: ``cluster.scale(n + 1)``.

Departures never take the cluster below two workers. The schedule of run ``i`` comes from
``numpy.random.default_rng((seed, i))``, so a recorded table can be replayed run by run.

Per run: completed (returned rather than raised), the result against the undisturbed run
(Sandblaster: bitwise equal final parameters; the replica methods: held-out accuracy within
the undisturbed runs' spread, widened by ``--accuracy-slack``), the wall time against the
undisturbed run's, the recoveries the solver reports, and what is left on the cluster once the
run has returned (keys on the scheduler, actors on the workers, after up to 10 s for Dask's
asynchronous releases).

Writes ``benchmarks/results/chaos.json`` and ``benchmarks/RESULTS-chaos.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

from benchmarks._common import HERE, RESULTS, machine, report_header, write_report, write_result
from dasklbfgs import ShardedDataset, connect, make_dataset, minimize
from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.scoring import evaluate

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EVENTS = ("kill", "retire", "scale-down", "scale-up")
PEERS = ("sync", "easgd", "gossip", "neighbours")
MIN_WORKERS = 2
SETTLE_SECONDS = 10.0
RETIRE_ATTEMPTS, RETIRE_RETRY_SECONDS = 3, 2.0  # as an adaptive deployment asks again


class SlowLogistic(Logistic):
    """25 ms per portion: an L-BFGS run of a few seconds, long enough for events to land in
    every phase (loading, evaluating, backups, line search)."""

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.025)
        return super().loss_grad_sum(params, X, y)


class SlowSoftmax(Softmax):
    """3 ms per mini-batch: a replica run of a few seconds."""

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.003)
        return super().loss_grad_sum(params, X, y)


def schedule(seed: int, run: int, duration: float) -> list[tuple[float, str]]:
    """Run ``run``'s events: (seconds after the start, kind), in time order."""
    rng = np.random.default_rng((seed, run))
    n = int(rng.integers(1, 4))
    times = np.sort(rng.uniform(0.0, 0.8 * duration, size=n))
    return [(float(t), str(rng.choice(EVENTS))) for t in times]


class Chaos(threading.Thread):
    """Carries out a schedule against a client's embedded cluster; records what it did."""

    def __init__(self, client: Any, events: list[tuple[float, str]], seed: tuple[int, int]) -> None:
        super().__init__(daemon=True)
        self.client, self.events, self.rng = client, events, np.random.default_rng(seed)
        self.done: list[dict[str, Any]] = []
        self.started = time.perf_counter()
        self.stopped = threading.Event()

    def workers(self) -> list[str]:
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def run(self) -> None:
        for at, kind in self.events:
            if self.stopped.wait(max(0.0, at - (time.perf_counter() - self.started))):
                return
            try:
                self.done.append({"at": round(time.perf_counter() - self.started, 2), "event": kind,
                                  **self.carry_out(kind)})
            except Exception as exc:  # noqa: BLE001 - the cluster may be changing under us: record it
                self.done.append({"at": round(time.perf_counter() - self.started, 2), "event": kind,
                                  "skipped": f"{type(exc).__name__}: {exc}"})

    def carry_out(self, kind: str) -> dict[str, Any]:
        workers = self.workers()
        if kind == "scale-up":
            self.client.cluster.scale(len(workers) + 1)
            return {"workers": len(workers) + 1}
        if kind != "kill" and len(workers) <= MIN_WORKERS:
            return {"skipped": f"only {len(workers)} workers"}
        if kind == "scale-down":
            self.client.cluster.scale(len(workers) - 1)
            return {"workers": len(workers) - 1}
        victim = str(self.rng.choice(workers))
        if kind == "kill":
            os.kill(self.client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
            return {"worker": victim}
        attempts = 0
        while attempts < RETIRE_ATTEMPTS and victim in self.workers():
            if attempts and self.stopped.wait(RETIRE_RETRY_SECONDS):
                break
            self.client.retire_workers([victim])
            attempts += 1
        return {"worker": victim, "attempts": attempts, "retired": victim not in self.workers()}


def _keys(dask_scheduler=None) -> int:
    return len(dask_scheduler.tasks)


def _actors(dask_worker=None) -> int:
    return len(dask_worker.state.actors)


def leftovers(client: Any) -> dict[str, int]:
    """Keys on the scheduler and actors on the workers, once Dask's releases have settled."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        found = {"keys": client.run_on_scheduler(_keys), "actors": sum(client.run(_actors).values())}
        if not any(found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def one_run(solver: str, model: Any, data: Any, options: dict[str, Any], args: Any,
            events: list[tuple[float, str]] = (), seed: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """One run on a fresh cluster, disturbed by ``events``."""
    with connect(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(args.workers)
        chaos = Chaos(client, list(events), seed)
        chaos.start()
        started = time.perf_counter()
        out: dict[str, Any] = {"events": chaos.done, "scheduled": len(events)}
        try:
            result = minimize(model, data, solver, client=client, **options)
            out.update(completed=True, success=bool(result.success), message=result.message, x=result.x,
                       nit=int(result.nit), recoveries=_recoveries(result))
        except Exception as exc:  # noqa: BLE001 - a crash is what the benchmark counts
            out.update(completed=False, message=f"{type(exc).__name__}: {exc}", error=traceback.format_exc(limit=3))
        out["seconds"] = time.perf_counter() - started
        chaos.stopped.set()
        chaos.join(30)
        out["leftovers"] = leftovers(client)
    return out


def _recoveries(result: Any) -> dict[str, Any]:
    stats = result.stats
    return {key: stats[key] for key in ("shard_recoveries", "shard_handovers", "replica_restarts",
                                        "replica_first_steps", "evaluation_restarts", "shards_moved", "backups_won")
            if stats.get(key)}


def sandblaster(args: Any) -> dict[str, Any]:
    path = args.data_dir / "chaos-logistic-24000x20"
    try:
        data = ShardedDataset.open(path)
    except Exception:  # noqa: BLE001 - written once, reused
        rng = np.random.default_rng(7)
        X = rng.normal(size=(24_000, 20))
        y = (X @ rng.normal(size=20) + rng.normal(size=24_000) > 0).astype(np.int64)
        data = ShardedDataset.create(path, X, y, shard_rows=3000, overwrite=True)
    model, options = SlowLogistic(20, l2=1e-3), {"maxiter": args.maxiter}
    reference = one_run("sandblaster", model, data, options, args)
    runs = []
    for i in range(args.runs):
        events = schedule(args.seed, i, reference["seconds"])
        run = one_run("sandblaster", model, data, options, args, events, (args.seed, i))
        run["as_undisturbed"] = bool(run.get("x") is not None and np.array_equal(run["x"], reference["x"])
                                     and run["nit"] == reference["nit"])
        runs.append(_public(run, i))
        print(f"sandblaster run {i}: {runs[-1]['summary']}", flush=True)
    return {"reference": _public(reference, -1), "runs": runs, "criterion": "final parameters bitwise equal"}


def replicas(args: Any, splits: dict[str, Any], solver: str, n_runs: int, extra: dict[str, Any]) -> dict[str, Any]:
    model = SlowSoftmax(10, 3, l2=1e-4)
    options = {"n_replicas": 2, "batch_size": 50, "learning_rate": 0.2, "epochs": 3, **extra}

    def accuracy(run: dict[str, Any]) -> float:
        return evaluate(Softmax(10, 3, l2=1e-4), run["x"], splits["test"])["accuracy"] if "x" in run else 0.0

    references = [one_run(solver, model, splits["train"], _fresh_checkpoint(options, args, solver, f"ref{k}"), args)
                  for k in range(args.reference_runs)]
    spread = [accuracy(r) for r in references]
    low = min(spread) - args.accuracy_slack
    runs = []
    for i in range(n_runs):
        events = schedule(args.seed, i, float(np.median([r["seconds"] for r in references])))
        run = one_run(solver, model, splits["train"], _fresh_checkpoint(options, args, solver, str(i)), args, events,
                      (args.seed, i))
        run["accuracy"] = accuracy(run)
        run["as_undisturbed"] = bool(run.get("success") and run["accuracy"] >= low)
        runs.append(_public(run, i))
        print(f"{solver} run {i}: {runs[-1]['summary']}", flush=True)
    return {"reference": {"accuracy": spread, "seconds": [r["seconds"] for r in references]}, "runs": runs,
            "criterion": f"held-out accuracy >= {low:.3f} (undisturbed min {min(spread):.3f} - {args.accuracy_slack})"}


def _fresh_checkpoint(options: dict[str, Any], args: Any, solver: str, name: str) -> dict[str, Any]:
    if solver != "downpour":
        return options
    path = args.data_dir / "chaos-checkpoints" / f"{solver}-{name}"
    if path.exists():
        import shutil

        shutil.rmtree(path)
    return {**options, "checkpoint_path": path}


def _public(run: dict[str, Any], i: int) -> dict[str, Any]:
    """What the report keeps of a run (no parameter vectors)."""
    kept = {k: v for k, v in run.items() if k not in ("x",)}
    kept["run"] = i
    events = ", ".join(f"{e['event']}@{e['at']}s" + (" (skipped)" if "skipped" in e else "") for e in run["events"])
    kept["summary"] = (f"{'completed' if run['completed'] else 'FAILED'}; "
                       f"{'as undisturbed' if run.get('as_undisturbed') else 'differs'};"
                       f" {run['seconds']:.1f} s; leftovers {run['leftovers']}; events: {events or '-'}")
    return kept


def totals(part: dict[str, Any]) -> dict[str, Any]:
    runs = part["runs"]
    return {
        "runs": len(runs),
        "completed": sum(r["completed"] for r in runs),
        "as_undisturbed": sum(r.get("as_undisturbed", False) for r in runs),
        "with_leftovers": sum(any(r["leftovers"].values()) for r in runs),
        "events": sum(len(r["events"]) for r in runs),
        "not_due": sum(r["scheduled"] - len(r["events"]) for r in runs),
        "skipped_events": sum("skipped" in e for r in runs for e in r["events"]),
        "median_seconds": float(np.median([r["seconds"] for r in runs])) if runs else float("nan"),
        "recoveries": len(recovered := recovery_seconds(runs)),
        "median_recovery_seconds": float(np.median(recovered)) if recovered else float("nan"),
        "moves": sum((r.get("recoveries") or {}).get("shards_moved", 0) for r in runs),
    }


def recovery_seconds(runs: list[dict[str, Any]]) -> list[float]:
    """How long each recovery the solvers report took: a Downpour shard restored or handed
    over, a restart round of the peer methods (Sandblaster reports none: a lost portion is
    simply computed again, inside the evaluation)."""
    return [entry["seconds"] for r in runs for key in ("shard_recoveries", "shard_handovers", "replica_restarts")
            for entry in (r.get("recoveries") or {}).get(key, [])]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="disturbed runs of Sandblaster and of Downpour")
    parser.add_argument("--peer-runs", type=int, default=4, help="disturbed runs of each peer method")
    parser.add_argument("--reference-runs", type=int, default=3, help="undisturbed runs per replica method")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--maxiter", type=int, default=15)
    parser.add_argument("--accuracy-slack", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solvers", nargs="+", default=["sandblaster", "downpour", *PEERS],
                        choices=["sandblaster", "downpour", *PEERS])
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--from-results", action="store_true", help="redraw the report from results/chaos.json")
    args = parser.parse_args(argv)
    if args.from_results:
        out = json.loads((RESULTS / "chaos.json").read_text())
        for part in out["parts"].values():
            part["totals"] = totals(part)
        write_report("chaos", render(out, args))
        return
    command = " ".join(["python -m benchmarks.chaos", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict[str, Any] = {"command": command, "machine": machine(), "parts": {}}
    if "sandblaster" in args.solvers:
        out["parts"]["sandblaster"] = sandblaster(args)
    splits = make_dataset("multinomial", args.data_dir / "chaos-multinomial", rows=8000, features=10, n_classes=3,
                          shard_rows=2000, seed=4, overwrite=True)
    for solver in args.solvers:
        if solver == "downpour":
            out["parts"][solver] = replicas(args, splits, solver, args.runs,
                                            {"n_param_shards": 2, "checkpoint_every": 40})
        elif solver in PEERS:
            out["parts"][solver] = replicas(args, splits, solver, args.peer_runs, {})
    for part in out["parts"].values():
        part["totals"] = totals(part)
    write_result("chaos", out)
    report = render(out, args)
    write_report("chaos", report)
    print(report)


def _recoveries_cell(t: dict[str, Any]) -> str:
    return f"{t['recoveries']}, {t['median_recovery_seconds']:.2f}" if t["recoveries"] else "-"


def render(out: dict[str, Any], args: Any) -> str:
    lines = [
        *report_header("Chaos benchmark: workers killed, retired and added under every solver", out["command"],
                       out["machine"]),
        f"Each run: a fresh embedded cluster of {args.workers} single-thread workers (under nannies: a killed "
        "worker comes back as a new one); 1-3 seeded events (kill, retire, scale-down, scale-up) at random times "
        "within the first 80% of the undisturbed run's duration; never below 2 workers. "
        "Sandblaster: logistic 24,000 x 20 in 8 "
        f"shards, {args.maxiter} iterations, 25 ms per portion. Replica methods: softmax 8,000 x 10, 3 classes, 2 "
        "replicas, 3 epochs, 3 ms per mini-batch; Downpour with 2 parameter shards and a checkpoint every 40 steps.",
        "",
        "| solver | runs | completed | as undisturbed | criterion | runs with leftovers | events done (skipped, "
        "not due) | median run (s) | undisturbed (s) | recoveries: count, median (s) | shards moved |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, part in out["parts"].items():
        t, ref = part["totals"], part["reference"]
        ref_seconds = ref["seconds"] if isinstance(ref["seconds"], float) else float(np.median(ref["seconds"]))
        lines.append(f"| {name} | {t['runs']} | **{t['completed']}** | **{t['as_undisturbed']}** | {part['criterion']} "
                     f"| {t['with_leftovers']} | {t['events']} ({t['skipped_events']}, {t['not_due']}) "
                     f"| {t['median_seconds']:.1f} "
                     f"| {ref_seconds:.1f} | {_recoveries_cell(t)} | {t['moves']} |")
    lines += ["", "Skipped: departures the benchmark refused because only 2 workers were left, or whose worker "
              "was already leaving. Not due: events scheduled after the run had already finished. Recoveries: "
              "Downpour's shards restored from a checkpoint or handed over, and the peer methods' restart rounds, "
              "from the coordinator's decision to the relaunch (Sandblaster recomputes lost portions inside the "
              "evaluation: its cost is in the run time). Shards moved: Sandblaster's moves to workers that joined "
              "(or to survivors, after a departure).", ""]
    for name, part in out["parts"].items():
        lines += [f"## {name}", ""]
        lines += [f"- run {r['run']}: {r['summary']}" + (f"; recoveries: {r['recoveries']}" if r.get("recoveries")
                                                          else "") + (f"; error: {r['message']}" if not r["completed"]
                                                                      else "")
                  for r in part["runs"]]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
