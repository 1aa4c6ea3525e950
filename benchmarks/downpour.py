"""Downpour SGD: the cost of a fetch + push, and time to a held-out accuracy with 1 and 2 replicas.

    python -m benchmarks.downpour                     # as recorded in RESULTS-downpour.md
    python -m benchmarks.downpour --rows 20000 --heavy-rows 8000 --heavy-repeats 1   # a quick look

Two workloads for time to accuracy: softmax regression, whose steps take about a
millisecond of compute, so a step is mostly the round trip to the shards; and a
compute-heavy MLP (the paper's acoustic model in miniature: 440 inputs, wide ReLU layers),
whose steps take tens of milliseconds, as in the paper's setting. The MLP runs are
repeated, 1 and 2 replicas interleaved, and compared by the median time to the target.

Measured in one run on one machine; writes ``benchmarks/results/downpour.json`` and
``benchmarks/RESULTS-downpour.md``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks._common import (
    HERE,
    accuracy_curve,
    acoustic_splits,
    machine,
    median_seconds,
    publish,
    read_result,
    report_header,
    time_to,
)
from dasklbfgs import ShardedDataset, connect
from dasklbfgs._actors import OnWorkerLoop, bind_local, remote_first, wait_all
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.downpour import ParameterShard, downpour_sgd, param_bounds
from dasklbfgs.models import MLP, Softmax
from dasklbfgs.optim.updates import adagrad
from dasklbfgs.sandblaster import sandblaster_lbfgs
from dasklbfgs.scoring import evaluate
from dasklbfgs.solvers._replicas.batches import epoch_order
from dasklbfgs.solvers._replicas.wire import Wire


class Echo:
    """An actor that returns what it is sent: a loopback round trip by Dask's most direct means."""

    async def echo(self, x: Any) -> Any:
        return x


def _clock() -> float:
    """The system's monotonic clock (Linux: one clock for every process of the machine)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class TimedShard(ParameterShard):
    """A parameter shard that notes when each push enters and leaves its handler, and how long
    its update takes, on :func:`_clock`, which the replica's process reads too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[tuple[float, float, float]] = []  # entered, update seconds, left
        self._update_seconds = 0.0

    def _update(self, *args: Any, **kwargs: Any) -> None:
        started = _clock()
        super()._update(*args, **kwargs)
        self._update_seconds += _clock() - started

    async def push(self, *args: Any, **kwargs: Any) -> Any:
        entered, self._update_seconds = _clock(), 0.0
        reply = await super().push(*args, **kwargs)
        self.times.append((entered, self._update_seconds, _clock()))
        return reply

    async def take_times(self) -> list[tuple[float, float, float]]:
        times, self.times = self.times, []
        return times


def remote_push_timeline(timed, bounds, index, n_params, repeats):
    """A push to the remote shard alone, as a replica's step sends it (the gradient freshly
    encoded to float32, the updated slice in the reply), timed on both sides (ms, medians of
    ``repeats`` calls after 2 warm-ups): in all; in the handler, and its update; both ways
    (in all minus the handler, per call: one process's clock); and, across the processes,
    the request's way (from the call in the replica's thread, through its event loop, the
    serialization, TCP and the shard worker's dispatch, to the handler) and the reply's way
    (from the handler's return, through the reply's serialization and TCP, to the replica's
    thread)."""
    from distributed import secede

    secede()
    wire, grad = Wire(bounds, "float32"), _gradient(n_params)
    calls = []
    for _ in range(repeats + 2):
        payload = wire.payloads(grad, None)[index]
        sent = _clock()
        timed.push(payload, 0, 0, 1, 0.0, True).result()
        calls.append((sent, _clock()))
    legs = {"total": [], "handler": [], "update": [], "both_ways": [], "request": [], "reply": []}
    for (sent, got), (entered, update, left) in list(zip(calls, timed.take_times().result()))[2:]:
        for name, seconds in (("total", got - sent), ("handler", left - entered), ("update", update),
                              ("both_ways", (got - sent) - (left - entered)), ("request", entered - sent),
                              ("reply", got - left)):
            legs[name].append(seconds)
    return {name: 1e3 * float(np.median(values)) for name, values in legs.items()}


