"""Scoring a fitted model by the workers: metrics under scikit-learn's names, and
predictions for every row of a dataset, written where the data is."""

from dasklbfgs.scoring.evaluation import evaluate, held_out_metrics
from dasklbfgs.scoring.inference import Inference, inference
from dasklbfgs.scoring.predictions import predict
from dasklbfgs.scoring.summaries import METRICS

__all__ = ["METRICS", "Inference", "evaluate", "held_out_metrics", "inference", "predict"]
