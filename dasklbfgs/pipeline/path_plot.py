"""The figure of a regularization path in a pipeline's report (``path.png``): the held-out
loss (the folds' mean under cross-validation) and the non-zero coefficients at each
penalty, the chosen one marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_path"]


def plot_path(report: dict[str, Any], path: Path, *, title: str) -> Path:
    """Draw the path of ``report`` (:func:`~dasklbfgs.selection.chosen.choose_penalty`'s) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fits = report["fits"]
    alphas = [fit["alpha"] for fit in fits]
    chosen = alphas[report["chosen"]]
    held_out = [fit["held_out"] for fit in fits if "held_out" in fit]
    panels = 2 if held_out else 1
    figure, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    drawn = [("non-zero coefficients", [fit["n_nonzero"] for fit in fits])]
    if held_out:
        drawn.insert(0, (f"held-out {report['chosen_by']}", held_out))
    for axis, (label, values) in zip(axes[0], drawn):
        axis.plot(alphas, values, marker="o", markersize=3)
        axis.axvline(chosen, color="tab:red", linestyle="--", linewidth=1, label=f"chosen: {chosen:.3g}")
        axis.set_xscale("log")
        axis.invert_xaxis()  # strongest penalty first, as the path runs
        axis.set_xlabel(f"{report['penalty']} penalty")
        axis.set_ylabel(label)
        axis.legend(loc="best", fontsize="small")
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