def fetch_push_seconds(shards, bounds, n_params, repeats, dtype, *, in_process=True):
    """Median time of one replica step's communication, measured inside a replica task with
    the replica's own calls: a push to every shard (remote shards first, the shard on this
    worker called in process unless ``in_process=False``) whose reply carries the updated
    slice (the fetch), the gradient encoded to ``dtype`` and the fetched values copied into
    the parameters."""
    from distributed import secede

    secede()
    shards = bind_local(shards) if in_process else shards
    wire = Wire(bounds, dtype)
    grad = _gradient(n_params)
    versions = [c.result()[1] for c in [s.fetch(dtype) for s in shards]]
    params = np.zeros(n_params)

    def step():
        payloads = wire.payloads(grad, None)
        calls = remote_first(shards, lambda i, s: s.push(payloads[i], versions[i], 0, 1, 0.0, True))
        replies = wait_all(calls)
        wire.apply_fetched(params, [r[2] for r in replies])
        versions[:] = [r[0] for r in replies]

    return median_seconds(step, repeats, warmup=2)


def _gradient(n: int) -> np.ndarray:
    """A gradient-like vector (random, so nothing on the way can shortcut constant data)."""
    return np.random.default_rng(0).standard_normal(n) * 1e-3


def exchange_parts(shards, echo, bounds, n_params, repeats):
    """What one step's float32 fetch + push is made of, measured in a replica task next to
    its limits: a memcpy of the bytes, a loopback round trip of them to the other worker,
    and each piece of the exchange alone (ms, medians)."""
    import asyncio

    from distributed import get_worker, secede
    from distributed.protocol import dumps, to_serialize

    secede()
    local = bind_local(shards)
    remote = next(i for i, s in enumerate(local) if not isinstance(s, OnWorkerLoop))
    mine = next(i for i, s in enumerate(local) if isinstance(s, OnWorkerLoop))
    grad = _gradient(n_params)
    wire = grad.astype(np.float32)
    a, b = bounds[remote]
    half, copy_into, params = wire[a:b].copy(), np.empty_like(wire), np.zeros(n_params)
    loop = get_worker().loop.asyncio_loop

    async def nothing():
        return None

    frames = dumps({"args": [to_serialize(half)]})
    zero_copy = any(np.shares_memory(np.frombuffer(f, np.uint8), half.view(np.uint8)) for f in frames
                    if memoryview(f).nbytes >= half.nbytes)
    slice_values = np.zeros(b - a)
    rule, update_slice = adagrad(0.1), wire[a:b].copy()  # float32, as a push brings it
    state = rule.init(slice_values)
    parts = {
        "memcpy": lambda: np.copyto(copy_into, wire),
        "encode": lambda: grad.astype(np.float32),
        "decode": lambda: np.copyto(params, wire),
        "serialize": lambda: dumps({"args": [to_serialize(half)]}),
        "loop_hop": lambda: asyncio.run_coroutine_threadsafe(nothing(), loop).result(),
        "empty_call": lambda: echo.echo(None).result(),
        "echo_remote_slice": lambda: echo.echo(half).result(),
        "echo_all": lambda: echo.echo(wire).result(),
        "update_slice": lambda: rule.apply(update_slice, state, slice_values),
        "reply_values": lambda: slice_values.astype(np.float32),
        "push_local": lambda: local[mine].push(wire[slice(*bounds[mine])], 0, 0, 1, 0.0, True).result(),
        "push_remote": lambda: local[remote].push(half, 0, 0, 1, 0.0, True).result(),
    }
    out = {name: 1e3 * median_seconds(fn, repeats, warmup=2) for name, fn in parts.items()}
    out["serialize_zero_copy"] = bool(zero_copy)
    out["bytes_each_way"] = int(wire.nbytes)
    out["remote_bytes_each_way"] = int(half.nbytes)
    return out


