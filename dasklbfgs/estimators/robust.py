"""scikit-learn's ``HuberRegressor``, trained on Dask (:class:`~dasklbfgs.models.Huber`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import column_or_1d

from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.constructors import unpack_xarray
from dasklbfgs.data.dask_input import is_dask_collection
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.estimators.base import REPLICAS, check_number, store_parameters
from dasklbfgs.estimators.linear import LeastSquaresEstimator
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.robust import Huber

__all__ = ["HuberRegressor"]


class HuberRegressor(LeastSquaresEstimator):
    """scikit-learn's ``HuberRegressor``: linear regression robust to outliers, its scale
    estimated with the coefficients. Minimises scikit-learn's

        sum_i w_i [sigma + sigma H((y_i - x_i . w - b) / sigma)] + alpha ||w||^2

    (``H(t) = t^2`` for ``|t| <= epsilon``, else ``2 epsilon |t| - epsilon^2``; Owen 2007; the
    intercept not penalised) over ``w``, ``b`` and ``sigma >= 10`` machine epsilons, solved as the
    same problem's weighted mean plus ``(l2 / 2) ||w||^2`` with ``l2 = 2 alpha / N`` (``N`` the total
    sample weight): :class:`~dasklbfgs.models.Huber` with its scale estimated, trained by
    Sandblaster's projected quasi-Newton method, which keeps ``sigma``'s bound (the replica
    methods keep no bounds and refuse it). ``epsilon`` must be > 1 (scikit-learn also takes 1,
    where the scale is not identified). ``tol`` is the tolerance on the projected gradient of the
    mean, ``max_iter`` counts L-BFGS iterations; ``standardize=True`` (the default) optimises in
    standardised coordinates, ``sigma`` passed through unchanged; the other parameters are
    :class:`~dasklbfgs.estimators.LinearRegression`'s.

    Attributes: ``coef_``, ``intercept_`` (0.0 without one), ``scale_`` (``sigma``), ``n_iter_``
    (an int, as scikit-learn's), ``loss_curve_`` and ``outliers_``, the rows with
    ``|y - X coef_ - intercept_| > epsilon scale_``: set for input held in this process (numpy,
    pandas, scipy.sparse, an in-memory ``xarray.Dataset``); for a ShardedDataset or dask input,
    whose rows are not here, it is not set (``predict`` and the labels give it, by the workers).
    ``score`` is R², scikit-learn's (by the workers for a dataset or dask input).
    """

    n_iter_: Any  # an int, as scikit-learn's HuberRegressor's (the other estimators': an array of one)
    outliers_: np.ndarray
    scale_: float

    def __init__(self, *, epsilon: float = 1.35, alpha: float = 0.0001, fit_intercept: bool = True,
                 max_iter: int = 100, tol: float = 1e-05, warm_start: bool = False, solver: str = "sandblaster",
                 standardize: bool = True, learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, random_state: int | None = None,
                 client: Any = None) -> None:
        store_parameters(self, locals())

    def _fitted(self, model: LinearModel, x: np.ndarray, X: Any, y: Any) -> None:
        """``scale_``, ``n_iter_`` as an int and ``outliers_`` (see the class)."""
        assert isinstance(model, Huber)
        self.scale_ = model.scale_of(x)
        self.n_iter_ = int(self.n_iter_[0])  # scikit-learn's HuberRegressor counts in an int
        self._record_outliers(X, y)

    def _model(self, data: ShardedDataset) -> Huber:
        return self._model_of(data.n_features, l2=2.0 * self.alpha / self._penalty_scale(data))

    def _model_of(self, n_features: int, *, l2: float = 0.0) -> Huber:
        return Huber(n_features, epsilon=self.epsilon, l2=l2, fit_intercept=self.fit_intercept)

    def _check_penalty(self) -> None:
        """``alpha`` and ``epsilon`` (and ``fit_intercept``), before any data is written."""
        check_number(self.alpha, "alpha")
        self._model_of(1)

    def _warm_start_x0(self, model: LinearModel) -> np.ndarray | None:
        """The linear estimators' warm start, with the fitted ``scale_`` last."""
        x0 = super()._warm_start_x0(model)
        if x0 is None or model.n_extra == 0:
            return x0
        return np.append(x0, float(self.scale_))

    def _record_outliers(self, X: Any, y: Any) -> None:
        """``outliers_`` of rows held here; none (an earlier fit's removed) for a dataset or dask input."""
        X, y, *_ = unpack_xarray(X, y)
        if isinstance(X, ShardedDataset) or is_dask_collection(X) or is_dask_collection(y):
            if hasattr(self, "outliers_"):
                del self.outliers_
            return
        residual = np.abs(column_or_1d(np.asarray(y), warn=False).astype(np.float64) - self.predict(X))
        self.outliers_ = residual > self.epsilon * self.scale_
