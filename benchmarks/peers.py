"""A Jin-style comparison: Downpour against synchronous and decentralized data parallelism.

    python -m benchmarks.peers                          # as recorded in RESULTS-peers.md
    python -m benchmarks.peers --epochs 1 --rows 20000  # a quick look

1. On the acoustic-like task (MLP, the same data, batches, starting point and cluster):
   held-out frame accuracy against wall time for synchronous all-reduce SGD, Downpour +
   Adagrad, EASGD, gossip (pull) and neighbour exchange (ring with 2 replicas, 2 x 2
   torus with 4), each with 1, 2 and 4 replicas; time to a target accuracy; a plot.
2. A cost model of one replica step per method, from times measured here: the gradient
   of one mini-batch (median and spread over batches), and an actor call between worker
   processes with a tiny and with a full-parameter payload (latency and per-byte cost).
   It is checked against the measured step times at 1 and 2 replicas and projects each
   method's step time and throughput to 16-256 workers, with the measured loopback
   costs and with an assumed 10 Gbit/s network.

Writes ``benchmarks/results/peers.json``, ``benchmarks/RESULTS-peers.md`` and
``benchmarks/peers-accuracy-vs-time.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import (
    HERE,
    OUT,
    RESULTS,
    accuracy_curve,
    acoustic_splits,
    machine,
    pyplot,
    save_figure,
    time_to,
    write_report,
    write_result,
)
from dasklbfgs import connect, downpour_sgd, easgd, gossip_sgd, neighbour_sgd, sync_sgd
from dasklbfgs.models import MLP
from dasklbfgs.optim.updates import make_rule
from dasklbfgs.solvers._replicas.mailbox import PeerMailbox

METHODS = ("sync SGD", "Downpour + Adagrad", "EASGD", "gossip", "neighbours")
PROJECT_TO = (16, 32, 64, 128, 256)


def run_method(name: str, replicas: int, model, train, test, x0, args, client) -> Any:
    common = dict(client=client, x0=x0, n_replicas=replicas, batch_size=args.batch_size, epochs=args.epochs,
                  eval_data=test, eval_every=args.eval_every, defer_eval=True, poll_interval=0.02)
    if name == "sync SGD":  # one step per p batches: the linear scaling rule keeps the rate per example
        return sync_sgd(model, train, learning_rate=args.sgd_rate * replicas, **common)
    if name == "Downpour + Adagrad":
        return downpour_sgd(model, train, n_param_shards=2, learning_rate=args.adagrad_rate, **common)
    if name == "EASGD":
        return easgd(model, train, tau=args.tau, learning_rate=args.sgd_rate, **common)
    if name == "gossip":
        return gossip_sgd(model, train, learning_rate=args.sgd_rate, **common)
    topology = "torus" if replicas == 4 else "ring"
    return neighbour_sgd(model, train, topology=topology, learning_rate=args.sgd_rate, **common)


def _bytes_moved(stats: dict) -> int:
    """Parameters and gradients sent anywhere: to shards or the center, or between replicas."""
    if "bytes_between_replicas" in stats:
        return stats["bytes_between_replicas"] + 2 * stats["center_bytes_in"]
    return stats["bytes_in"] + stats["bytes_out"]


def comparison(client, args, model, train, test) -> dict:
    """Every (method, replicas) run ``args.runs`` times; medians of times, the median run's curve."""
    x0 = model.init_params(0)
    runs: dict[str, dict] = {}
    for replicas in args.replicas:
        for name in METHODS:
            repeats = []
            for _ in range(args.runs):
                result = run_method(name, replicas, model, train, test, x0, args, client)
                stats = result.stats
                repeats.append({
                    "curve": accuracy_curve(result.history), "final": result.history[-1]["eval_accuracy"],
                    "seconds": stats["wall_seconds"], "steps": result.nit,
                    "ms_per_step": 1e3 * stats["seconds_per_step"],
                    "ms_computing": 1e3 * stats["seconds_computing_per_step"],
                    "bytes_moved": _bytes_moved(stats),
                })
            runs[f"{name}|{replicas}"] = {"method": name, "replicas": replicas, "repeats": repeats}
            print(f"{name:<20} {replicas} replicas: final {[round(r['final'], 3) for r in repeats]}, "
                  f"{[round(r['seconds'], 1) for r in repeats]} s", flush=True)
    best = max(statistics.median(r["final"] for r in run["repeats"]) for run in runs.values())
    target = round(args.target_fraction * best, 3)
    for run in runs.values():
        times = [time_to(r["curve"], target) for r in run["repeats"]]
        reached = sorted(t for t in times if t is not None)
        # the median over repeats, counting a run that never reached the target as slowest
        run["seconds_to_target"] = reached[len(times) // 2] if len(reached) > len(times) // 2 else None
        run["seconds_to_target_range"] = (reached[0], reached[-1]) if reached else None
        run["reached"] = f"{len(reached)}/{len(times)}"
        for key in ("final", "seconds", "ms_per_step", "ms_computing", "bytes_moved"):
            run[key] = statistics.median(r[key] for r in run["repeats"])
        run["steps"] = run["repeats"][0]["steps"]
        run["curve"] = sorted(run["repeats"], key=lambda r: r["seconds"])[len(run["repeats"]) // 2]["curve"]
    return {"target": target, "runs": runs, "train_rows": train.n_samples, "test_rows": test.n_samples}


# -- the cost model ---------------------------------------------------------------------------

def _time_calls(mailbox, payload, repeats: int) -> float:
    """Median seconds of one actor call carrying ``payload``, from a task on another worker."""
    times = []
    for i in range(repeats + 3):
        t0 = time.perf_counter()
        mailbox.put(("probe", i), payload).result()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:])