def measure_exchange(client, workers, args) -> dict:
    """Section 1: fetch + push of ``args.params`` parameters over 2 shards, its parts and its limits."""
    bounds = param_bounds(args.params, 2)
    shards = [client.submit(ParameterShard, i, a, b, np.zeros(b - a), "adagrad", {"learning_rate": 0.1},
                            actor=True, workers=[workers[i]]).result() for i, (a, b) in enumerate(bounds)]
    echo = client.submit(Echo, actor=True, workers=[workers[1]]).result()
    remote = 1  # the replica tasks run on workers[0]
    a, b = bounds[remote]
    timed_shard = client.submit(TimedShard, remote, a, b, np.zeros(b - a), "adagrad", {"learning_rate": 0.1},
                                actor=True, workers=[workers[remote]]).result()

    def in_replica(fn, *fn_args, **kwargs):
        return client.submit(fn, *fn_args, workers=[workers[0]], pure=False, **kwargs).result()

    # Rounds of every measurement, interleaved; each figure is its best round (a median of
    # ``repeats``): on a machine shared with other jobs, a round that met their load says
    # more about them than about the exchange, and all figures are taken alike.
    rounds, timelines = [], []
    for _ in range(EXCHANGE_ROUNDS):
        timed = {dtype: in_replica(fetch_push_seconds, shards, bounds, args.params, args.repeats, dtype)
                 for dtype in ("float64", "float32")}
        timed["float32_all_over_tcp"] = in_replica(fetch_push_seconds, shards, bounds, args.params, args.repeats,
                                                   "float32", in_process=False)
        rounds.append((timed, in_replica(exchange_parts, shards, echo, bounds, args.params, args.repeats)))
        timelines.append(in_replica(remote_push_timeline, timed_shard, bounds, remote, args.params, args.repeats))
    out = {"params": args.params, "shards": 2, "rounds": EXCHANGE_ROUNDS}
    out.update({key: min(timed[key] for timed, _ in rounds) for key in rounds[0][0]})
    out["parts_ms"] = {key: (min(parts[key] for _, parts in rounds) if isinstance(value, float) else value)
                       for key, value in rounds[0][1].items()}
    out["remote_push_ms"] = min(timelines, key=lambda t: t["total"])  # one round's, whole
    return out


EXCHANGE_ROUNDS = 3


def in_process_sgd(model, train, test, *, batch_size, learning_rate, epochs, eval_every, target, seed, x0=None):
    """The Downpour loop with one replica and the shards in this process, on one thread.
    Returns (seconds to ``target``, steps, accuracy); scoring is not timed."""
    X, y = train.load_rows(0, train.n_samples)
    rule = adagrad(learning_rate)
    w = np.zeros(model.n_params) if x0 is None else np.array(x0, dtype=np.float64)
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
                    paused = time.perf_counter()
                    accuracy = evaluate(model, w, test)["accuracy"]
                    started += time.perf_counter() - paused
                    if accuracy >= target:
                        return time.perf_counter() - started, step, accuracy
    return None, step, evaluate(model, w, test)["accuracy"]


def compute_heavy(client, args) -> dict:
    """Time to a held-out accuracy with 1 and 2 replicas on a compute-heavy MLP: runs
    interleaved (1, 2, 1, 2, ...), the target 85% of the best final accuracy of any run;
    then ``args.heavy_overlap_runs`` runs of each with ``overlap=True``, for the breakdown."""
    splits = acoustic_splits(args.data_dir, args.heavy_rows, args.heavy_classes)
    train, test = splits["train"], splits["test"]
    model = MLP(440, tuple(args.heavy_hidden), args.heavy_classes, activation="relu", l2=1e-6)
    x0 = model.init_params(0)

    def run(replicas: int, overlap: bool) -> dict:
        result = downpour_sgd(model, train, client=client, x0=x0, n_replicas=replicas, n_param_shards=2,
                              batch_size=args.heavy_batch_size, learning_rate=args.heavy_rate,
                              epochs=args.heavy_epochs, eval_data=test, eval_every=args.heavy_eval_every,
                              defer_eval=True, poll_interval=0.01, wire_dtype="float32", overlap=overlap)
        s = result.stats
        print(f"MLP, {replicas} replica(s){', overlap' if overlap else ''}: {result.history[-1]['eval_accuracy']:.3f} "
              f"in {s['wall_seconds']:.1f} s", flush=True)
        return {"curve": accuracy_curve(result.history), "final": result.history[-1]["eval_accuracy"],
                "seconds": s["wall_seconds"], "steps": result.nit, "updates_per_second": s["updates_per_second"],
                **{key: s[key] for key in STEP_PARTS}, "staleness": s["staleness"]}

    runs: dict[int, list[dict]] = {1: [], 2: []}
    for _ in range(args.heavy_repeats):
        for replicas in (1, 2):
            runs[replicas].append(run(replicas, overlap=False))
    overlapped = {replicas: [run(replicas, overlap=True) for _ in range(args.heavy_overlap_runs)]
                  for replicas in (1, 2)}
    target = round(0.85 * max(r["final"] for rs in runs.values() for r in rs), 3)
    for rs in [*runs.values(), *overlapped.values()]:
        for r in rs:
            r["seconds_to_target"] = time_to(r["curve"], target)
    out: dict = {"model": repr(model), "params": model.n_params, "train_rows": train.n_samples,
                 "test_rows": test.n_samples, "target": target, "runs": {str(k): v for k, v in runs.items()},
                 "overlap_runs": {str(k): v for k, v in overlapped.items()}}
    medians = {k: _median([r["seconds_to_target"] for r in rs]) for k, rs in runs.items()}
    out["median_seconds_to_target"] = {str(k): v for k, v in medians.items()}
    if medians[1] and medians[2]:
        out["two_over_one"] = medians[2] / medians[1]
    seconds, step, accuracy = in_process_sgd(model, train, test, batch_size=args.heavy_batch_size,
                                             learning_rate=args.heavy_rate, epochs=args.heavy_epochs,
                                             eval_every=args.heavy_eval_every, target=target, seed=0, x0=x0)
    out["in_process"] = {"seconds_to_target": seconds, "steps_to_target": step, "final_accuracy": accuracy}
    return out


