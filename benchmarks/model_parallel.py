"""One model replica partitioned over workers: its training throughput against K (model parallelism).

    python -m benchmarks.model_parallel                          # as recorded in RESULTS-model-parallel.md
    python -m benchmarks.model_parallel --models small --steps 3 # a quick look

On a 2-worker embedded cluster (one thread each; Dask's nannies make BLAS single-threaded),
for each model: one replica's mini-batch steps with K = 1 and K = 2 partitions, each
partition an actor on its own worker (:mod:`dasklbfgs.parallel`). A step is what a Downpour
replica does between its fetch and its push: forward and backward over a batch at
parameters kept on the partitions, the gradient sums accrued there; only the rows go out
and only the loss comes back. Measured in one run: examples per second (median step),
K = 2 with two mini-batches in flight at once (pipelined through the partitions), the bytes
each partition sends per step, and the plain ``loss_grad_sum`` of the whole model inside a
worker (the compute, without the runtime).

Models: ``speech``, the paper's acoustic model shape (440 inputs, 4 x 2560 sigmoid units, a
softmax over 8192 labels: 42M parameters, float32 data); ``small`` (440 -> 2 x 512 -> 128);
``local``, a locally connected image autoencoder (LocalAutoencoder on 32 x 32 images), whose
partitions exchange only a halo -- its bytes are set beside what an all-gather of its hidden
layer would move; ``dense``, the same units fully connected (1024 -> 784 -> 1024, a softmax
output), set beside it for bytes and throughput.

Cost model (a projection, not a measurement): a step of K partitions takes
``C / K + o + exchanges x e + bytes / bandwidth``, with ``C`` the compute of one step (the
K = 1 step less the runtime's overhead ``o``), the exchanges' count and the busiest
partition's bytes taken from the partition programs themselves (run in one process on a few
rows and scaled to the batch), the bandwidth of one worker-to-worker message measured in the
same run (loopback on this machine), and ``e``, the cost of an exchange beyond its bytes,
fitted to the measured K = 2 step. Drawn for K = 1..64 beside the paper's Figure 3 (the
speech model: about 2.2x on 8 machines, slower beyond).

Writes ``benchmarks/results/model_parallel.json``, ``benchmarks/RESULTS-model-parallel.md``
and ``benchmarks/model-parallel.png``; ``--from-results`` redraws from the recorded JSON.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import OUT, machine, publish, pyplot, read_result, report_header, save_figure

MODELS = ("speech", "small", "local", "dense")
BATCH = {"speech": 128, "small": 256, "local": 256, "dense": 256}
PROJECTED_K = (1, 2, 4, 8, 16, 32, 64)
PAPER_SPEECH = (8, 2.2)  # Dean et al. 2012, Figure 3: the speech model's speed-up on 8 machines
MESSAGE_BYTES = (8 * 1024, 1024**2, 8 * 1024**2)  # sizes the latency and bandwidth are fitted on
SCALE_ROWS = 8  # rows the partition programs are run on in one process to count bytes and exchanges


def build(name: str) -> Any:
    from dasklbfgs.models import MLP, LocalAutoencoder

    return {"speech": lambda: MLP(440, (2560,) * 4, 8192), "small": lambda: MLP(440, (512, 512), 128),
            "local": lambda: LocalAutoencoder(32, window=8, stride=4, maps=16),
            # local's units fully connected: 1024 inputs, its 7 x 7 x 16 hidden units, 1024 outputs
            "dense": lambda: MLP(1024, (784,), 1024)}[name]()


def batch(model: Any, rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Float32 rows (pixels in (0.1, 0.9) for the autoencoder) and labels."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, model.n_features)).astype(np.float32)
    if model.task == "reconstruction":
        X = (0.1 + 0.8 / (1.0 + np.exp(-X))).astype(np.float32)
    return X, rng.integers(0, getattr(model, "n_classes", 1), rows)


# -- measurements on the cluster ----------------------------------------------------------------

class Pinger:
    """An actor sending arrays to a peer actor: one worker-to-worker message's time."""

    async def connect(self, peer: Any) -> None:
        self.peer = peer

    async def take(self, array: np.ndarray) -> None:
        return None

    async def send(self, nbytes: int, rounds: int) -> float:
        array = np.ones(nbytes // 8)
        await self.peer.take(array)  # a connection is opened once
        started = time.perf_counter()
        for _ in range(rounds):
            await self.peer.take(array)
        return (time.perf_counter() - started) / rounds


def message_costs(client: Any, workers: list[str]) -> dict[str, float]:
    """Latency (s) and bandwidth (bytes/s) of one message between two workers, fitted on
    ``MESSAGE_BYTES``-sized messages."""
    a, b = (client.submit(Pinger, actor=True, workers=[w], pure=False).result() for w in workers[:2])
    a.connect(b).result()
    seconds = [statistics.median(a.send(n, 20).result() for _ in range(3)) for n in MESSAGE_BYTES]
    slope, latency = np.polyfit(MESSAGE_BYTES, seconds, 1)
    return {"latency": max(float(latency), 0.0), "bandwidth": 1.0 / float(slope),
            "seconds": dict(zip(map(str, MESSAGE_BYTES), seconds))}


def compute_step(model: Any, params: np.ndarray, X: np.ndarray, y: np.ndarray, steps: int) -> float:
    """Median seconds of the whole model's ``loss_grad_sum`` (run inside a worker)."""
    model.loss_grad_sum(params, X, y)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        model.loss_grad_sum(params, X, y)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def replica_steps(client: Any, model: Any, k: int, workers: list[str], X: np.ndarray, y: np.ndarray,
                  steps: int) -> dict[str, Any]:
    """One replica of ``k`` partitions: median step seconds, with two batches in flight
    (``k > 1``), and the bytes each partition sent per step."""
    from dasklbfgs.parallel import partition
    from dasklbfgs.parallel.replica import PartitionedReplica

    with PartitionedReplica(client, partition(model, k), workers[:k]) as replica:
        replica.set_params(model.init_params(0))
        replica.accrue(X, y)  # warm-up
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            replica.accrue(X, y)
            times.append(time.perf_counter() - started)
        out: dict[str, Any] = {"step_seconds": statistics.median(times),
                               "examples_per_second": X.shape[0] / statistics.median(times)}
        sent = [s["bytes_sent"] / s["evaluations"] for s in replica.stats()]
        out["bytes_per_partition_per_step"] = max(sent)
        if k > 1:
            started = time.perf_counter()
            threads = [threading.Thread(target=lambda: [replica.accrue(X, y) for _ in range(steps)])
                       for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out["pipelined_examples_per_second"] = 2 * steps * X.shape[0] / (time.perf_counter() - started)
        replica.take_accrued()
    return out


def measure(name: str, steps: int) -> dict[str, Any]:
    from dasklbfgs import connect

    model = build(name)
    X, y = batch(model, BATCH[name])
    params = model.init_params(0)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        workers = sorted(client.scheduler_info()["workers"])
        out: dict[str, Any] = {"n_params": model.n_params, "batch": BATCH[name], "model": repr(model)}
        [params_there] = client.scatter([params], workers=[workers[0]], hash=False)  # not inside the graph
        out["compute_seconds"] = client.submit(compute_step, model, params_there, X, y, steps, workers=[workers[0]],
                                               pure=False).result()
        del params_there
        out["messages"] = message_costs(client, workers)
        out["k"] = {str(k): replica_steps(client, model, k, workers, X, y, steps) for k in (1, 2)}
    out["programs"] = program_counts(model, params, X, y)
    out["projection"] = project(out)
    return out


# -- the cost model -------------------------------------------------------------------------------

def program_counts(model: Any, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> dict[str, dict[str, float]]:
    """Per K: exchanges per step and the bytes the busiest partition sends per step (scaled
    from ``SCALE_ROWS`` rows to the batch), from the partition programs run in one process."""
    from dasklbfgs.errors import PartitionError
    from dasklbfgs.parallel import partition, run_in_process

    counts = {}
    rows = slice(0, SCALE_ROWS)
    for k in PROJECTED_K:
        try:
            split = partition(model, k)
        except PartitionError:  # more partitions than a layer has units (or grid rows)
            continue
        run = run_in_process([split.program(p, part, X[rows], y[rows]) for p, part in enumerate(split.split(params))])
        keys = {key for sent in run.bytes_sent for key in sent}
        busiest = max(sum(sent.values()) for sent in run.bytes_sent)
        counts[str(k)] = {"exchanges": len(keys), "bytes": busiest * X.shape[0] / SCALE_ROWS}
    return counts


def project(out: dict[str, Any]) -> dict[str, float]:
    """Projected speed-up over K = 1 for each K the programs were counted for; the cost of an
    exchange beyond its bytes is fitted to the measured K = 2 step (it holds the runtime's
    own costs per exchange: thread hand-offs, serialisation, the event loop), never below one
    message's measured latency."""
    one, two = out["k"]["1"]["step_seconds"], out["k"]["2"]["step_seconds"]
    overhead = max(one - out["compute_seconds"], 0.0)
    compute = one - overhead
    bandwidth = out["messages"]["bandwidth"]
    at_two = out["programs"]["2"]
    per_exchange = max((two - compute / 2 - overhead - at_two["bytes"] / bandwidth) / at_two["exchanges"],
                       out["messages"]["latency"])
    out["per_exchange_seconds"] = per_exchange
    speedup = {}
    for k, c in out["programs"].items():
        exchange = 0.0 if k == "1" else c["exchanges"] * per_exchange + c["bytes"] / bandwidth
        speedup[k] = one / (compute / int(k) + overhead + exchange)
    return speedup


# -- report ---------------------------------------------------------------------------------------

def render(out: dict) -> str:
    lines = report_header("Model parallelism: one replica's throughput against its partitions", out["command"],
                          out["machine"])
    lines += ["One replica's mini-batch steps (forward, backward, gradient sums accrued on the partitions) on "
              "a 2-worker cluster, one thread each; K partitions on K workers. Speed-ups are against K = 1 "
              "in the same run.", "",
              "| model | parameters | batch | K | examples/s | speed-up | two batches in flight: examples/s | "
              "bytes a partition sends per step | projected K = 2 |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, r in out["models"].items():
        if "k" not in r:
            lines.append(f"| {name} | failed: {r.get('failed')} | | | | | | | |")
            continue
        one = r["k"]["1"]["examples_per_second"]
        for k, m in r["k"].items():
            pipelined = m.get("pipelined_examples_per_second")
            in_flight = "" if pipelined is None else f"{pipelined:,.0f} ({pipelined / one:.2f}x)"
            projected = "" if k == "1" else f"{r['projection'].get(k, float('nan')):.2f}x"
            lines.append(
                f"| {name} | {r['n_params']:,} | {r['batch']} | {k} | {m['examples_per_second']:,.0f} | "
                f"{m['examples_per_second'] / one:.2f}x | {in_flight} | "
                f"{m['bytes_per_partition_per_step'] / 2**20:.2f} MiB | {projected} |")
    lines += ["", "Compute alone (the whole model's `loss_grad_sum` in a worker) and one message between the "
              "two workers, measured in the same run:", "",
              "| model | compute per step s | K = 1 step s | runtime overhead s | message latency ms | "
              "message bandwidth GB/s | exchange cost fitted at K = 2, ms |", "|---|---|---|---|---|---|---|"]
    for name, r in out["models"].items():
        if "k" in r:
            m = r["messages"]
            lines.append(f"| {name} | {r['compute_seconds']:.4f} | {r['k']['1']['step_seconds']:.4f} | "
                         f"{max(r['k']['1']['step_seconds'] - r['compute_seconds'], 0):.4f} | "
                         f"{m['latency'] * 1e3:.2f} | {m['bandwidth'] / 1e9:.2f} | "
                         f"{r['per_exchange_seconds'] * 1e3:.2f} |")
    local = out["models"].get("local", {})
    if "programs" in local and "2" in local["programs"]:
        model = build("local")
        all_gather = (model.grid * model.grid * model.maps) / 2 * local["batch"] * 8  # half the hidden layer
        lines += ["", f"Locally connected (`local`, K = 2): a partition sends "
                  f"{local['programs']['2']['bytes'] / 2**10:.0f} KiB a step (its halo); an all-gather of the "
                  f"hidden layer, as a fully connected layer above it would need, would send "
                  f"{all_gather / 2**10:.0f} KiB."]
    lines += connectivity(out["models"])
    lines += ["", "Projection ([model-parallel.png](model-parallel.png)): speed-up = K = 1 step / (compute / K "
              "+ runtime overhead + exchanges x exchange cost + bytes / bandwidth), with this machine's loopback "
              "bandwidth, the exchange cost fitted at K = 2 and each K's exchanges and bytes from the partition "
              "programs; the paper's machines and network differ, so only the shape compares.", "",
              "| model | " + " | ".join(f"K = {k}" for k in PROJECTED_K) + " |",
              "|---|" + "---|" * len(PROJECTED_K)]
    for name, r in out["models"].items():
        if "projection" in r:
            lines.append(f"| {name} | " + " | ".join(f"{r['projection'][str(k)]:.2f}x" if str(k) in r["projection"]
                                                     else "-" for k in PROJECTED_K) + " |")
    return "\n".join(lines + [""])


def connectivity(models: dict) -> list[str]:
    """Locally against fully connected, the same units: K = 2 against K = 1, and bytes."""
    rows = [(name, models[name]) for name in ("local", "dense") if "k" in models.get(name, {})]
    if len(rows) < 2:
        return []
    lines = ["", "Locally against fully connected units (the same 1024 -> 784 -> 1024 units; `dense` has "
             "every weight, `local` windows of 8 x 8 pixels):", "",
             "| model | parameters | K = 1 examples/s | K = 2 examples/s | speed-up | bytes a partition sends "
             "per step |", "|---|---|---|---|---|---|"]
    for name, r in rows:
        one, two = (r["k"][k]["examples_per_second"] for k in ("1", "2"))
        lines.append(f"| {name} | {r['n_params']:,} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | "
                     f"{r['k']['2']['bytes_per_partition_per_step'] / 2**10:.0f} KiB |")
    return lines


def plot(out: dict, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, r in out["models"].items():
        if "projection" not in r:
            continue
        ks = [int(k) for k in r["projection"]]
        line, = ax.plot(ks, list(r["projection"].values()), linestyle="--", label=f"{name}: projected")
        one = r["k"]["1"]["examples_per_second"]
        ax.plot([int(k) for k in r["k"]], [m["examples_per_second"] / one for m in r["k"].values()], marker="o",
                linestyle="none", color=line.get_color(), label=f"{name}: measured")
    ax.plot(*PAPER_SPEECH, marker="*", markersize=12, linestyle="none", color="black",
            label="paper, speech model (Figure 3)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("partitions of one replica (machines per model)")
    ax.set_ylabel("training speed-up over K = 1")
    ax.set_title("One replica's throughput against its partitions")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--from-results", action="store_true", help="only redraw from results/model_parallel.json")
    args = parser.parse_args(argv)
    if args.from_results:
        publish("model_parallel", read_result("model_parallel"), render, plot, OUT / "model-parallel.png", False)
        return
    command = " ".join(["python -m benchmarks.model_parallel", *map(shlex.quote, argv if argv is not None else
                                                                    sys.argv[1:])])
    out: dict[str, Any] = {"command": command, "machine": machine(), "models": {}}
    for name in args.models:
        print(f"{name} ...", flush=True)
        try:
            out["models"][name] = measure(name, args.steps)
        except Exception as exc:  # noqa: BLE001 -- a model's failure is reported, the others still run
            out["models"][name] = {"failed": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
        print(f"   {out['models'][name].get('k', out['models'][name])}", flush=True)
    publish("model_parallel", out, render, plot, OUT / "model-parallel.png")


if __name__ == "__main__":
    main()
