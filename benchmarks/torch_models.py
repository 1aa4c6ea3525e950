"""A torch module trained by dasklbfgs, against the numpy MLP and torch's own L-BFGS.

    python -m benchmarks.torch_models                    # as recorded
    python -m benchmarks.torch_models --rows 20000       # a quick look

Measured in one run, on a LocalCluster of 2 workers (one thread each):

- **One Sandblaster evaluation on cached shards**, the same MLP (the acoustic recipe: 440
  inputs, a hidden layer of 256 ReLUs, ``--classes`` outputs, float32 frames) as the numpy
  :class:`~dasklbfgs.models.MLP` and as a :class:`~dasklbfgs.models.TorchModel` of
  ``nn.Sequential``: the median of ``--repeats`` evaluations each, and their ratio (target:
  torch at most 1.0x numpy's time).
- **Full-batch L-BFGS on an MLP regression**: ``torch.optim.LBFGS`` (strong Wolfe line
  search, history 10) in this process on all the rows, against Sandblaster on the 2 workers
  with the same module, loss and start, 1,000 iterations each: the evaluations and seconds
  each took to the worse of the two final objectives and to within 1e-4 of the better.
"""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import HERE, acoustic_splits, machine, median_seconds, publish, report_header
from dasklbfgs import ShardedDataset, connect
from dasklbfgs.models import MLP, TorchModel
from dasklbfgs.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs

HIDDEN = 256
MAXITER = 1000  # iterations of each L-BFGS


def acoustic_torch_mlp(classes: int) -> Any:
    """The numpy MLP's layout as a torch module: 440 -> 256 ReLU -> classes."""
    from torch import nn

    return lambda: nn.Sequential(nn.Linear(440, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, classes))


def regression_net() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 1)).double()


def evaluation_seconds(client: Any, data: ShardedDataset, classes: int, repeats: int) -> dict[str, float]:
    """Median seconds of one evaluation on cached shards: the numpy MLP and the torch module."""
    out = {}
    models = {"numpy": MLP(440, (HIDDEN,), classes, activation="relu"),
              "torch": TorchModel(acoustic_torch_mlp(classes), loss="cross_entropy")}
    for name, model in models.items():
        evaluator = MegaBatchEvaluator(client, model, data)
        try:
            out[name] = median_seconds(functools.partial(evaluator.evaluate, model.init_params(0)), repeats,
                                       warmup=2)
        finally:
            evaluator.close()
    return out


def lbfgs_race(client: Any, root: Path, rows: int) -> dict[str, Any]:
    """torch.optim.LBFGS in this process against Sandblaster on the workers, to the same objective."""
    import torch

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 20))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=rows)
    data = ShardedDataset.create(root / f"regression-{rows}", X, y, shard_rows=rows // 8, overwrite=True)
    model = TorchModel(regression_net, loss="mse")
    x0 = model.init_params(0)

    module = model.to_module(x0).train()
    inputs, targets = torch.as_tensor(X), torch.as_tensor(y)
    optimizer = torch.optim.LBFGS(module.parameters(), lr=1, max_iter=MAXITER, tolerance_grad=1e-9,
                                  tolerance_change=1e-15, history_size=10, line_search_fn="strong_wolfe")
    torch_curve: list[tuple[int, float, float]] = []  # (evaluations, seconds, objective)
    started = time.perf_counter()

    def closure() -> Any:
        optimizer.zero_grad()
        loss = ((module(inputs)[:, 0] - targets) ** 2).mean()
        loss.backward()
        torch_curve.append((len(torch_curve) + 1, time.perf_counter() - started, loss.item()))
        return loss

    optimizer.step(closure)
    ours_curve: list[tuple[int, float, float]] = []
    result = sandblaster_lbfgs(model, data, client=client, x0=x0, maxiter=MAXITER, gtol=1e-9,
                               callback=lambda entry: ours_curve.append((entry.nfev, entry.time, entry.fun)))
    finals = (torch_curve[-1][2], ours_curve[-1][2])
    target, worse = min(finals) * (1 + 1e-4), max(finals)  # near the better end; the worse end

    def reached(curve: list[tuple[int, float, float]]) -> dict[str, Any]:
        def first(goal: float) -> tuple[int | None, float | None]:
            return next(((n, t) for n, t, f in curve if f <= goal), (None, None))

        (n, t), (n_worse, t_worse) = first(target), first(worse)
        return {"evaluations": n, "seconds": t, "evaluations_to_worse": n_worse, "seconds_to_worse": t_worse,
                "final": curve[-1][2], "total_evaluations": curve[-1][0], "total_seconds": curve[-1][1]}

    return {"rows": rows, "target": target, "worse_final": worse, "torch": reached(torch_curve),
            "sandblaster": reached(ours_curve), "sandblaster_message": result.message}


def render(out: dict[str, Any]) -> str:
    e, race = out["evaluation"], out["lbfgs"]
    lines = report_header("TorchModel benchmark", out["command"], out["machine"])
    lines += [f"## One Sandblaster evaluation on cached shards ({out['rows']:,} acoustic frames, "
              f"MLP 440-{HIDDEN}-{out['classes']} ReLU, float32, 2 workers; median of {out['repeats']})", "",
              "| model | seconds |", "|---|---:|",
              f"| numpy `MLP` | {e['numpy']:.4f} |", f"| `TorchModel` (nn.Sequential) | {e['torch']:.4f} |", "",
              f"torch / numpy: **{e['torch'] / e['numpy']:.2f}x** (target: at most 1.0x)", "",
              f"## Full-batch L-BFGS, MLP regression 20-32-1 tanh, float64, {race['rows']:,} rows", "",
              f"The same module, loss and start. Evaluations and seconds to the worse of the two final "
              f"objectives ({race['worse_final']:.6g}) and to within 1e-4 of the better one ({race['target']:.6g}; "
              "-: never), and where each run ended.", "",
              "| method | to the worse end | to the better end | final objective | evaluations, seconds in all |",
              "|---|---:|---:|---:|---:|"]

    def at(n: int | None, t: float | None) -> str:
        return "-" if n is None or t is None else f"{n} ({t:.2f} s)"

    for name, label in (("torch", "`torch.optim.LBFGS`, one process"), ("sandblaster", "Sandblaster, 2 workers")):
        r = race[name]
        lines.append(f"| {label} | {at(r['evaluations_to_worse'], r['seconds_to_worse'])} | "
                     f"{at(r['evaluations'], r['seconds'])} | {r['final']:.6g} | "
                     f"{r['total_evaluations']}, {r['total_seconds']:.2f} s |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=40_000, help="acoustic training frames")
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--regression-rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--data-dir", type=Path, default=HERE / "out", help="where the datasets are written once")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.torch_models " + shlex.join(sys.argv[1:] if argv is None else argv)
    splits = acoustic_splits(args.data_dir, args.rows, args.classes)
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        evaluation = evaluation_seconds(client, splits["train"], args.classes, args.repeats)
        race = lbfgs_race(client, args.data_dir, args.regression_rows)
    out = {"command": command.strip(), "machine": machine(), "rows": args.rows, "classes": args.classes,
           "repeats": args.repeats, "evaluation": evaluation, "lbfgs": race}
    publish("torch_models", out, render)


if __name__ == "__main__":
    main()
