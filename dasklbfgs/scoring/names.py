"""The score each task reports first (the one a run's progress, its pages and plots show)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the held-out score of each task, as :func:`~dasklbfgs.scoring.evaluate` names it, and how reports show it
SCORES = {"accuracy": "accuracy {accuracy:.4f}", "rmse": "rmse {rmse:.4g}, r2 {r2:.4f}",
          "reconstruction_mse": "reconstruction mse {reconstruction_mse:.4g}"}
#: each score's name on plots and pages (the dashboard, curves.png)
SCORE_LABELS = {"accuracy": "accuracy", "rmse": "RMSE", "reconstruction_mse": "reconstruction error (MSE)"}
assert set(SCORE_LABELS) == set(SCORES), "label every score the models report"
#: the metrics a run scores its held-out data with as it goes, by task (its first is the score above)
HELD_OUT = {"classification": ("accuracy",), "regression": ("rmse", "r2"), "reconstruction": ("reconstruction_mse",)}


def score_name(metrics: Mapping[str, Any], prefix: str = "") -> str | None:
    """The name of the score in ``metrics`` (its key less ``prefix``, e.g. ``"eval_"``), if any."""
    return next((name for name in SCORES if prefix + name in metrics), None)
