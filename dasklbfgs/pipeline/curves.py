"""A run's learning curves: the points of ``curves.json`` and the panels of ``curves.png``.

The curves say what they are: a full-batch objective (Sandblaster) or a mini-batch loss,
which is noisy (Downpour and the peer methods: drawn faint, with a smoothed line over it);
the held-out objective overlaid on the training one; the suboptimality of an exact
objective (relative to the lowest objective reached) and the gradient norm on log scales;
the best held-out point marked. Axis ranges never shrink below a decade (log) or a tenth of
the values' size (linear), so noise does not look like learning: the rules of
:mod:`dasklbfgs.monitor.curve_rules`, which the dashboard's Training page follows too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dasklbfgs.monitor.curve_rules import best_point, honest_limits, is_noisy, smoothed, smoothing_weight
from dasklbfgs.scoring.names import SCORE_LABELS, metric_label, score_name
from dasklbfgs.solvers import get_solver

# the rules the Training page shares (dasklbfgs.monitor.curve_rules), where the reports found them
__all__ = ["learning_curves", "plot_curves", "curves_figure", "smoothed", "smoothing_weight", "honest_limits"]


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


def _panels(curves: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels this run has data for: title, y label, log or not, the lines, and the
    held-out figures whose best point is marked (``best``: name, x, y)."""
    points, exact, metric = curves["points"], not is_noisy(curves["train"]), curves["heldout_metric"]

    def series(key: str) -> tuple[list[float], list[float]]:
        chosen = [p for p in points if key in p]
        return [p["step"] for p in chosen], [p[key] for p in chosen]

    train_label = "training objective (full batch)" if exact else "mini-batch loss (noisy)"
    loss: dict[str, Any] = {"title": "Loss", "ylabel": "loss", "lines": [(train_label, *series("train"), not exact)],
                            "best": []}
    if any("heldout_objective" in p for p in points):
        loss["lines"].append(("held-out objective", *series("heldout_objective"), False))
        loss["best"].append(("objective", *series("heldout_objective")))
    panels = [loss]
    if exact:
        x, f = series("train")
        if f:
            best = min(f)
            gap = [(i, v - best) for i, v in zip(x, f, strict=True) if v > best]
            panels.append({"title": "Suboptimality (relative to the lowest objective reached)",
                           "ylabel": "objective − lowest objective reached",
                           "log": True, "lines": [("estimated suboptimality", [i for i, _ in gap],
                                                   [g for _, g in gap], False)]})
    if any("gnorm" in p for p in points):
        panels.append({"title": "Gradient norm", "ylabel": "gradient max-norm", "log": True,
                       "lines": [("gradient max-norm", *series("gnorm"), False)]})
    if metric is not None:
        label = SCORE_LABELS[metric]
        panels.append({"title": f"Held-out {label}", "ylabel": label, "log": False,
                       "lines": [(f"held-out {label}", *series("heldout"), False)],
                       "best": [(metric, *series("heldout"))]})
    loss["log"] = all(v > 0 for _, _, ys, _ in loss["lines"] for v in ys)
    return panels


def plot_curves(curves: dict[str, Any], path: Path, *, title: str) -> Path:
    """``curves.png``: the figure of :func:`curves_figure`, written to ``path``."""
    import matplotlib.pyplot as plt

    fig = curves_figure(curves, title=title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def curves_figure(curves: dict[str, Any], *, title: str) -> Any:
    """The panels of :func:`_panels`, two to a row, against the iteration or global step (a
    matplotlib figure, which the caller closes)."""
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
    return fig


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
    for metric, x, y in panel.get("best", []):
        if (best := best_point(x, y, metric)) is not None:
            ax.plot(*best, linestyle="none", marker="*", markersize=13, color="tab:red", zorder=3,
                    label=f"best held-out {metric_label(metric)} {best[1]:.4g} at {curves['x']} "
                          f"{best[0]:g}")
    limits = honest_limits(values, panel["log"])
    if panel["log"] and limits is not None:
        _log_axis(ax, limits)
    if limits is not None:
        ax.set_ylim(*limits)
    ax.set_title(panel["title"])
    ax.set_xlabel(_x_label(curves))
    ax.set_ylabel(panel["ylabel"])
    ax.grid(alpha=0.3, which="both" if panel["log"] else "major")
    if len(panel["lines"]) > 1 or any(noisy for *_, noisy in panel["lines"]) or panel.get("best"):
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
