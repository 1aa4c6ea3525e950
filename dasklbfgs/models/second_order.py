"""What the portions of a Newton evaluation compute: a model's loss, gradient and Hessian sums
in one vector, so that Sandblaster's evaluator adds them in portion order as it adds
L-BFGS's (:mod:`dasklbfgs.solvers.sandblaster.newton`). Runs on the workers: pure numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs.models.compact_rows import plain_rows

__all__ = ["WithHessian"]


class WithHessian:
    """The portion model of a Newton run over ``model`` (a model whose ``has_hessian`` is True):
    a portion's sums are ``(loss, [gradient, Hessian row by row])``; :meth:`split` takes them
    apart. Sparse rows are computed whole (no compact sums: the Hessian is dense anyway)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    @property
    def n_params(self) -> int:
        """The parameters it is evaluated at: the model's."""
        return int(self.model.n_params)

    def portion_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                              offset: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        rows = plain_rows(X)
        loss, grad = self.model.sums_of(params, rows, y, w, offset)
        hessian = self.model.hessian_sum(params, rows, y, w, offset)
        return loss, np.concatenate([grad, hessian.ravel()])

    def compact_positions(self, X: Any) -> None:
        """Every parameter, for any rows (the evaluator's direct calls send the whole vector)."""
        return None

    def split(self, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The gradient sum and the Hessian sum (``n_params`` square) of added sums."""
        n = self.model.n_params
        return sums[:n], sums[n:].reshape(n, n)
