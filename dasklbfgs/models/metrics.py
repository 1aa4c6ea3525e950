"""Held-out metrics of a fitted model, streamed shard by shard over a dataset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model

#: the held-out score of each task, as :func:`evaluate_model` names it, and how reports show it
SCORES = {"accuracy": "accuracy {accuracy:.4f}", "rmse": "rmse {rmse:.4g}, r2 {r2:.4f}",
          "reconstruction_mse": "reconstruction mse {reconstruction_mse:.4g}"}
#: each score's name on plots and pages (the dashboard, curves.png)
SCORE_LABELS = {"accuracy": "accuracy", "rmse": "RMSE", "reconstruction_mse": "reconstruction error (MSE)"}
assert set(SCORE_LABELS) == set(SCORES), "label every score the models report"


def evaluate_model(model: Model, params: np.ndarray, data: Dataset) -> dict[str, float]:
    """Objective and, by the model's task, accuracy (classification), RMSE and R^2
    (regression) or the mean squared reconstruction error (reconstruction) on ``data``.

    Reads one shard at a time, so the dataset may be larger than memory. With sample
    weights, every figure is weighted (as scikit-learn's scores with ``sample_weight``), and
    means are over the total weight.
    """
    model.check_data(data)
    n = data.total_weight
    loss = correct = 0.0
    sums = np.zeros(model.n_sums)
    sum_y = sum_y2 = sse = 0.0
    for index in range(data.n_shards):
        X, y = data.load_shard(index)
        w = data.load_shard_weights(index)
        part_loss, part_sums = model.sums_of(params, X, y, w)
        loss += part_loss
        sums += part_sums
        weight = np.ones(X.shape[0]) if w is None else w
        if model.task == "classification":
            correct += float(weight @ (model.predict(params, X) == y))
        elif model.task == "regression":
            residual = model.predict(params, X) - y
            sse += float((weight * residual) @ residual)
            sum_y += float(weight @ y)
            sum_y2 += float((weight * y) @ y)
        else:
            residual = model.predict(params, X) - X
            sse += float(np.einsum("i,ij,ij->", weight, residual, residual))
    metrics = {"objective": model.objective_from_sums(params, loss, sums, n)[0], "n_samples": data.n_samples}
    if model.task == "classification":
        metrics["accuracy"] = correct / n
    elif model.task == "regression":
        total = sum_y2 - sum_y * sum_y / n
        metrics["rmse"] = float(np.sqrt(sse / n))
        metrics["r2"] = 1.0 - sse / total if total > 0 else float("nan")
    else:
        metrics["reconstruction_mse"] = sse / (n * data.n_features)
    return metrics


def held_out_metrics(model: Model, params: np.ndarray, data: Dataset) -> dict[str, float]:
    """:func:`evaluate_model` with keys prefixed ``eval_`` (history entries, metrics events)."""
    metrics = evaluate_model(model, params, data)
    return {f"eval_{k}": v for k, v in metrics.items() if k != "n_samples"}


def score_name(metrics: Mapping[str, Any], prefix: str = "") -> str | None:
    """The name of the score in ``metrics`` (its key less ``prefix``, e.g. ``"eval_"``), if any."""
    return next((name for name in SCORES if prefix + name in metrics), None)
