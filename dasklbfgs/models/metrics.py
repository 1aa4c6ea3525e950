"""Held-out metrics of a fitted model, streamed shard by shard over a dataset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dasklbfgs.models.base import Model

#: the held-out score of each task, as :func:`evaluate_model` names it, and how reports show it
SCORES = {"accuracy": "accuracy {accuracy:.4f}", "rmse": "rmse {rmse:.4g}, r2 {r2:.4f}",
          "reconstruction_mse": "reconstruction mse {reconstruction_mse:.4g}"}
#: each score's name on plots and pages (the dashboard, curves.png)
SCORE_LABELS = {"accuracy": "accuracy", "rmse": "RMSE", "reconstruction_mse": "reconstruction error (MSE)"}
assert set(SCORE_LABELS) == set(SCORES), "label every score the models report"


def evaluate_model(model: Model, params: np.ndarray, data: Any) -> dict[str, float]:
    """Objective and, by the model's task, accuracy (classification), RMSE and R^2
    (regression) or the mean squared reconstruction error (reconstruction) on ``data``.

    Reads one shard at a time, so the dataset may be larger than memory.
    """
    model.check_data(data)
    n = data.n_samples
    loss = correct = 0.0
    sums = np.zeros(model.n_sums)
    sum_y = sum_y2 = sse = 0.0
    for X, y in data.iter_shards():
        part_loss, part_sums = model.loss_grad_sum(params, X, y)
        loss += part_loss
        sums += part_sums
        if model.task == "classification":
            correct += float(np.sum(model.predict(params, X) == y))
        elif model.task == "regression":
            residual = model.predict(params, X) - y
            sse += float(residual @ residual)
            sum_y += float(y.sum())
            sum_y2 += float(y @ y)
        else:
            residual = model.predict(params, X) - X
            sse += float(np.einsum("ij,ij->", residual, residual))
    metrics = {"objective": model.objective_from_sums(params, loss, sums, n)[0], "n_samples": n}
    if model.task == "classification":
        metrics["accuracy"] = correct / n
    elif model.task == "regression":
        total = sum_y2 - sum_y * sum_y / n
        metrics["rmse"] = float(np.sqrt(sse / n))
        metrics["r2"] = 1.0 - sse / total if total > 0 else float("nan")
    else:
        metrics["reconstruction_mse"] = sse / (n * data.n_features)
    return metrics


def held_out_metrics(model: Model, params: np.ndarray, data: Any) -> dict[str, float]:
    """:func:`evaluate_model` with keys prefixed ``eval_`` (history entries, metrics events)."""
    metrics = evaluate_model(model, params, data)
    return {f"eval_{k}": v for k, v in metrics.items() if k != "n_samples"}


def score_name(metrics: Mapping[str, Any], prefix: str = "") -> str | None:
    """The name of the score in ``metrics`` (its key less ``prefix``, e.g. ``"eval_"``), if any."""
    return next((name for name in SCORES if prefix + name in metrics), None)
