"""Held-out metrics of a fitted model, streamed shard by shard over a dataset."""

from __future__ import annotations

from typing import Any

import numpy as np


def evaluate_model(model: Any, params: np.ndarray, data: Any) -> dict[str, float]:
    """Objective and, for classifiers, accuracy (regression: RMSE and R^2) on ``data``.

    Reads one shard at a time, so the dataset may be larger than memory.
    """
    model.check_data(data)
    n = data.n_samples
    loss = correct = 0.0
    sum_y = sum_y2 = sse = 0.0
    classifier = hasattr(model, "predict_proba")
    for X, y in data.iter_shards():
        part_loss, _ = model.loss_grad_sum(params, X, y)
        loss += part_loss
        if classifier:
            correct += float(np.sum(model.predict(params, X) == y))
        else:
            residual = model.predict(params, X) - y
            sse += float(residual @ residual)
            sum_y += float(y.sum())
            sum_y2 += float(y @ y)
    metrics = {"objective": loss / n + model.penalty(params)[0], "n_samples": n}
    if classifier:
        metrics["accuracy"] = correct / n
    else:
        total = sum_y2 - sum_y * sum_y / n
        metrics["rmse"] = float(np.sqrt(sse / n))
        metrics["r2"] = 1.0 - sse / total if total > 0 else float("nan")
    return metrics
