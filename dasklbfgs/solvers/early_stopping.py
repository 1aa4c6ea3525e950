"""Early stopping on the held-out objective, for every solver (``early_stopping``).

A run with held-out data scores it every ``eval_every`` iterations or global steps
(:meth:`~dasklbfgs.solvers.context.RunContext.score`); each scoring reaches
:meth:`~dasklbfgs.solvers.context.RunContext.report` as the entry's ``eval_objective``. The
rule keeps the best value and the parameters it was scored at, and stops the run once
``n_iter_no_change`` scorings in a row have not beaten it by more than ``min_improvement``
(scikit-learn's ``n_iter_no_change``, XGBoost's ``early_stopping_rounds``). ``minimize`` then
returns those best parameters with status ``EARLY_STOPPED``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["EarlyStopping"]


@dataclass
class EarlyStopping:
    """The best held-out objective so far, where it was scored and at what parameters."""

    patience: int
    min_improvement: float
    best: float = math.inf
    best_step: int | None = None
    best_params: np.ndarray | None = None
    since_best: int = 0
    reason: str | None = None  # why it stopped the run (None: it did not)

    def update(self, entry: dict[str, Any], params: Callable[[], np.ndarray]) -> str | None:
        """Take an entry's held-out objective, if it has one; the reason to stop, if it is time."""
        value = entry.get("eval_objective")
        if value is None or self.reason is not None:
            return None
        if float(value) < self.best - self.min_improvement:
            self.best, self.best_step, self.since_best = float(value), entry.get("step"), 0
            self.best_params = np.array(params(), dtype=np.float64)
            return None
        self.since_best += 1
        if self.since_best < self.patience:
            return None
        self.reason = (f"early stopping: the held-out objective did not improve by more than "
                       f"{self.min_improvement:g} in {self.patience} scoring(s) after its best, {self.best:.6g} at "
                       f"step {self.best_step}; the result holds the parameters of that step")
        return self.reason

    def summary(self) -> dict[str, Any]:
        """What the result records (``result.early_stopping``)."""
        return {"stopped": self.reason is not None, "best_step": self.best_step, "best_eval_objective": self.best}