def _gradient_times(model, X, y, batch_size: int) -> list[float]:
    """Seconds of each mini-batch gradient plus update, in the process it runs in."""
    params = model.init_params(0)
    rule = make_rule("sgd", learning_rate=0.01)
    times = []
    for k in range(X.shape[0] // batch_size):
        t0 = time.perf_counter()
        loss, sums = model.loss_grad_sum(params, X[k * batch_size:(k + 1) * batch_size],
                                         y[k * batch_size:(k + 1) * batch_size])
        _, gradient = model.objective_from_sums(params, loss, sums, batch_size)
        params += rule.update(gradient, {})[0]
        times.append(time.perf_counter() - t0)
    return times[4:]  # warm-up


def measure_costs(client, model, train, args) -> dict:
    """In a worker: one step's gradient and update (median, spread); an actor call's
    latency and cost per byte between worker processes."""
    b = args.batch_size
    X, y = train.load_rows(0, min(64 * b, train.n_samples))
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    X, y = client.scatter([X, y], workers=[workers[0]])
    steps = client.submit(_gradient_times, model, X, y, b, workers=[workers[0]], pure=False).result()
    box = client.submit(PeerMailbox, 0, actor=True, workers=[workers[-1]], pure=False).result()
    sizes = [1, *(model.n_params * k // 4 for k in (1, 2, 3, 4))]
    calls = client.submit(lambda m: [_time_calls(m, np.zeros(n), args.repeats) for n in sizes], box,
                          workers=[workers[0]], pure=False).result()
    # a line through (bytes, median seconds) of five payload sizes: latency + bytes x cost per byte
    per_byte, latency = np.polyfit([8 * n for n in sizes], calls, 1)
    return {
        "step_seconds": statistics.median(steps),
        "step_cv": statistics.pstdev(steps) / statistics.mean(steps),
        "latency_seconds": float(max(latency, calls[0])),
        "seconds_per_byte": float(max(per_byte, 0.0)),
        "call_seconds": dict(zip((8 * n for n in sizes), calls)),
        "param_bytes": 8 * model.n_params,
        "batch_size": b,
    }


def step_time(method: str, p: int, c: dict, tau: int, latency: float, per_byte: float) -> float:
    """Modelled seconds per replica step with ``p`` workers, one replica each.

    Compute is the measured gradient and update of one step in a worker; a message of the
    parameters costs ``latency + bytes * per_byte``. Synchronous SGD waits for the slowest
    of p steps (mean + spread * sqrt(2 ln p)) and for a message up and one down each of
    log2(p) tree levels. Downpour pushes and fetches over P = ceil(p / 4) shards in one
    round trip, and each shard must absorb its p / P replicas' traffic. EASGD exchanges
    with one center every tau steps, and the center absorbs everyone's. Gossip waits for
    one peer's parameters per step. Neighbour exchange sends its gradient to k neighbours
    (1 with 2 replicas, 2 on a ring of 3, 4 on a torus) while it computes the next step.
    """
    compute, message = c["step_seconds"], latency + c["param_bytes"] * per_byte
    transfer = c["param_bytes"] * per_byte
    if method == "sync SGD":
        if p == 1:
            return compute
        slowest = compute * (1 + c["step_cv"] * math.sqrt(2 * math.log(p)))
        return slowest + 2 * math.ceil(math.log2(p)) * message
    if method == "Downpour + Adagrad":
        shards = math.ceil(p / 4)
        return max(compute + latency + 2 * transfer, 2 * transfer * p / shards)
    if method == "EASGD":
        return max(compute + (latency + 2 * transfer) / tau, 2 * transfer * p / tau)
    if method == "gossip":
        return compute if p == 1 else compute + message
    k = 0 if p == 1 else 1 if p == 2 else 2 if p == 3 else 4
    return max(compute, k * message)


LOADED = "loopback under load"


def project(costs: dict, comparison: dict, args) -> dict:
    """Step times for p workers with three message costs: the idle probe; the cost a
    message had inside the training runs (2 cores shared by replicas, event loops and the
    coordinator), fitted to sync SGD at 2 replicas, where a step is one message up and one
    down; and an assumed 10 Gbit/s network with 50 us latency."""
    networks = {"idle loopback probe": (costs["latency_seconds"], costs["seconds_per_byte"]),
                "10 Gbit/s, 50 us": (50e-6, 8 / 10e9)}
    sync2 = comparison["runs"].get("sync SGD|2")
    if sync2:
        loaded = max(sync2["ms_per_step"] - sync2["ms_computing"], 0.0) / 2e3
        networks[LOADED] = (loaded, 0.0)
        costs["loaded_message_seconds"] = loaded
    return {label: {m: {p: step_time(m, p, costs, args.tau, latency, per_byte) for p in (1, 2, 4, *PROJECT_TO)}
                    for m in METHODS}
            for label, (latency, per_byte) in networks.items()}


# -- the report -------------------------------------------------------------------------------

def plot(out, path: Path) -> None:
    plt = pyplot()

    counts = sorted({r["replicas"] for r in out["comparison"]["runs"].values()})
    fig, axes = plt.subplots(1, len(counts), figsize=(4.2 * len(counts), 4), sharey=True, squeeze=False)
    for ax, replicas in zip(axes[0], counts):
        for r in out["comparison"]["runs"].values():
            if r["replicas"] == replicas and r["curve"]:
                t, a = zip(*r["curve"])
                ax.plot(t, a, label=r["method"])
        ax.axhline(out["comparison"]["target"], color="grey", linestyle=":")
        ax.set_title(f"{replicas} replica{'s' if replicas > 1 else ''}")
        ax.set_xlabel("wall time (s)")
    axes[0][0].set_ylabel("held-out frame accuracy")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle("Acoustic-like task, MLP, 2 workers x 1 thread")
    save_figure(fig, path)


def render(out, args) -> str:
    m, cmp, c = out["machine"], out["comparison"], out["costs"]

    def secs(v):
        return "not reached" if v is None else f"{v:.1f}"

    lines = [
        "# Downpour vs synchronous and decentralized data parallelism", "",
        f"Command: `{out['command']}`"
        + (f" (training runs recorded by `{out['runs_command']}`)" if out["runs_command"] != out["command"] else ""),
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
        + ", ".join(f"{a} {b}" for a, b in m["versions"].items()), "",
        "**What 2 cores can and cannot show.** The embedded cluster has 2 single-thread workers on 2 cores, and "
        "the coordinator shares them (held-out scoring is deferred to after each run, `defer_eval=True`). "
        "2 replicas use the machine; 4 replicas oversubscribe it "
        "(two per worker, time-sliced), so 4-replica runs measure each method's statistical behaviour with more, "
        "staler or smaller-share replicas, not a speed-up. Messages travel over loopback TCP between processes, "
        "far cheaper in latency than a network, and there is no network contention. The cost model below is the "
        "tool for larger clusters; it is a projection, not a measurement.", "",
        "## Held-out accuracy vs time (acoustic-like task)", "",
        f"{out['model']}, {cmp['train_rows']:,} training frames, {cmp['test_rows']:,} held out; batch "
        f"{args.batch_size} per replica, {args.epochs} epochs per replica, the same starting point. SGD rate "
        f"{args.sgd_rate} (sync SGD: {args.sgd_rate} x replicas, the linear scaling rule, since it takes one step "
        f"per p batches) for EASGD (tau {args.tau}, alpha 0.9 / replicas), gossip and neighbours; "
        f"Adagrad rate {args.adagrad_rate} at Downpour's 2 shards. Neighbours: a ring with 2 replicas, a 2 x 2 "
        f"torus with 4. Target: {args.target_fraction:.0%} of the best final accuracy = **{cmp['target']:.3f}**. "
        "Plot: [peers-accuracy-vs-time.png](peers-accuracy-vs-time.png).", "",
        f"Each (method, replicas) ran {args.runs} times: medians, with the range of times to target; a run "
        "that never reached the target counts as the slowest.", "",
        "| method | replicas | seconds to target (range) | reached | final accuracy | seconds | global steps "
        "| ms per replica step (computing) | MB moved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(cmp["runs"].values(), key=lambda r: (r["replicas"], METHODS.index(r["method"]))):
        spread = r["seconds_to_target_range"]
        span = f" ({spread[0]:.1f}-{spread[1]:.1f})" if spread else ""
        lines.append(f"| {r['method']} | {r['replicas']} | {secs(r['seconds_to_target'])}{span} | {r['reached']} | "
                     f"{r['final']:.3f} | {r['seconds']:.1f} | {r['steps']} | {r['ms_per_step']:.2f} "
                     f"({r['ms_computing']:.2f}) | {r['bytes_moved'] / 1e6:.0f} |")
    lines += ["", "Time to target, 2 replicas / 1 replica of the same method:", ""]
    for name in METHODS:
        one, two = (cmp["runs"].get(f"{name}|{k}", {}).get("seconds_to_target") for k in (1, 2))
        ratio = f"{two / one:.2f}" if one and two else "n/a (a run did not reach the target)"
        lines.append(f"- {name}: {ratio}")
    lines += [
        "", "Sync SGD applies one update per p mini-batches (one large batch), so with more replicas it takes "
        "fewer, larger steps per epoch; the asynchronous methods take one step per replica mini-batch.", "",
        "## Cost model of one replica step", "",
        f"Measured here, in a worker: the gradient and SGD update of one {c['batch_size']}-row mini-batch "
        f"{1e3 * c['step_seconds']:.2f} ms (coefficient of variation {c['step_cv']:.2f}); an actor call between "
        "worker processes "
        f"{1e3 * c['latency_seconds']:.2f} ms plus {1e9 * c['seconds_per_byte']:.2f} ns per byte (a line "
        "through the medians of 5 payload sizes up to the parameters' "
        f"{c['param_bytes'] / 1e6:.1f} MB). The model (`step_time` in `benchmarks/peers.py`): sync SGD waits "
        "for the slowest of p steps (mean + spread x sqrt(2 ln p)) and a message up and down each of log2(p) "
        "tree levels; Downpour pushes and fetches over ceil(p/4) shards in one round trip, each shard absorbing "
        "its replicas' traffic; EASGD exchanges with one center every tau steps; gossip waits for one peer's "
        "parameters per step; neighbours send to 1 (2 replicas), 2 (ring of 3) or 4 (torus) neighbours while "
        "computing.", "",
        "Inside the training runs a message cost far more than in the idle probe: 2 cores carry the replicas, "
        "the workers' event loops (which serialise and deliver the messages) and the coordinator. Fitted to "
        "sync SGD at 2 replicas (one message up and one down per step), a message cost "
        f"**{1e3 * c.get('loaded_message_seconds', float('nan')):.2f} ms** under load. With that cost the model "
        "against the measured runs (ms per replica step in the training loop; sync SGD at 2 replicas matches "
        "by construction):", "",
        "| method | 1 replica model | 1 replica measured | 2 replicas model | 2 replicas measured |",
        "|---|---:|---:|---:|---:|",
    ]
    loop = out["projection"].get(LOADED, out["projection"]["idle loopback probe"])
    for name in METHODS:
        meas = [cmp["runs"].get(f"{name}|{k}", {}).get("ms_per_step") for k in (1, 2)]
        cells = [f"{1e3 * loop[name][k]:.2f}" for k in (1, 2)]
        lines.append(f"| {name} | {cells[0]} | {'' if meas[0] is None else f'{meas[0]:.2f}'} | {cells[1]} | "
                     f"{'' if meas[1] is None else f'{meas[1]:.2f}'} |")
    ratios = [1e3 * loop[n][2] / cmp["runs"][f"{n}|2"]["ms_per_step"] for n in METHODS if f"{n}|2" in cmp["runs"]]
    if ratios:
        lines += ["", f"At 2 replicas the model gives {min(ratios):.2f}x to {max(ratios):.2f}x the measured step "
                  "time: it counts messages and compute, not the contention of two busy processes and their event "
                  "loops on two cores, which costs the methods that message every step most."]
    lines.append("")
    for label, table in out["projection"].items():
        lines += [f"### Projected examples/s with p workers ({label})", "",
                  "| method | " + " | ".join(f"p = {p}" for p in PROJECT_TO) + " |",
                  "|---|" + "---:|" * len(PROJECT_TO)]
        for name in METHODS:
            lines.append(f"| {name} | " + " | ".join(
                f"{p * c['batch_size'] / table[name][p]:,.0f}" for p in PROJECT_TO) + " |")
        lines.append("")
    lines += [
        "Throughput is not time to accuracy: a projection of examples/s says nothing about how many examples "
        "each method needs at that scale (sync SGD's batch grows with p; asynchronous methods grow staler). "
        "Jin et al. found the asynchronous methods ahead up to about 32 nodes and all-reduce ahead beyond; "
        "the model shows the communication side of that: gossip and neighbour exchange stay flat, sync pays "
        "log2(p) hops and the slowest worker, and a parameter server or center saturates unless it is sharded "
        "with p.", "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--sgd-rate", type=float, default=0.05)
    parser.add_argument("--adagrad-rate", type=float, default=0.01)
    parser.add_argument("--tau", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=150)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--target-fraction", type=float, default=0.85)
    parser.add_argument("--repeats", type=int, default=30, help="actor calls timed for the cost model")
    parser.add_argument("--runs", type=int, default=3, help="runs of each (method, replicas)")
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    parser.add_argument("--reuse-runs", action="store_true",
                        help="take the training runs from results/peers.json; measure the costs again")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.peers", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    splits = acoustic_splits(args.data_dir, args.rows, args.classes)
    train, test = splits["train"], splits["test"]
    model = MLP(440, tuple(args.hidden), args.classes, activation="relu", l2=1e-6)
    out: dict = {"command": command, "machine": machine(), "model": repr(model)}
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        out["costs"] = measure_costs(client, model, train, args)
        if args.reuse_runs:
            previous = json.loads((RESULTS / "peers.json").read_text())
            out["comparison"] = previous["comparison"]
            out["runs_command"] = previous.get("runs_command", previous["command"])
        else:
            out["runs_command"] = command
            out["comparison"] = comparison(client, args, model, train, test)
    out["projection"] = project(out["costs"], out["comparison"], args)
    write_result("peers", out)
    plot(out, OUT / "peers-accuracy-vs-time.png")
    report = render(out, args)
    write_report("peers", report)
    print(report)


if __name__ == "__main__":
    main()
