"""Neural models: kernel throughput against the matmul peak, and the paper's Fig. 4 in miniature.

    python -m benchmarks.neural                       # as recorded in RESULTS-neural.md
    python -m benchmarks.neural --rows 20000 --epochs 1   # a quick look

1. Loss + gradient throughput (examples/s) of each neural model in this process, and the
   FLOP rate it reaches as a fraction of numpy's matmul peak on this machine (one large
   square product of the same dtype, same threads).
2. On the acoustic-like task: held-out frame accuracy against wall time for SGD (one
   replica, plain SGD at the shards), Downpour SGD (2 replicas), Downpour + Adagrad (1 and
   2 replicas, and 2 with overlapped pushes) and Sandblaster L-BFGS, all on the same embedded cluster; time to a target
   accuracy; a plot. 3. Bytes per step the language model's row-sparse pushes save.

Writes ``benchmarks/results/neural.json``, ``benchmarks/RESULTS-neural.md`` and
``benchmarks/neural-accuracy-vs-time.png``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._common import (
    HERE,
    OUT,
    accuracy_curve,
    acoustic_splits,
    machine,
    median_seconds,
    pyplot,
    report_header,
    save_figure,
    time_to,
    write_report,
    write_result,
)
from dasklbfgs import connect, downpour_sgd, make_dataset, sandblaster_lbfgs
from dasklbfgs.models import MLP, EmbeddingLM, SparseAutoencoder
from dasklbfgs.scoring import evaluate


def matmul_gflops(dtype, n: int = 2048, repeats: int = 7) -> float:
    """numpy's best rate on one large square product: the peak a kernel can hope for."""
    a = np.random.default_rng(0).normal(size=(n, n)).astype(dtype)
    a @ a
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def kernel_throughput(rows: int, repeats: int) -> list[dict]:
    """Examples/s of loss_grad_sum and the FLOP rate as a fraction of the matmul peak."""
    rng = np.random.default_rng(0)
    cases = []
    mlp = MLP(440, (512, 512), 128, activation="sigmoid")
    widths = mlp.widths
    # forward, weight gradients, input gradients (none for the first layer): 2 flops per multiply-add
    mlp_flops = 6 * sum(a * b for a, b in zip(widths[:-1], widths[1:])) - 2 * widths[0] * widths[1]
    X = rng.normal(size=(rows, 440)).astype(np.float32)
    cases.append(("MLP 440-512-512-128 sigmoid, float32 frames", mlp, X, rng.integers(0, 128, rows), mlp_flops,
                  np.float32))
    ae = SparseAutoencoder(196, 100)
    cases.append(("SparseAutoencoder 196-100 (14x14 patches), float64", ae, rng.uniform(0.1, 0.9, (rows, 196)),
                  np.zeros(rows), 14 * 196 * 100, np.float64))
    lm = EmbeddingLM(2000, 32, 3, 128)
    cases.append(("EmbeddingLM vocab 2000, 3 x 32 -> 128 -> 2000, float64", lm,
                  rng.integers(0, 2000, (rows, 3)).astype(np.int32), rng.integers(0, 2000, rows),
                  6 * 3 * 32 * 128 + 6 * 128 * 2000, np.float64))
    # (autoencoder: 2 products forward, 4 backward, 1 for the sparsity sums -> 14 d h; LM: 3 per layer)
    peaks = {np.float32: matmul_gflops(np.float32), np.float64: matmul_gflops(np.float64)}
    out = []
    for label, model, X, y, flops, dtype in cases:
        params = model.init_params(0)
        seconds = median_seconds(lambda model=model, params=params, X=X, y=y: model.loss_grad_sum(params, X, y),
                                 repeats)
        rate = rows / seconds
        out.append({"model": label, "params": model.n_params, "examples_per_second": rate,
                    "flops_per_example": flops, "gflops": rate * flops / 1e9,
                    "matmul_peak_gflops": peaks[dtype], "fraction_of_peak": rate * flops / 1e9 / peaks[dtype]})
    return out