#: A replica step's parts, as Downpour's stats give them (medians over replicas).
STEP_PARTS = ("seconds_per_step", "seconds_computing_per_step", "seconds_waiting_per_step")


def _median(values: list[float | None]) -> float | None:
    """Median of the runs; None when any run missed the target (it has no time to give)."""
    return None if not values or any(v is None for v in values) else float(np.median(values))


def time_to_target(result, target):
    for entry in result.history:
        if entry.get("eval_accuracy", 0.0) >= target:
            return entry["time"], entry["step"]
    return None, result.nit


def softmax_runs(client, args) -> dict:
    """Section 2: time to a held-out accuracy on softmax, 1 vs 2 replicas and one process."""
    root = args.data_dir / f"multinomial-{args.rows}x{args.features}x{args.classes}"
    problem = SyntheticProblem("multinomial", n_features=args.features, n_classes=args.classes, seed=0)
    train = _dataset(root / "train", problem.blocks(args.rows))
    test = _dataset(root / "test", problem.blocks(max(args.rows // 10, 1000), first_block=10**6))
    model = Softmax(args.features, args.classes, l2=1e-5)
    best = sandblaster_lbfgs(model, train, client=client, maxiter=200)
    best_accuracy = evaluate(model, best.x, test)["accuracy"]
    target = best_accuracy - 0.02
    target_info = {"sandblaster_accuracy": best_accuracy, "target_accuracy": target,
                   "sandblaster_seconds": best.stats["total_seconds"]}
    runs = {}
    for replicas in (1, 2):
        result = downpour_sgd(model, train, client=client, n_replicas=replicas, n_param_shards=2,
                              batch_size=args.batch_size, learning_rate=args.learning_rate,
                              epochs=args.epochs, eval_data=test, eval_every=args.eval_every, defer_eval=True,
                              poll_interval=0.01)
        seconds, step = time_to_target(result, target)
        runs[replicas] = {"seconds_to_target": seconds, "steps_to_target": step,
                          "final_accuracy": result.history[-1]["eval_accuracy"],
                          "updates_per_second": result.stats["updates_per_second"],
                          "examples_per_second": result.stats["examples_per_second"],
                          "staleness": result.stats["staleness"]}
    seconds, step, accuracy = in_process_sgd(model, train, test, batch_size=args.batch_size,
                                             learning_rate=args.learning_rate, epochs=args.epochs,
                                             eval_every=args.eval_every, target=target, seed=0)
    out: dict = {"target": target_info,
                 "runs": {"1": runs[1], "2": runs[2],
                          "in_process": {"seconds_to_target": seconds, "steps_to_target": step,
                                         "final_accuracy": accuracy}}}
    if runs[1]["seconds_to_target"] and runs[2]["seconds_to_target"]:
        out["two_over_one"] = runs[2]["seconds_to_target"] / runs[1]["seconds_to_target"]
    return out


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
    parser.add_argument("--heavy-rows", type=int, default=40_000, help="acoustic-like frames for the MLP runs")
    parser.add_argument("--heavy-classes", type=int, default=128)
    parser.add_argument("--heavy-hidden", type=int, nargs="+", default=[1024, 1024])
    parser.add_argument("--heavy-batch-size", type=int, default=128)
    parser.add_argument("--heavy-rate", type=float, default=0.005, help="Adagrad rate of the MLP runs")
    parser.add_argument("--heavy-epochs", type=int, default=2)
    parser.add_argument("--heavy-eval-every", type=int, default=25)
    parser.add_argument("--heavy-repeats", type=int, default=3)
    parser.add_argument("--heavy-overlap-runs", type=int, default=1,
                        help="MLP runs of 1 and 2 replicas with overlap=True, after the others")
    parser.add_argument("--from-results", action="store_true",
                        help="only redraw the report from results/downpour.json (with the options it was run with)")
    parser.add_argument("--exchange-only", action="store_true",
                        help="measure and print the fetch + push section only (nothing is recorded)")
    args = parser.parse_args(argv)
    if args.from_results:
        out = read_result("downpour")
        recorded_args = parser.parse_args(shlex.split(out["command"])[3:])
        publish("downpour", out, lambda o: render(o, recorded_args), record=False)
        return
    command = " ".join(["python -m benchmarks.downpour",
                        *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine()}

    with connect(n_workers=2, dashboard_address=None) as client:
        client.wait_for_workers(2)
        workers = sorted(client.scheduler_info()["workers"])
        # 1. Fetch + push of 1M parameters over 2 shards, measured inside a replica task,
        #    beside its parts and limits.
        out["fetch_push"] = measure_exchange(client, workers, args)

        if args.exchange_only:  # a quick look at section 1: printed, nothing recorded
            print("\n".join(render_exchange(out["fetch_push"], args)))
            return
        # 2. Time to a held-out accuracy: 1 vs 2 replicas, and one process.
        out.update(softmax_runs(client, args))

        # 3. The same on a compute-heavy MLP.
        if args.heavy_repeats:
            out["heavy"] = compute_heavy(client, args)

    publish("downpour", out, lambda o: render(o, args))


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
        *render_exchange(fp, args),
        f"Time to {t['target_accuracy']:.3f} held-out accuracy (Sandblaster's optimum {t['sandblaster_accuracy']:.3f} "
        f"minus 0.02) on softmax {args.rows:,} x {args.features}, {args.classes} classes; batch {args.batch_size}, "
        f"Adagrad rate {args.learning_rate}, held-out scored every {args.eval_every} global steps "
        "(after each run, `defer_eval=True`, so scoring takes no "
        "CPU from the workers):", "",
        "| run | seconds to target | steps to target | final accuracy | updates/s | staleness (lag: pushes) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, label in (("1", "Downpour, 1 replica"), ("2", "Downpour, 2 replicas")):
        x = r[name]
        lines.append(f"| {label} | {secs(x['seconds_to_target'])} | {x['steps_to_target']} | "
                     f"{x['final_accuracy']:.3f} | "
                     f"{x['updates_per_second']:.0f} | {x['staleness']} |")
    x = r["in_process"]
    lines.append(f"| one process, one thread, same loop | {secs(x['seconds_to_target'])} | {x['steps_to_target']} | "
                 f"{x['final_accuracy']:.3f} | | |")
    if "two_over_one" in out:
        lines += ["", f"2 replicas / 1 replica time to target: **{out['two_over_one']:.2f}**"]
    lines.append("")
    if "heavy" in out:
        lines += render_heavy(out["heavy"], args)
    return "\n".join(lines)


def render_exchange(fp: dict, args) -> list[str]:
    """Section 1: the fetch + push, its limits and what it is made of."""
    p = fp["parts_ms"]
    step = 1e3 * fp["float32"]
    mib, remote_mib = p["bytes_each_way"] / 2**20, p["remote_bytes_each_way"] / 2**20
    remote_floor = p["echo_remote_slice"] + p["update_slice"] + p["reply_values"]
    rows = [
        ("memcpy of the pushed bytes (numpy copy, one way)", p["memcpy"]),
        (f"loopback round trip of all {mib:.1f} MiB to the other worker (actor echo)", p["echo_all"]),
        (f"loopback round trip of the remote shard's {remote_mib:.1f} MiB (actor echo)", p["echo_remote_slice"]),
        ("empty actor call to the other worker (round trip, event-loop hops)", p["empty_call"]),
        ("one hop onto the worker's event loop and back (in-process call overhead)", p["loop_hop"]),
        ("serialize the remote push's message "
         f"({'zero-copy: the array travels as its own frame' if p['serialize_zero_copy'] else 'copies the array'})",
         p["serialize"]),
        ("encode: the float64 gradient to float32 (replica)", p["encode"]),
        ("Adagrad update of one shard's slice, in place (shard; float32 gradient, as a push brings it)",
         p["update_slice"]),
        ("the updated slice to float32 for the reply (shard)", p["reply_values"]),
        ("decode: fetched float32 into the float64 parameters (replica)", p["decode"]),
        ("push + fetch to the shard on the replica's worker alone (in process)", p["push_local"]),
        ("push + fetch to the remote shard alone (over TCP)", p["push_remote"]),
    ]
    t = fp.get("remote_push_ms")  # recorded since the push was timed on both sides
    if t:
        rows += [("the remote push alone, timed on both sides (one call at a time, the round with the lowest total): "
                  "in all", t["total"]),
                 ("... the request's way: replica thread, event loop, serialization, TCP, dispatch, to the handler",
                  t["request"]),
                 ("... in the shard's handler (the update, the reply's conversion, bookkeeping)", t["handler"]),
                 ("... of which the update", t["update"]),
                 ("... the reply's way: serialization, TCP, back to the replica's thread", t["reply"])]
    lines = [
        f"One step's communication for {fp['params']:,} parameters over {fp['shards']} Adagrad shards, from a "
        f"replica task with the replica's calls (push, with the updated slice in the reply; the remote shard "
        f"called first, the shard on the replica's worker in process; the best of {fp['rounds']} interleaved "
        f"rounds, each a median of {args.repeats}, as for every figure of this section): "
        f"**{step:.1f} ms** with float32 on the wire, {1e3 * fp['float64']:.1f} ms with float64; "
        f"{1e3 * fp['float32_all_over_tcp']:.1f} ms with float32 when both shards are called over TCP.", "",
        f"Its limits, measured in the same replica task: a memcpy of the {mib:.1f} MiB pushed takes "
        f"{p['memcpy']:.2f} ms (fetch + push = **{step / p['memcpy']:.0f}x** it), a loopback round trip of them "
        f"to the other worker {p['echo_all']:.2f} ms (**{step / p['echo_all']:.2f}x**). The step's critical "
        f"path is the remote shard's half: its round trip ({p['echo_remote_slice']:.2f} ms) + its update "
        f"({p['update_slice']:.2f} ms) + its reply's conversion ({p['reply_values']:.2f} ms) = "
        f"{remote_floor:.2f} ms (fetch + push = **{step / remote_floor:.2f}x** that floor), if the shard on the "
        "replica's worker, called in process after the remote one, updated its half meanwhile. Measured, the two "
        f"halves did not overlap: fetch + push took {step / (p['push_remote'] + p['push_local']):.2f}x the two "
        f"pushes alone one after the other ({p['push_remote']:.2f} ms over TCP + {p['push_local']:.2f} ms in "
        "process).", *_timeline_sentence(fp), "",
        "| part (float32 wire, medians) | ms |", "|---|---:|",
        *(f"| {name} | {ms:.2f} |" for name, ms in rows), "",
    ]
    return lines


def _timeline_sentence(fp: dict) -> list[str]:
    """What the remote push is made of as a step sends it (a freshly encoded slice), timed on
    both sides, beside the floor's pieces."""
    t, p = fp.get("remote_push_ms"), fp["parts_ms"]
    if not t:
        return []
    return ["", f"Timed on both sides (the shard notes when each push enters and leaves its handler; one monotonic "
                f"clock for the machine's processes), the remote push alone takes {t['total']:.2f} ms as a step "
                f"sends it: {t['request']:.2f} ms on its way to the shard's handler, {t['handler']:.2f} ms there "
                f"(the update {t['update']:.2f} ms), {t['reply']:.2f} ms back. Both ways together "
                f"({t['both_ways']:.2f} ms, in all minus the handler, per call) cost "
                f"{t['both_ways'] / p['echo_remote_slice']:.2f}x the floor's echo of one slice sent again and "
                f"again ({p['echo_remote_slice']:.2f} ms), and the update in the shard "
                f"{t['update'] / p['update_slice']:.2f}x the same update alone ({p['update_slice']:.2f} ms)."]


def render_heavy(h: dict, args) -> list[str]:
    def secs(v):
        return "not reached" if v is None else f"{v:.1f}"

    lines = [
        "## A compute-heavy model", "",
        f"{h['model']} ({h['params']:,} parameters) on the acoustic-like task, {h['train_rows']:,} training frames, "
        f"{h['test_rows']:,} held out; Downpour + Adagrad rate {args.heavy_rate}, batch {args.heavy_batch_size}, "
        f"{args.heavy_epochs} epochs, 2 parameter shards, float32 on the wire, held-out accuracy scored every "
        f"{args.heavy_eval_every} global steps (after each run). Target: 85% of the best final accuracy of any "
        f"run = **{h['target']:.3f}**. Runs interleaved (1, 2, 1, 2, ...).", "",
        "| replicas | run | seconds to target | final accuracy | wall seconds (with scoring after the run) | steps "
        "| updates/s | s/step (computing) |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k, rs in h["runs"].items():
        for i, r in enumerate(rs, 1):
            lines.append(f"| {k} | {i} | {secs(r['seconds_to_target'])} | {r['final']:.3f} | {r['seconds']:.1f} | "
                         f"{r['steps']} | {r['updates_per_second']:.0f} | {r['seconds_per_step'] * 1e3:.1f} ms "
                         f"({r['seconds_computing_per_step'] * 1e3:.1f} ms) |")
    x = h["in_process"]
    lines += ["", f"One process, one thread, the same loop (Adagrad applied in place, no shards): "
              f"{secs(x['seconds_to_target'])} s to the target ({x['steps_to_target']} steps).", ""]
    m = h["median_seconds_to_target"]
    lines.append(f"Median seconds to target: 1 replica {secs(m['1'])}, 2 replicas {secs(m['2'])}.")
    if "two_over_one" in h:
        ratio = f"2 replicas / 1 replica time to target (medians): **{h['two_over_one']:.2f}**"
        if x["seconds_to_target"]:
            ratio += f"; 2 replicas / one process: {m['2'] / x['seconds_to_target']:.2f}"
        lines += ["", ratio]
    staleness = h["runs"]["2"][0]["staleness"]
    lines += ["", f"Staleness with 2 replicas (lag in pushes: count), first run: {staleness}", ""]
    return lines + render_step_parts(h)


def render_step_parts(h: dict) -> list[str]:
    """A replica step's parts (medians over the runs): its own gradient, the wait for the
    shards' replies, and the rest (encoding, decoding, batches, checks)."""
    lines = ["### Where a replica's step goes", "",
             "Per replica step, medians over the runs above (and over the `overlap=True` runs: each push stays "
             "in flight while the next gradient is computed). *Not gradient* is the share of the step spent on "
             "anything but the replica's own gradient (target: at most 15%).", "",
             "| replicas | overlap | step | own gradient | waiting for the shards | rest | not gradient "
             "| seconds to target |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for overlap, group in ((False, h["runs"]), (True, h.get("overlap_runs", {}))):
        for k, rs in group.items():
            if not rs:
                continue
            step, gradient, waiting = (float(np.median([r[key] for r in rs])) * 1e3 for key in STEP_PARTS)
            reached = _median([r["seconds_to_target"] for r in rs])
            lines.append(f"| {k} | {'yes' if overlap else 'no'} | {step:.1f} ms | {gradient:.1f} ms | "
                         f"{waiting:.1f} ms | {step - gradient - waiting:.1f} ms | **{1 - gradient / step:.0%}** | "
                         f"{'not reached' if reached is None else f'{reached:.1f}'} |")
    return [*lines, ""]


if __name__ == "__main__":
    main()
