"""``scores.png``: how good the fitted model is, drawn from the curves the workers computed
(:meth:`~dasklbfgs.scoring.summaries.Summary.curves`): for a classifier the ROC and
precision-recall curves and a reliability diagram, for a regression the residuals'
histogram; the training data and the held-out data on the same axes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_scores"]

#: one colour per split, as curves.png colours the training and the held-out lines
COLOURS = {"train": "tab:blue", "test": "tab:orange"}
SPLIT_LABELS = {"train": "training data", "test": "held-out data"}
#: a multi-class model's one-vs-rest curves are drawn for at most this many classes
MAX_CLASS_CURVES = 10


def plot_scores(curves: dict[str, dict[str, Any]], path: Path, *, title: str) -> Path | None:
    """Draw ``curves`` (by split: ``train``, ``test``) to ``path``; None (nothing written)
    when they hold nothing to draw (a reconstruction model's)."""
    panels = [panel for panel in (_roc, _precision_recall, _reliability, _residuals) if _has(panel, curves)]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.4), constrained_layout=True, squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        panel(ax, curves)
    fig.suptitle(title)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _has(panel: Any, curves: dict[str, dict[str, Any]]) -> bool:
    needs = {_roc: "roc", _precision_recall: "precision_recall", _reliability: "reliability",
             _residuals: "residuals"}[panel]
    return any(needs in found or any(needs in c for c in found.get("classes", [])) for found in curves.values())


def _lines(curves: dict[str, dict[str, Any]], key: str) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, colour, points, alpha) of each line of curve ``key``: one per split, or for a
    multi-class model one per class of the held-out data (else the training data)."""
    lines = []
    for split, found in curves.items():
        if key in found:
            lines.append((SPLIT_LABELS[split], COLOURS[split], found[key], 1.0))
    if lines:
        return lines
    split = "test" if "test" in curves else "train"
    classes = curves.get(split, {}).get("classes", [])
    return [(f"class {k} ({SPLIT_LABELS[split]})", f"C{k}", c[key], 0.9)
            for k, c in enumerate(classes[:MAX_CLASS_CURVES]) if key in c]


def _roc(ax: Any, curves: dict[str, dict[str, Any]]) -> None:
    for label, colour, points, alpha in _lines(curves, "roc"):
        ax.plot(points["fpr"], points["tpr"], color=colour, alpha=alpha, linewidth=1.5, label=label)
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1, label="chance")
    _square(ax, "ROC curve", "false positive rate", "true positive rate")


def _precision_recall(ax: Any, curves: dict[str, dict[str, Any]]) -> None:
    for label, colour, points, alpha in _lines(curves, "precision_recall"):
        ax.step(points["recall"], points["precision"], where="post", color=colour, alpha=alpha, linewidth=1.5,
                label=label)
    _square(ax, "Precision-recall curve", "recall", "precision", legend="lower left")


def _reliability(ax: Any, curves: dict[str, dict[str, Any]]) -> None:
    binary = all(found["reliability"]["of"] == "positive" for found in curves.values() if "reliability" in found)
    for split, found in curves.items():
        if "reliability" in found:
            points = found["reliability"]
            ax.plot(points["mean_predicted"], points["fraction_positive"], color=COLOURS[split], marker="o",
                    markersize=4, linewidth=1.5, label=SPLIT_LABELS[split])
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1, label="perfectly calibrated")
    if binary:
        _square(ax, "Reliability", "mean predicted P(y = 1), by bin", "fraction positive")
    else:
        _square(ax, "Reliability (top class)", "mean top-class probability, by bin", "fraction predicted right")


def _residuals(ax: Any, curves: dict[str, dict[str, Any]]) -> None:
    for split, found in curves.items():
        if "residuals" in found:
            edges, weight = np.asarray(found["residuals"]["edges"]), np.asarray(found["residuals"]["weight"])
            share = weight / weight.sum() if weight.sum() > 0 else weight
            ax.stairs(share, edges, color=COLOURS[split], linewidth=1.5, label=SPLIT_LABELS[split])
    ax.axvline(0.0, color="grey", linestyle=":", linewidth=1)
    ax.set_title("Residuals (label − prediction)")
    ax.set_xlabel("residual")
    ax.set_ylabel("share of the rows' weight")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")


def _square(ax: Any, title: str, xlabel: str, ylabel: str, legend: str = "lower right") -> None:
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_aspect("equal")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    many = len(ax.get_legend_handles_labels()[1]) > 4  # a multi-class model's one line per class
    ax.legend(fontsize="x-small" if many else "small", ncol=2 if many else 1, loc=legend)
