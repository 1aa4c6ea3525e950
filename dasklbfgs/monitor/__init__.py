"""Monitoring: the "Training" page on the Dask dashboard."""

from dasklbfgs.monitor.dashboard import TrainingPage, register, training_doc

__all__ = ["TrainingPage", "register", "training_doc"]
