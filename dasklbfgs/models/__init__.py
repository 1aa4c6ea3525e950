"""Objectives: loss and gradient sums over blocks of rows, prediction, initialisation."""

from dasklbfgs.models.linear import LeastSquares, LinearModel, Logistic, Softmax
from dasklbfgs.models.registry import MODELS, model_for_dataset

__all__ = ["LinearModel", "LeastSquares", "Logistic", "Softmax", "MODELS", "model_for_dataset"]
