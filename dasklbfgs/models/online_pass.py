"""An online pass of Adagrad over one block of rows, and the weighted average of several
blocks' passes: the warm start of Sandblaster's online-then-batch (docs/algorithms.md, "Online,
then batch").

Each shard's pass starts from the same parameters and steps through its rows in order, a
mini-batch of :data:`BATCH_ROWS` rows at a time, with Adagrad's per-coordinate rates
(:func:`dasklbfgs.optim.updates.adagrad`) on the stochastic gradient of the objective
(the mean loss plus the model's L2 penalty). On sparse rows of a linear model a step
touches only the mini-batch's columns: the parameters are gathered at them, and the L2
penalty is applied lazily, on the coordinates a mini-batch touches (as Vowpal Wabbit does),
so a pass costs the rows' non-zeros, not the model's width. Other models and dense rows step
on every parameter.

The passes are then averaged coordinate by coordinate, each weighted by the squared
gradients its pass summed there (Agarwal, Chapelle, Dudik and Langford 2014): a column that
only one shard's rows use keeps that shard's value rather than a fraction of it, and a
shard that saw more of a coordinate has more say. Pure numpy; the average takes the passes
in shard order, so the result does not depend on where any pass ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs._typing import is_sparse
from dasklbfgs.models.compact_rows import CompactColumns
from dasklbfgs.optim.updates import adagrad

if TYPE_CHECKING:
    from dasklbfgs.models.base import Model

__all__ = ["BATCH_ROWS", "PassResult", "adagrad_pass", "averaged"]

#: rows per online step (a mini-batch: Vowpal Wabbit steps on every row, which Python cannot
#: afford; at a few dozen rows a step costs little more than its rows' products)
BATCH_ROWS = 32


@dataclass(frozen=True)
class PassResult:
    """What one block's pass returns: the parameters it moved (``index``, sorted; None: all
    of them), their values after the pass, the squared gradients it summed at each (their
    weight in :func:`averaged`), and the loss of its rows as each mini-batch met them, before
    stepping on it (progressive validation: a held-out estimate for free)."""

    index: np.ndarray | None
    params: np.ndarray
    weight: np.ndarray
    loss: float
    rows_weight: float

    @property
    def mean_loss(self) -> float:
        """The progressive loss per unit of row weight."""
        return self.loss / self.rows_weight if self.rows_weight > 0 else float("nan")


def adagrad_pass(model: Model, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                 offset: np.ndarray | None = None, *, learning_rate: float, batch_rows: int = BATCH_ROWS
                 ) -> PassResult:
    """One pass of Adagrad at ``learning_rate`` over the rows of ``X`` (in order, ``batch_rows``
    at a time; their ``offset`` when given) from ``params``; ``params`` is not modified."""
    from dasklbfgs.models.linear import LinearModel

    if isinstance(model, LinearModel) and (is_sparse(X) or isinstance(X, CompactColumns)):
        return _sparse_linear_pass(model, params, CompactColumns.of(X), y, w, offset, learning_rate, batch_rows)
    return _dense_pass(model, params, X, y, w, offset, learning_rate, batch_rows)


def averaged(start: np.ndarray, passes: Sequence[PassResult]) -> np.ndarray:
    """The passes' parameters averaged per coordinate, weighted by their squared gradients
    there, in the order given; ``start`` where no pass moved a coordinate."""
    total = np.zeros(start.size)
    weight = np.zeros(start.size)
    for result in passes:
        where = slice(None) if result.index is None else result.index
        total[where] += result.weight * result.params
        weight[where] += result.weight
    x = np.array(start, dtype=np.float64)
    moved = weight > 0
    x[moved] = total[moved] / weight[moved]
    return x


def _batches(n: int, batch_rows: int) -> range:
    return range(0, n, max(1, int(batch_rows)))


def _weight(w: np.ndarray | None, rows: int) -> float:
    """A mini-batch's weight (its rows, or their weights' sum; 0: it moves nothing)."""
    return float(rows if w is None else np.sum(w, dtype=np.float64))


def _dense_pass(model: Model, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
                offset: np.ndarray | None, learning_rate: float, batch_rows: int) -> PassResult:
    """Any model, any rows: each step on the objective of its mini-batch (loss and penalty)."""
    rule = adagrad(learning_rate)
    x = np.array(params, dtype=np.float64)
    state = rule.init(x)
    loss = rows_weight = 0.0
    if hasattr(X, "to_csr"):
        X = X.to_csr()
    for start in _batches(X.shape[0], batch_rows):
        stop = start + batch_rows
        Xb, yb, wb = X[start:stop], y[start:stop], None if w is None else w[start:stop]
        weight = _weight(wb, Xb.shape[0])
        if weight <= 0:
            continue
        ob = None if offset is None else offset[start:stop]
        batch_loss, sums = model.sums_of(x, Xb, yb, wb, ob)  # what model.objective does, keeping the loss sum
        _, g = model.objective_from_sums(x, batch_loss, sums, weight)
        loss += batch_loss
        rows_weight += weight
        delta, state = rule.update(g, state)
        x += delta
    return PassResult(None, x, state["accumulator"], loss, rows_weight)


def _sparse_linear_pass(model: Any, params: np.ndarray, rows: CompactColumns, y: np.ndarray, w: np.ndarray | None,
                        offset: np.ndarray | None, learning_rate: float, batch_rows: int) -> PassResult:
    """A linear model on sparse rows: every step on the mini-batch's own columns.

    A step works on the mini-batch's non-zeros directly: each row's margin and each column's
    gradient summed over them in the rows' order (as scipy's CSR products add them), the
    columns it touches found by marking them. No sparse matrix is made per step: at a few
    dozen rows a step, making and renumbering one cost several times the arithmetic."""
    rule = adagrad(learning_rate)
    K = model.n_outputs
    W, b = model.unpack(np.asarray(params, dtype=np.float64))
    coef = np.array(W[rows.columns], dtype=np.float64).reshape(len(rows.columns), K)  # on the shard's columns
    intercept = np.array(b, dtype=np.float64)
    coef_sq, intercept_sq = np.zeros_like(coef), np.zeros_like(intercept)
    weights = model.row_weights(y, w)
    link, l2 = model.link, model.l2
    local = rows.local
    n, step = local.shape[0], max(1, int(batch_rows))
    starts, column_of = local.indptr, local.indices  # each non-zero's column among the shard's
    # numpy's own float64 (a view when the values are float64 already): values read from a
    # store may carry an equal dtype of their own, which sends np.add.at down its slow loop
    values = np.asarray(local.data, dtype=np.float64)
    gradient_sums = np.zeros_like(coef)  # a step's gradient sums on its columns, zeroed after it
    mark = np.empty(len(coef), dtype=np.intp)  # which of a step's non-zeros stands for its column
    loss = rows_weight = 0.0
    for start in _batches(n, step):
        stop = min(start + step, n)
        yb, wb = y[start:stop], None if weights is None else weights[start:stop]
        # the objective's mean is over the sample weights; class weights scale the loss only
        weight = _weight(None if w is None else w[start:stop], stop - start)
        if weight <= 0:
            continue
        scale = 1.0 / weight
        nonzeros = slice(starts[start], starts[stop])
        at, v = column_of[nonzeros].astype(np.intp), values[nonzeros]
        r = np.repeat(np.arange(stop - start), np.diff(starts[start : stop + 1]))  # each non-zero's row
        z: np.ndarray
        if K == 1:
            z = np.bincount(r, weights=v * coef[at, 0], minlength=stop - start)
        else:
            z = np.zeros((stop - start, K))
            np.add.at(z, r, v[:, None] * coef[at])
        z += intercept if K > 1 else intercept[0]
        if offset is not None:
            z += offset[start:stop]
        batch_loss, dz = link(z, yb, wb)
        loss += batch_loss
        rows_weight += weight
        if K == 1:
            np.add.at(gradient_sums[:, 0], at, v * dz[r])
        else:
            np.add.at(gradient_sums, at, v[:, None] * dz[r])
        order = np.arange(len(at))
        mark[at] = order
        columns = at[mark[at] == order]  # each column the step touches, once
        grad = gradient_sums[columns] * scale
        gradient_sums[columns] = 0.0
        current = coef[columns]
        grad += l2 * current  # the penalty on the coordinates this step touches (lazily, as Vowpal Wabbit)
        delta, state = rule.update(grad, {"accumulator": coef_sq[columns]})
        coef[columns] = current + delta
        coef_sq[columns] = state["accumulator"]
        if model.fit_intercept:
            grad_b = np.asarray(dz, dtype=np.float64).reshape(-1, K).sum(axis=0) * scale
            delta_b, state_b = rule.update(grad_b, {"accumulator": intercept_sq})
            intercept += delta_b
            intercept_sq = state_b["accumulator"]
    values_out, squares = coef.ravel(), coef_sq.ravel()
    if model.fit_intercept:
        values_out, squares = np.concatenate([values_out, intercept]), np.concatenate([squares, intercept_sq])
    return PassResult(model.positions_of(rows.columns), values_out, squares, loss, rows_weight)
