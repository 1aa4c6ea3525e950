"""The names of the metrics: the score each task reports first (the one a run's progress, its
pages and plots show), the ones a run scores its held-out data with as it goes, and every
metric's label on plots, pages and reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: each figure :func:`~dasklbfgs.scoring.evaluate` reports (the metrics of every task, as
#: :data:`~dasklbfgs.scoring.summaries.METRICS` names them, the ``objective`` and the rows
#: scored), as plots, pages and reports name it
METRIC_LABELS = {
    "objective": "objective", "n_samples": "rows",
    "log_loss": "log-loss", "accuracy": "accuracy", "roc_auc": "ROC AUC", "average_precision": "average precision",
    "precision": "precision", "recall": "recall", "f1": "F1", "confusion_matrix": "confusion matrix",
    "brier_score": "Brier score",
    "rmse": "RMSE", "mae": "MAE", "r2": "R²", "explained_variance": "explained variance",
    "mean_tweedie_deviance": "mean deviance", "d2": "D²",
    "reconstruction_mse": "reconstruction error (MSE)",
}
#: the figures that are better when higher (the others, losses and errors, when lower)
HIGHER_IS_BETTER = frozenset({"accuracy", "roc_auc", "average_precision", "precision", "recall", "f1", "r2",
                              "explained_variance", "d2"})
#: the held-out score of each task, as :func:`~dasklbfgs.scoring.evaluate` names it, and how reports show it
SCORES = {"accuracy": "accuracy {accuracy:.4f}", "rmse": "rmse {rmse:.4g}, r2 {r2:.4f}",
          "mean_tweedie_deviance": "mean deviance {mean_tweedie_deviance:.4g}, d2 {d2:.4f}",
          "reconstruction_mse": "reconstruction mse {reconstruction_mse:.4g}"}
#: each score's name on plots and pages (the dashboard, curves.png)
SCORE_LABELS = {name: METRIC_LABELS[name] for name in SCORES}
#: the metrics a run scores its held-out data with as it goes, by task (its first is the score
#: above), and for a GLM's (:func:`held_out_kind`) its family's deviance and D²
HELD_OUT = {"classification": ("accuracy",), "regression": ("rmse", "r2"), "reconstruction": ("reconstruction_mse",),
            "deviance": ("mean_tweedie_deviance", "d2")}


def held_out_kind(model: Any) -> str:
    """Which :data:`HELD_OUT` metrics a run of ``model`` scores its held-out data with: its
    task's, or ``"deviance"`` for a regression scored by a deviance other than the squared
    error (a GLM: its ``deviance_power`` is not 0)."""
    if model.task == "regression" and float(getattr(model, "deviance_power", 0.0)) != 0.0:
        return "deviance"
    return str(model.task)


def held_out_names(model: Any) -> tuple[str, ...]:
    """The metrics a run of ``model`` scores its held-out data with (:func:`held_out_kind`)."""
    return HELD_OUT[held_out_kind(model)]


def score_name(metrics: Mapping[str, Any], prefix: str = "") -> str | None:
    """The name of the score in ``metrics`` (its key less ``prefix``, e.g. ``"eval_"``), if any."""
    return next((name for name in SCORES if prefix + name in metrics), None)


def metric_label(name: str) -> str:
    """How plots, pages and reports name the figure ``name`` (the name itself for one not in
    :data:`METRIC_LABELS`)."""
    return METRIC_LABELS.get(name, name)


def held_out_label(key: str) -> str:
    """How plots and pages name the held-out figure a run records as ``key`` (its history's
    and events' ``eval_`` keys: ``"eval_r2"`` is ``"held-out R²"``)."""
    return f"held-out {metric_label(key.removeprefix('eval_'))}"
