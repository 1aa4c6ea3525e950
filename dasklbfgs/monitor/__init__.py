"""Monitoring: the "Training" page on the Dask dashboard.

The page (bokeh) is imported on first use: a run imports :mod:`dasklbfgs.monitor.events`,
which must not bring the dashboard's bokeh with it (:mod:`dasklbfgs._lazy`).
"""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports

if TYPE_CHECKING:
    from dasklbfgs.monitor.dashboard import TrainingPage, register, training_doc

__all__ = ["TrainingPage", "register", "training_doc"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "dasklbfgs.monitor.dashboard"))