def fig4(client, args, root: Path) -> dict:
    splits = acoustic_splits(root, args.rows, args.classes)
    train, test = splits["train"], splits["test"]
    model = MLP(440, tuple(args.hidden), args.classes, activation="relu", l2=1e-6)
    x0 = model.init_params(0)
    runs = {}
    common = dict(client=client, x0=x0, n_param_shards=2, batch_size=args.batch_size, epochs=args.epochs,
                  eval_data=test, eval_every=args.eval_every, defer_eval=True, poll_interval=0.01)
    for name, replicas, optimizer, rate in (
        ("SGD (1 replica)", 1, "sgd", args.sgd_rate),
        ("Downpour SGD (2 replicas)", 2, "sgd", args.sgd_rate),
        ("Downpour + Adagrad (1 replica)", 1, "adagrad", args.adagrad_rate),
        ("Downpour + Adagrad (2 replicas)", 2, "adagrad", args.adagrad_rate),
        ("Downpour + Adagrad (2 replicas, overlapped pushes)", 2, "adagrad", args.adagrad_rate),
    ):
        result = downpour_sgd(model, train, n_replicas=replicas, optimizer=optimizer, learning_rate=rate,
                              overlap="overlapped" in name, **common)
        runs[name] = {"curve": accuracy_curve(result.history), "final": result.history[-1]["eval_accuracy"],
                      "seconds": result.stats["wall_seconds"], "steps": result.nit,
                      "updates_per_second": result.stats["updates_per_second"],
                      "staleness": result.stats["staleness"]}
    snapshots: list = []
    started = time.perf_counter()

    def keep(intermediate):  # scored after the run, like the Downpour runs' defer_eval
        snapshots.append((time.perf_counter() - started, intermediate.x.copy()))

    result = sandblaster_lbfgs(model, train, client=client, x0=x0, maxiter=args.lbfgs_iterations, callback=keep)
    curve = [(t, evaluate(model, x, test)["accuracy"]) for t, x in snapshots]
    runs["Sandblaster L-BFGS"] = {"curve": curve, "final": curve[-1][1], "seconds": result.stats["total_seconds"],
                                  "steps": result.nit}
    best = max(r["final"] for r in runs.values())
    target = round(0.85 * best, 3)
    for r in runs.values():
        r["seconds_to_target"] = time_to(r["curve"], target)
    return {"target": target, "runs": runs, "train_rows": train.n_samples, "test_rows": test.n_samples}


def sparse_savings(client, root: Path) -> dict:
    splits = make_dataset("text", root / "text-2000", vocab_size=2000, context=3, shard_rows=20_000, overwrite=True)
    model = EmbeddingLM(2000, 64, 3, 64)
    out = {"model": repr(model), "params": model.n_params, "table_params": 2000 * 64}
    for sparse in (False, True):
        result = downpour_sgd(model, splits["train"], client=client, n_replicas=2, n_param_shards=2, batch_size=64,
                              learning_rate=0.1, max_steps=600, sparse=sparse, poll_interval=0.01)
        s = result.stats
        out["sparse" if sparse else "dense"] = {
            "bytes_per_step": (s["bytes_in"] + s["bytes_out"]) / s["global_steps"],
            "dense_bytes_per_step": (s["dense_bytes_in"] + s["dense_bytes_out"]) / s["global_steps"],
            "updates_per_second": s["updates_per_second"]}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel-rows", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--sgd-rate", type=float, default=0.05)
    parser.add_argument("--adagrad-rate", type=float, default=0.01)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--lbfgs-iterations", type=int, default=60)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.neural", *map(shlex.quote, argv if argv is not None else sys.argv[1:])])
    out: dict = {"command": command, "machine": machine()}
    out["kernels"] = kernel_throughput(args.kernel_rows, args.repeats)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        client.wait_for_workers(2)
        out["fig4"] = fig4(client, args, args.data_dir)
        out["sparse"] = sparse_savings(client, args.data_dir)
    write_result("neural", out)
    plot(out, OUT / "neural-accuracy-vs-time.png")
    report = render(out, args)
    write_report("neural", report)
    print(report)


