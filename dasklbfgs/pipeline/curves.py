"""A run's learning curves: the points of ``curves.json`` and the panels of ``curves.png``.

The curves say what they are: a full-batch objective (Sandblaster) or a mini-batch loss,
which is noisy (Downpour and the peer methods: drawn faint, with a smoothed line over it);
the held-out objective overlaid on the training one; the suboptimality of an exact
objective and the gradient norm on log scales. Axis ranges never shrink below a decade
(log) or a tenth of the values' size (linear), so noise does not look like learning.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from dasklbfgs.scoring.names import SCORE_LABELS, score_name
from dasklbfgs.solvers import get_solver

__all__ = ["learning_curves", "plot_curves", "smoothed", "smoothing_weight", "honest_limits"]

#: TensorBoard's default smoothing weight for its scalar curves
SMOOTHING = 0.9
_MIN_LINEAR_SPAN = 0.1  # of the largest absolute value
_MIN_DECADES = 1.0


def learning_curves(history: list[dict[str, Any]], solver: str) -> dict[str, Any]:
    """``curves.json``: what the training curve is, the held-out metric's name, and one
    point per history entry (``step``: an iteration or a global step, ``time`` and whichever of ``train``, ``gnorm``,
    ``heldout_objective``, ``heldout`` the entry has; non-finite values left out)."""
    chosen = get_solver(solver)
    metric = next((name for entry in history if (name := score_name(entry, "eval_"))), None)
    sources = {"train": "loss", "gnorm": "gnorm", "heldout_objective": "eval_objective", "heldout": f"eval_{metric}"}
    points = []
    for entry in history:
        point = {"step": entry["step"], "time": entry["time"]}
        point.update({key: float(entry[source]) for key, source in sources.items()
                      if isinstance(entry.get(source), (int, float)) and math.isfinite(entry[source])})
        points.append(point)
    return {"solver": solver, "x": chosen.stats.unit, "train": chosen.stats.loss_name, "heldout_metric": metric,
            "points": points}


def smoothing_weight(n_points: int) -> float:
    """TensorBoard's 0.9, lighter for short curves (about a tenth of the points in the
    average), none under 20 points: smoothing a handful of points only makes them lag."""
    return min(SMOOTHING, max(0.0, 1.0 - 10.0 / n_points)) if n_points >= 20 else 0.0


def smoothed(values: list[float], weight: float = SMOOTHING) -> np.ndarray:
    """Exponential moving average with the start-up bias removed (TensorBoard's smoothing)."""
    out, average = np.empty(len(values)), 0.0
    for i, value in enumerate(values):
        average = weight * average + (1 - weight) * value
        out[i] = average / (1 - weight ** (i + 1))
    return out


def _panels(curves: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels this run has data for: title, y label, log or not, and the lines."""
    points, exact, metric = curves["points"], curves["train"] == "objective", curves["heldout_metric"]

    def series(key: str) -> tuple[list[float], list[float]]:
        chosen = [p for p in points if key in p]
        return [p["step"] for p in chosen], [p[key] for p in chosen]

    train_label = "training objective (full batch)" if exact else "mini-batch loss (noisy)"
    loss: dict[str, Any] = {"title": "Loss", "ylabel": "loss", "lines": [(train_label, *series("train"), not exact)]}
    if any("heldout_objective" in p for p in points):
        loss["lines"].append(("held-out objective", *series("heldout_objective"), False))
    panels = [loss]
    if exact:
        x, f = series("train")
        if f:
            best = min(f)
            gap = [(i, v - best) for i, v in zip(x, f, strict=True) if v > best]
            panels.append({"title": "Suboptimality", "ylabel": "objective − lowest objective reached",
                           "log": True, "lines": [("estimated suboptimality", [i for i, _ in gap],
                                                   [g for _, g in gap], False)]})
    if any("gnorm" in p for p in points):
        panels.append({"title": "Gradient norm", "ylabel": "gradient max-norm", "log": True,
                       "lines": [("gradient max-norm", *series("gnorm"), False)]})
    if metric is not None:
        label = SCORE_LABELS[metric]
        panels.append({"title": f"Held-out {label}", "ylabel": label, "log": False,
                       "lines": [(f"held-out {label}", *series("heldout"), False)]})
    loss["log"] = all(v > 0 for _, _, ys, _ in loss["lines"] for v in ys)
    return panels


def honest_limits(values: list[float], log: bool) -> tuple[float, float] | None:
    """y limits that cover ``values`` and span at least a decade (log) or a tenth of the
    largest absolute value (linear), centred on the data, so small wiggles stay small."""
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    if log:
        low, high = math.log10(low), math.log10(high)
        widen = max(0.0, _MIN_DECADES - (high - low)) / 2 + 0.05 * (high - low)
        return 10 ** (low - widen), 10 ** (high + widen)
    floor = _MIN_LINEAR_SPAN * max(abs(low), abs(high)) or 1.0
    widen = max(0.0, floor - (high - low)) / 2 + 0.05 * (high - low)
    return low - widen, high + widen


def plot_curves(curves: dict[str, Any], path: Path, *, title: str) -> Path:
    """The panels of :func:`_panels`, two to a row, against the iteration or global step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(curves)
    columns = min(len(panels), 2)
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.2 * rows), constrained_layout=True,
                             squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _draw(ax, panel, curves)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _draw(ax: Any, panel: dict[str, Any], curves: dict[str, Any]) -> None:
    values = []
    for (label, x, y, noisy), color in zip(panel["lines"], ("tab:blue", "tab:orange")):
        weight = smoothing_weight(len(y)) if noisy else 0.0
        if weight:
            ax.plot(x, y, color=color, alpha=0.3, linewidth=0.8, label=label)
            ax.plot(x, smoothed(y, weight), color=color, linewidth=2, label=f"smoothed (EMA {weight:.2g})")
        elif y:
            ax.plot(x, y, color=color, marker="." if len(y) < 60 else None, linewidth=1.5, label=label)
        values += y
    if not values:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    limits = honest_limits(values, panel["log"])
    if panel["log"] and limits is not None:
        _log_axis(ax, limits)
    if limits is not None:
        ax.set_ylim(*limits)
    ax.set_title(panel["title"])
    ax.set_xlabel(_x_label(curves))
    ax.set_ylabel(panel["ylabel"])
    ax.grid(alpha=0.3, which="both" if panel["log"] else "major")
    if len(panel["lines"]) > 1 or any(noisy for *_, noisy in panel["lines"]):
        ax.legend(fontsize="small")


def _log_axis(ax: Any, limits: tuple[float, float]) -> None:
    """A log y axis labelled in plain numbers (0.5, 1, 2, not 5x10^-1), with 1-2-5 ticks
    when it spans two decades or less."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    if limits[1] / limits[0] <= 100:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _x_label(curves: dict[str, Any]) -> str:
    """``iteration (9 in 0.7 s of wall time)``: the x axis and the pace of the run."""
    points = curves["points"]
    if not points:
        return curves["x"]
    return f"{curves['x']} ({points[-1]['step']} in {points[-1]['time']:.3g} s of wall time)"
