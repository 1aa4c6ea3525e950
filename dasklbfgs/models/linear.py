"""Generalised linear objectives: least squares, logistic and softmax regression.

Parameter layout (one flat float64 vector): coefficients first, the ``d x K`` matrix
row-major (``K = 1`` for least squares and logistic), then the ``K`` intercepts when
``fit_intercept``, then the ``n_extra`` parameters a model's link reads beside the decision
values (none but Huber's jointly estimated scale: :meth:`LinearModel.link_sums`). The objective is

    f(theta) = (1/N) sum_i c_{y_i} w_i loss(x_i . W + b, y_i) + (l2 / 2) ||W||^2 + l1 ||W||_1

with intercepts not penalised; ``w_i`` are the data's sample weights (1 without) and N their
sum (the row count without), ``c_k`` the classifiers' ``class_weight`` (1 without). Bounds
``lower_bounds <= W <= upper_bounds`` (numbers, or one per feature; intercepts never bounded)
constrain the coefficients: :meth:`Model.bounds`, kept by Sandblaster's projected
quasi-Newton method (docs/algorithms.md §12).
:meth:`Model.penalty` is the smooth part (the l2 term); the l1 term is the optimizer's
(:meth:`LinearModel.l1_weights`, OWL-QN, docs/algorithms.md §8). Models compute the loss and
gradient *sums* over a block of rows (:meth:`loss_grad_sum`), so partial results from any
split of the rows add up exactly to the full-data sums; the coordinator adds the penalty
once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset, is_sparse
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import schema
from dasklbfgs.models._kernels import (
    block_rows,
    logistic_curvature,
    logistic_link,
    softmax_link,
    softmax_rows,
    squared_link,
)
from dasklbfgs.models.base import Model, Scored, SoftmaxOutput, check_l2
from dasklbfgs.models.compact_rows import CompactColumns, plain_rows
from dasklbfgs.models.gram import weighted_gram
from dasklbfgs.models.sums import SparseSum, index_dtype
from dasklbfgs.optim.vectors import add_scaled

__all__ = ["LinearModel", "LeastSquares", "Logistic", "Softmax"]


def check_class_weight(class_weight: Any, n_classes: int) -> tuple[float, ...] | None:
    """``class_weight`` as a tuple of ``n_classes`` weights >= 0, not all 0 (None stays None)."""
    if class_weight is None:
        return None
    try:
        weights = np.asarray(class_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigurationError(f"class_weight must be {n_classes} numbers, one per class label 0..{n_classes - 1}, "
                                 f"got {class_weight!r}") from None
    if weights.shape != (n_classes,):
        raise ConfigurationError(f"class_weight must be {n_classes} numbers, one per class label 0..{n_classes - 1}, "
                                 f"got {class_weight!r}")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0) or not np.any(weights > 0):
        raise ConfigurationError(f"class_weight must be finite numbers >= 0, not all 0, got {class_weight!r}")
    return tuple(float(v) for v in weights)


def coefficient_bounds(lower: Any, upper: Any, n_features: int, n_outputs: int) -> tuple[Any, Any]:
    """``(lower_bounds, upper_bounds)`` of a linear model's coefficients, checked: each None, a
    number, or one number per feature (the same for every output); -inf and inf are no bound;
    the pair must leave some point (:func:`~dasklbfgs.optim.constraints.box`). Numbers stay
    numbers, per-feature bounds become float64 arrays (n_features,)."""
    from dasklbfgs.optim.constraints import box

    checked: list[Any] = []
    for value, name in ((lower, "lower_bounds"), (upper, "upper_bounds")):
        if value is None:
            checked.append(None)
            continue
        try:
            bound = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigurationError(f"{name} must be a number or {n_features} numbers (one per feature), got "
                                     f"{value!r}") from None
        if bound.shape not in ((), (n_features,)):
            raise ConfigurationError(f"{name} must be a number or {n_features} numbers (one per feature), got shape "
                                     f"{bound.shape}")
        checked.append(float(bound) if bound.ndim == 0 else bound)
    try:
        box(checked[0], checked[1], n_features)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{exc} (lower_bounds and upper_bounds, by feature)") from None
    return checked[0], checked[1]


class LinearModel(Model):
    """Shared machinery of the linear objectives; subclasses set the link and label rules."""

    name: ClassVar[str]
    accepts_sparse: ClassVar[bool] = True
    accepts_weights: ClassVar[bool] = True
    accepts_offsets: ClassVar[bool] = True
    linear: ClassVar[bool] = True
    _link: ClassVar[Callable[..., tuple[float, np.ndarray]]]
    class_weight: tuple[float, ...] | None = None
    n_features: int

    def __init__(self, n_features: int, n_outputs: int, *, l2: float, fit_intercept: bool, l1: float,
                 lower_bounds: Any = None, upper_bounds: Any = None) -> None:
        self.n_features = check_int(n_features, "n_features")
        self.n_outputs = n_outputs
        self.l2 = check_l2(l2)
        self.l1 = check_l2(l1, "l1")
        if not isinstance(fit_intercept, (bool, np.bool_)):
            raise ConfigurationError(f"fit_intercept must be True or False, got {fit_intercept!r}")
        self.fit_intercept = bool(fit_intercept)
        self.lower_bounds, self.upper_bounds = coefficient_bounds(lower_bounds, upper_bounds, n_features, n_outputs)

    # -- layout ----------------------------------------------------------------------

    @property
    def n_coef(self) -> int:
        return self.n_features * self.n_outputs

    @property
    def n_extra(self) -> int:
        """Parameters after the intercepts that the link reads (:meth:`link_sums`; Huber's
        jointly estimated scale), last in the layout: none here."""
        return 0

    @property
    def n_params(self) -> int:
        return self.n_coef + (self.n_outputs if self.fit_intercept else 0) + self.n_extra

    @property
    def starts_at_zero(self) -> bool:
        """Whether :meth:`init_params` (no seed) is all zeros: the linear models' start, known
        without forming it; a subclass with a start of its own (Gamma's inverse link) is asked."""
        return type(self).init_params is LinearModel.init_params or not np.any(self.init_params())

    def unpack(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(W, b)``: W is (d,) when K = 1 else (d, K); b is (K,) (zeros without intercept)."""
        coef = params[: self.n_coef]
        W = coef if self.n_outputs == 1 else coef.reshape(self.n_features, self.n_outputs)
        b = params[self.n_coef : self.n_coef + self.n_outputs] if self.fit_intercept else np.zeros(self.n_outputs)
        return W, b

    def extra_of(self, params: np.ndarray) -> np.ndarray:
        """View of the :attr:`n_extra` parameters after the intercepts (empty for most models)."""
        return params[len(params) - self.n_extra :]

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """Zeros (``seed=None``) or small Gaussian weights drawn from ``seed``."""
        if seed is None:
            return np.zeros(self.n_params)
        return np.random.default_rng(seed).normal(scale=0.01, size=self.n_params)

    # -- objective pieces ---------------------------------------------------------------

    def link(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        """The loss sum of decision values ``z`` against labels ``y`` (weights ``w``) and its
        derivative in ``z``: the model's link kernel (:mod:`dasklbfgs.models._kernels`)."""
        return type(self)._link(z, y, w)

    def link_sums(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, extra: np.ndarray,
                  extra_grad: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`link` of a block for the row sums, given the :attr:`n_extra` parameters after
        the intercepts (``extra``); a model that has some adds the block's gradient sums in them
        to ``extra_grad`` in place. Here (no such parameters) the link itself."""
        return self.link(z, y, w)

    def row_weights(self, y: np.ndarray, w: np.ndarray | None) -> np.ndarray | None:
        """Each row's weight in the sums: its sample weight times its class's weight (None: all 1)."""
        if self.class_weight is None:
            return w
        by_class = np.asarray(self.class_weight)[y.astype(np.intp, copy=False)]
        return by_class if w is None else by_class * w

    def loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                      w: np.ndarray | None = None, offset: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Sum over the rows of (loss, gradient of the loss), weighted by
        :meth:`row_weights`, each row's ``offset`` (when given) added to its decision value;
        no penalty.

        Rows are processed in cache-sized blocks: each block of X is read from memory for
        ``X_b W`` and is still in cache for ``X_b^T dz``, so X streams from memory about
        once per call. A sparse X (``scipy.sparse``, CSR) is never densified: its
        products cost its non-zeros.
        """
        w = self.row_weights(y, w)
        if is_sparse(X):
            return self._sparse_loss_grad_sum(params, X.tocsr(), y, w, offset)
        if X.dtype.kind != "f":  # integer-coded features: compute in float64, never truncate W
            X = X.astype(np.float64)
        W, b = self.unpack(params)
        W = W.astype(X.dtype, copy=False)
        grad = np.zeros(self.n_params)
        gW, gb = self.unpack(grad)  # views into grad; without an intercept gb is scratch
        extra, g_extra = self.extra_of(params), self.extra_of(grad)
        loss = 0.0
        step = block_rows(self.n_features * (1 if self.n_outputs == 1 else 2), X.dtype.itemsize)
        for start in range(0, X.shape[0], step):
            Xb = X[start : start + step]
            z = Xb @ W
            z += b if self.n_outputs > 1 else b[0]
            if offset is not None:
                z += offset[start : start + step]
            block_w = None if w is None else w[start : start + step]
            block_loss, dz = self.link_sums(z, y[start : start + step], block_w, extra, g_extra)
            loss += block_loss
            gW += dz @ Xb if self.n_outputs == 1 else Xb.T @ dz
            gb += dz.sum(axis=0)
        return loss, grad

    def _sparse_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                              w: np.ndarray | None, offset: np.ndarray | None) -> tuple[float, np.ndarray]:
        """:meth:`loss_grad_sum` of a CSR block in one pass (a row of it is a few non-zeros:
        no cache blocking needed); float64 parameters whatever X's dtype."""
        grad = np.zeros(self.n_params)
        loss, dz = self._sparse_link(*self.unpack(params), X, y, w, offset, self.extra_of(params),
                                     self.extra_of(grad))
        gW, gb = self.unpack(grad)
        gW += X.T @ dz
        gb += dz.sum(axis=0)
        return loss, grad

    def _sparse_link(self, W: np.ndarray, b: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
                     offset: np.ndarray | None, extra: np.ndarray, extra_grad: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss sum and ``d loss / d z`` of the rows of a CSR block at coefficients ``W``
        (the rows of ``W`` that ``X``'s columns index), intercepts ``b``, offsets and the
        parameters after the intercepts (:meth:`link_sums`)."""
        z = np.asarray(X @ W, dtype=np.float64)
        z += b if self.n_outputs > 1 else b[0]
        if offset is not None:
            z += offset
        return self.link_sums(z, y, w, extra, extra_grad)

    def portion_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                              w: np.ndarray | None = None, offset: np.ndarray | None = None) -> tuple[float, Any]:
        """On sparse rows, the gradient sum as a :class:`~dasklbfgs.models.sums.SparseSum`:
        the coefficients of the columns the rows use (all ``n_outputs`` of each) and the
        intercepts; everything else is zero. Its size follows the rows' non-zeros, not
        ``n_features``: the rows are taken on their columns renumbered ``0..m-1``
        (:class:`~dasklbfgs.models.compact_rows.CompactColumns`; a cached shard comes so
        already), the parameters gathered at them and the gradient formed on them. Each
        value receives the same products in the same order as in :meth:`loss_grad_sum`
        (renumbering keeps each row's order), so the numbers are its bits. Dense X:
        :meth:`loss_grad_sum`."""
        if not (is_sparse(X) or isinstance(X, CompactColumns)):
            return super().portion_loss_grad_sum(params, X, y, w, offset)
        rows = CompactColumns.of(X)
        positions = self.positions_of(rows.columns)
        loss, values = self.compact_loss_grad_sum(params[positions], rows, y, w, offset)
        return loss, SparseSum(self.n_params, positions, values)

    def compact_positions(self, X: Any) -> np.ndarray | None:
        """On rows renumbered on their columns (:class:`CompactColumns`), the coefficients of
        those columns and the intercepts (:meth:`positions_of`); otherwise every parameter."""
        if not isinstance(X, CompactColumns):
            return None
        return self.positions_of(X.columns)

    def compact_loss_grad_sum(self, local_params: np.ndarray, X: Any, y: np.ndarray,
                              w: np.ndarray | None = None, offset: np.ndarray | None = None
                              ) -> tuple[float, np.ndarray]:
        """The sums of :meth:`portion_loss_grad_sum` on :class:`CompactColumns` rows from the
        coefficients of their columns, the intercepts then the :attr:`n_extra` parameters
        (``local_params``), as values in that layout."""
        K, m, n_extra = self.n_outputs, len(X.columns), self.n_extra
        n_local = m * K + (K if self.fit_intercept else 0) + n_extra
        if local_params.shape != (n_local,):
            raise ValueError(f"{len(X.columns)} columns with {K} output(s) need {n_local} parameters, got "
                             f"{local_params.shape}")
        coef = local_params[: m * K]
        W = coef if K == 1 else coef.reshape(m, K)
        b = local_params[m * K : m * K + K] if self.fit_intercept else np.zeros(K)
        g_extra = np.zeros(n_extra)
        loss, dz = self._sparse_link(W, b, X.local, y, self.row_weights(y, w), offset, self.extra_of(local_params),
                                     g_extra)
        gW = np.zeros(m if K == 1 else (m, K))
        gW += X.local.T @ dz
        values = gW.ravel()
        if self.fit_intercept:
            gb = np.zeros(K)
            gb += dz.sum(axis=0)
            values = np.concatenate([values, gb])
        if n_extra:
            values = np.concatenate([values, g_extra])
        return loss, values

    def positions_of(self, columns: np.ndarray) -> np.ndarray:
        """Where in the parameters the coefficients of the features ``columns`` are (every
        output of each, in order), then the intercepts when the model fits them and the
        :attr:`n_extra` parameters: the layout of a compact sum over those columns (as a
        :class:`SparseSum` index)."""
        K, dtype = self.n_outputs, index_dtype(self.n_params)
        index: np.ndarray = (columns.astype(dtype)[:, None] * K + np.arange(K, dtype=dtype)).ravel()
        if self.n_params == self.n_coef:  # no intercepts, nothing after them
            return index
        return np.concatenate([index, np.arange(self.n_coef, self.n_params, dtype=dtype)])

    def on_columns(self, columns: np.ndarray) -> LinearModel:
        """This model on the features ``columns`` alone (sorted, distinct): its objective at
        parameters laid out as :meth:`positions_of` ``columns`` puts them is this model's at
        the parameters zero on every other feature's coefficients (the penalties are
        separable), its bounds those features' bounds."""
        on = copy.copy(self)
        on.n_features = len(columns)
        on.lower_bounds, on.upper_bounds = (
            bound if bound is None or np.ndim(bound) == 0 else np.asarray(bound)[columns]
            for bound in (self.lower_bounds, self.upper_bounds))
        return on

    def row_table_for(self, data: Dataset) -> Any:
        """On sparse data without a penalty, the rows of W (one per feature, ``n_outputs``
        wide): a batch's gradient is zero in the rows of the features it has no value for,
        so Downpour pushes and fetches only the others. An l2 penalty makes every row's
        gradient non-zero (``l2 * W``), and dense data touches every row: then none."""
        from dasklbfgs.models.embedding import RowTable

        if getattr(data, "is_sparse", False) and self.l2 == 0.0:
            return RowTable(0, self.n_features, self.n_outputs)
        return None

    def touched_rows(self, X: Any) -> np.ndarray:
        """The features (rows of W) with a value in a row of ``X``, sorted."""
        if is_sparse(X):
            return np.unique(X.tocsr().indices)
        return np.flatnonzero(np.any(np.asarray(X) != 0, axis=0))

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        """(l2 / 2) ||W||^2 and its gradient (zero on intercepts)."""
        grad = np.zeros(self.n_params)
        if self.l2 == 0.0:
            return 0.0, grad
        coef = params[: self.n_coef]
        grad[: self.n_coef] = self.l2 * coef
        return 0.5 * self.l2 * float(coef @ coef), grad

    def add_penalty(self, params: np.ndarray, grad: np.ndarray) -> float:
        """``grad[:n_coef] += l2 * W`` in place (:func:`~dasklbfgs.optim.vectors.add_scaled`:
        the same bits as forming ``l2 * W`` whole, without it); returns (l2 / 2) ||W||^2."""
        if self.l2 == 0.0:
            return 0.0
        coef = params[: self.n_coef]
        add_scaled(grad[: self.n_coef], self.l2, coef)
        return 0.5 * self.l2 * float(coef @ coef)

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lower, upper)`` over the parameters: the coefficients' bounds (each feature's for
        each output), the intercepts unbounded; None without bounds."""
        if self.lower_bounds is None and self.upper_bounds is None:
            return None
        lower, upper = np.full(self.n_params, -np.inf), np.full(self.n_params, np.inf)
        for bound, into in ((self.lower_bounds, lower), (self.upper_bounds, upper)):
            if bound is not None:
                into[: self.n_coef] = np.repeat(np.asarray(bound, dtype=np.float64), self.n_outputs) \
                    if np.ndim(bound) else bound
        return lower, upper

    def l1_weights(self) -> np.ndarray | None:
        """``l1`` on every coefficient and 0 on the intercepts; ``None`` without an l1 term."""
        if self.l1 == 0.0:
            return None
        weights = np.zeros(self.n_params)
        weights[: self.n_coef] = self.l1
        return weights

    # -- second order: the Newton procedure ----------------------------------------------

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        """Per row, the second derivative of the loss in the decision value at ``z`` against
        labels ``y`` (float64, unweighted); None: the model has none (a scale or dispersion
        estimated beside the coefficients), and Newton's method is refused for it."""
        return None

    @property
    def has_hessian(self) -> bool:
        """Whether :meth:`hessian_sum` is defined (Newton's method trains the model)."""
        return self.n_extra == 0 and type(self).curvature is not LinearModel.curvature

    def hessian_sum(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                    offset: np.ndarray | None = None) -> np.ndarray:
        """Sum over the rows of the loss's Hessian in the parameters, weighted as
        :meth:`loss_grad_sum` (no penalty): ``Xa^T diag(w h) Xa``, ``h`` the rows'
        :meth:`curvature` and ``Xa`` the rows with a column of ones for the intercept
        (:func:`~dasklbfgs.models.gram.weighted_gram`), ``n_params`` square."""
        X = plain_rows(X)
        y = np.asarray(y, dtype=np.float64)
        h = self.curvature(np.asarray(self.decision_function(params, X, offset), dtype=np.float64), y)
        if h is None:
            raise TypeError(f"{self!r} has no Hessian (has_hessian is False)")
        weights = self.row_weights(y, w)
        return weighted_gram(X, h if weights is None else h * weights, self.fit_intercept)

    def penalty_curvature(self) -> np.ndarray:
        """The diagonal of the penalty's Hessian: ``l2`` on the coefficients, 0 elsewhere."""
        diagonal = np.zeros(self.n_params)
        diagonal[: self.n_coef] = self.l2
        return diagonal

    # -- prediction -----------------------------------------------------------------------

    def decision_function(self, params: np.ndarray, X: Any, offset: np.ndarray | None = None) -> np.ndarray:
        """``X W + b``, plus each row's ``offset`` when given."""
        W, b = self.unpack(np.asarray(params, dtype=np.float64))
        z = (X.tocsr() if is_sparse(X) else np.asarray(X)) @ W
        z = z + (b if self.n_outputs > 1 else b[0])
        if offset is not None:
            self.check_offsets_taken()
            z += offset
        return z

    def outputs(self, params: np.ndarray, X: Any, offset: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        return self.outputs_of(self.decision_function(params, X, offset))

    def outputs_of(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`outputs` of the decision values ``z`` (the predictions, for a regression)."""
        return z, None

    def scored(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
               offset: np.ndarray | None = None) -> Scored:
        """One product ``X W`` gives the loss and the outputs: no gradient (an evaluation
        reports the objective's value only), one pass over the rows."""
        z = self.decision_function(params, X, offset)
        outputs, predicted = self.outputs_of(z)
        extra = self.extra_of(np.asarray(params, dtype=np.float64))
        loss, _ = self.link_sums(z.copy() if outputs is z else z, y, self.row_weights(y, w), extra,
                                 np.zeros(self.n_extra))  # links work in place
        return Scored(float(loss), None, outputs, predicted)

    def _config(self) -> dict[str, Any]:
        bounds = {name: value if np.ndim(value) == 0 else np.asarray(value).tolist()
                  for name, value in (("lower_bounds", self.lower_bounds), ("upper_bounds", self.upper_bounds))
                  if value is not None}
        return {"n_features": self.n_features, "l2": self.l2, "l1": self.l1, "fit_intercept": self.fit_intercept,
                **bounds}


class LeastSquares(LinearModel):
    """Linear regression: per-sample loss 0.5 (x . w + b - y)^2."""

    name = "least_squares"
    task = "regression"
    _link = staticmethod(squared_link)

    def __init__(self, n_features: int, *, l2: float = 0.0, fit_intercept: bool = True, l1: float = 0.0,
                 lower_bounds: Any = None, upper_bounds: Any = None) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1, lower_bounds=lower_bounds,
                         upper_bounds=upper_bounds)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> LeastSquares:
        return cls(data.n_features, l2=l2, fit_intercept=fit_intercept, l1=l1)

    def predict(self, params: np.ndarray, X: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        return self.decision_function(params, X, offset)

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """1 a row: the Hessian is the weighted Gram matrix itself."""
        return np.ones_like(z)


class Logistic(LinearModel):
    """Binary logistic regression, labels 0/1: per-sample loss log(1 + e^z) - y z."""

    name = "logistic"
    takes_class_weight = True
    _link = staticmethod(logistic_link)

    def __init__(self, n_features: int, *, l2: float = 0.0, fit_intercept: bool = True, l1: float = 0.0,
                 class_weight: Sequence[float] | None = None, lower_bounds: Any = None,
                 upper_bounds: Any = None) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1, lower_bounds=lower_bounds,
                         upper_bounds=upper_bounds)
        self.class_weight = check_class_weight(class_weight, 2)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> Logistic:
        weights = None if class_weight is None else schema.balanced_class_weight(data, 2)
        return cls(data.n_features, l2=l2, fit_intercept=fit_intercept, l1=l1, class_weight=weights)

    def predict_proba(self, params: np.ndarray, X: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        """Columns P(y=0), P(y=1)."""
        return self.outputs_of(self.decision_function(params, X, offset))[0]

    def predict(self, params: np.ndarray, X: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        return (self.decision_function(params, X, offset) > 0).astype(np.int64)

    def outputs_of(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from scipy.special import expit  # the logistic function, accurate in both tails

        proba = np.empty((z.shape[0], 2))
        expit(z, out=proba[:, 1])
        np.subtract(1.0, proba[:, 1], out=proba[:, 0])
        return proba, (z > 0).astype(np.int64)

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``p (1 - p)``, ``p = sigmoid(z)``."""
        return logistic_curvature(z)

    def _check_labels(self, data: Dataset) -> None:
        self._check_class_labels(data, 2)

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), **({} if self.class_weight is None else {"class_weight": list(self.class_weight)})}


class Softmax(SoftmaxOutput, LinearModel):
    """Multinomial logistic regression, labels 0..K-1: per-sample loss -log softmax(z)_y."""

    name = "softmax"
    takes_class_weight = True
    accepts_offsets = False  # one offset a row would shift every class's score alike: nothing
    _link = staticmethod(softmax_link)

    def __init__(self, n_features: int, n_classes: int, *, l2: float = 0.0, fit_intercept: bool = True,
                 l1: float = 0.0, class_weight: Sequence[float] | None = None, lower_bounds: Any = None,
                 upper_bounds: Any = None) -> None:
        n_classes = check_int(n_classes, "n_classes", minimum=2)
        super().__init__(n_features, n_classes, l2=l2, fit_intercept=fit_intercept, l1=l1, lower_bounds=lower_bounds,
                         upper_bounds=upper_bounds)
        self.class_weight = check_class_weight(class_weight, n_classes)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> Softmax:
        k = schema.n_classes(data)
        weights = None if class_weight is None else schema.balanced_class_weight(data, k)
        return cls(data.n_features, k, l2=l2, fit_intercept=fit_intercept, l1=l1, class_weight=weights)

    @property
    def n_classes(self) -> int:
        return self.n_outputs

    @property
    def has_hessian(self) -> bool:
        return True

    def hessian_sum(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                    offset: np.ndarray | None = None) -> np.ndarray:
        """Per pair of classes ``(k, l)``, ``Xa^T diag(w p_k (delta_kl - p_l)) Xa``, laid out as the
        parameters are (feature-major, the intercepts as a last feature). Without a penalty the
        matrix is singular: adding one number to every class's scores changes nothing."""
        X = plain_rows(X)
        p = softmax_rows(np.asarray(self.decision_function(params, X), dtype=np.float64))
        weights = self.row_weights(y, w)
        weights = np.ones(p.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
        K, m = self.n_outputs, self.n_features + (1 if self.fit_intercept else 0)
        hessian = np.empty((m, K, m, K))
        for k in range(K):
            for other in range(k, K):
                h = -p[:, k] * p[:, other]
                if other == k:
                    h += p[:, k]
                gram = weighted_gram(X, weights * h, self.fit_intercept)
                hessian[:, k, :, other] = gram
                hessian[:, other, :, k] = gram
        return hessian.reshape(m * K, m * K)

    def _config(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "n_classes": self.n_classes, **{
            k: v for k, v in super()._config().items() if k != "n_features"},
            **({} if self.class_weight is None else {"class_weight": list(self.class_weight)})}