def plot(out, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in out["fig4"]["runs"].items():
        if run["curve"]:
            t, a = zip(*run["curve"])
            ax.plot(t, a, label=name, marker="." if "Sandblaster" in name else None)
    ax.axhline(out["fig4"]["target"], color="grey", linestyle=":", label="target")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("held-out frame accuracy")
    ax.set_title("Acoustic-like task, MLP, 2 workers x 1 thread")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def render(out, args) -> str:
    m, f4, sp = out["machine"], out["fig4"], out["sparse"]

    def secs(v):
        return "not reached" if v is None else f"{v:.1f}"

    lines = [
        *report_header('Neural models benchmark', out["command"], m),
        f"## Loss + gradient throughput in one process ({args.kernel_rows} rows, median of {args.repeats})", "",
        "FLOPs per example count the matrix products of the forward and backward passes (2 per multiply-add); "
        "the peak is numpy's best time on one 2048 x 2048 matmul of the same dtype on all cores.", "",
        "| model | parameters | examples/s | GFLOP/s | matmul peak GFLOP/s | fraction of peak |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k in out["kernels"]:
        lines.append(f"| {k['model']} | {k['params']:,} | {k['examples_per_second']:,.0f} | {k['gflops']:.1f} | "
                     f"{k['matmul_peak_gflops']:.1f} | {k['fraction_of_peak']:.2f} |")
    lines += [
        "", "## Held-out accuracy vs time on the acoustic-like task (the paper's Fig. 4 in miniature)", "",
        f"MLP 440-{'-'.join(map(str, args.hidden))}-{args.classes} ReLU, {f4['train_rows']:,} training frames, "
        f"{f4['test_rows']:,} held out; batch {args.batch_size}, {args.epochs} epochs, SGD rate {args.sgd_rate}, "
        f"Adagrad rate {args.adagrad_rate}; Sandblaster {args.lbfgs_iterations} iterations. Target: 85% of the "
        f"best final accuracy = **{f4['target']:.3f}**. Held-out scoring is deferred to after each run "
        "(`defer_eval=True`; Sandblaster's iterates are kept and scored afterwards), so it takes no CPU from the "
        "2 cores the workers share. Plot: [neural-accuracy-vs-time.png](neural-accuracy-vs-time.png).", "",
        "| method | seconds to target | final accuracy | seconds | steps / iterations | updates/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in f4["runs"].items():
        ups = f"{r['updates_per_second']:.0f}" if "updates_per_second" in r else ""
        lines.append(f"| {name} | {secs(r['seconds_to_target'])} | {r['final']:.3f} | {r['seconds']:.1f} | "
                     f"{r['steps']} | {ups} |")
    one = f4["runs"]["Downpour + Adagrad (1 replica)"]["seconds_to_target"]
    two = f4["runs"]["Downpour + Adagrad (2 replicas)"]["seconds_to_target"]
    if one and two:
        lines += ["", f"Downpour + Adagrad, 2 replicas / 1 replica time to target: **{two / one:.2f}**"]
    over = f4["runs"]["Downpour + Adagrad (2 replicas, overlapped pushes)"]["seconds_to_target"]
    if one and over:
        lines += ["", f"With overlapped pushes, 2 replicas / 1 replica time to target: **{over / one:.2f}**"]
    d, s = sp["dense"], sp["sparse"]
    lines += [
        "", "## Row-sparse pushes and fetches for the language model", "",
        f"{sp['model']} ({sp['params']:,} parameters, {sp['table_params']:,} in the embedding table) on the "
        "stdlib-docstring corpus; 2 replicas, batch 64, 600 global steps. Bytes moved per global step "
        "(pushes + fetches, all shards):", "",
        "| transfer | bytes/step | as whole slices | updates/s |", "|---|---:|---:|---:|",
        f"| dense | {d['bytes_per_step']:,.0f} | {d['dense_bytes_per_step']:,.0f} | {d['updates_per_second']:.0f} |",
        f"| row-sparse | {s['bytes_per_step']:,.0f} | {s['dense_bytes_per_step']:,.0f} | "
        f"{s['updates_per_second']:.0f} |",
        "", f"Row-sparse transfer moves **{s['bytes_per_step'] / d['bytes_per_step']:.2f}x** the bytes of dense "
        "transfer. The output softmax over the vocabulary is dense, so the saving is bounded by the table's share "
        "of the parameters.", "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
