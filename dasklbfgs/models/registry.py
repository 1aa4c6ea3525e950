"""Model names used by the command line and pipelines, and building a model for a dataset."""

from __future__ import annotations

from typing import Any

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LeastSquares, LinearModel, Logistic, Softmax

MODELS = ("least_squares", "logistic", "softmax")


def model_for_dataset(name: str, data: Any, *, l2: float = 0.0, fit_intercept: bool = True) -> LinearModel:
    """Build model ``name`` sized for ``data`` (classes from the dataset's labels)."""
    if name == "least_squares":
        return LeastSquares(data.n_features, l2=l2, fit_intercept=fit_intercept)
    if name == "logistic":
        return Logistic(data.n_features, l2=l2, fit_intercept=fit_intercept)
    if name == "softmax":
        n_classes = data.attrs.get("n_classes")
        if n_classes is None:
            n_classes = int(data.label_range[1]) + 1
        return Softmax(data.n_features, int(n_classes), l2=l2, fit_intercept=fit_intercept)
    raise ConfigurationError(f"model must be one of {MODELS!r}, got {name!r}")
