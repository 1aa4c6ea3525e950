"""scikit-learn's GLM regressors: ``PoissonRegressor``, ``GammaRegressor`` and
``TweedieRegressor``, trained on Dask (:mod:`dasklbfgs.models.glm`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs._post_fit import on_the_cluster, share_explained
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.dask_input import is_dask_collection
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.estimators.base import REPLICAS, check_number, store_parameters
from dasklbfgs.estimators.linear import LeastSquaresEstimator
from dasklbfgs.models import LeastSquares
from dasklbfgs.models.glm import Tweedie, check_power, unit_deviance
from dasklbfgs.models.linear import LinearModel

__all__ = ["GammaRegressor", "PoissonRegressor", "TweedieRegressor"]

LINKS = ("auto", "identity", "log")


class TweedieRegressor(LeastSquaresEstimator):
    """scikit-learn's ``TweedieRegressor``: minimises the mean half Tweedie deviance of
    variance power ``power`` plus ``alpha / 2 ||w||^2`` (the intercept not penalised), the
    mean ``exp(x . w + b)`` with ``link="log"`` (``"auto"``: log, or identity at ``power=0``,
    which is least squares). ``score`` is scikit-learn's D^2, the share of the deviance
    explained. The other parameters are :class:`~dasklbfgs.estimators.LinearRegression`'s
    (any registered ``solver``, ``max_iter``, ``tol`` on the gradient, ``warm_start``,
    ``solver_options``, the input handling).
    """

    def __init__(self, *, power: float = 0.0, alpha: float = 1.0, fit_intercept: bool = True, link: str = "auto",
                 max_iter: int = 100, tol: float = 1e-4, warm_start: bool = False, solver: str = "sandblaster",
                 standardize: bool = True, learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, random_state: int | None = None,
                 client: Any = None) -> None:
        store_parameters(self, locals())

    def _power(self) -> float:
        return check_power(self.power)

    def _log_link(self) -> bool:
        """Whether the mean is ``exp(z)`` (else ``z``: least squares at power 0)."""
        if self.link not in LINKS:
            raise ConfigurationError(f"link must be one of {LINKS}, got {self.link!r}")
        if self.link == "identity" and self._power() != 0:
            raise ConfigurationError(f"link='identity' is fitted at power=0 (least squares) only; power={self.power!r} "
                                     "takes link='log' (or 'auto')")
        return self.link == "log" or (self.link == "auto" and self._power() != 0)

    def _model_of(self, n_features: int) -> LinearModel:
        if self._log_link():
            return Tweedie(n_features, power=self._power(), l2=self.alpha, fit_intercept=self.fit_intercept)
        return LeastSquares(n_features, l2=self.alpha, fit_intercept=self.fit_intercept)

    def _model(self, data: ShardedDataset) -> LinearModel:
        return self._model_of(data.n_features)

    def _check_penalty(self) -> None:
        """``alpha``, ``power`` and ``link``, before any data is written; labels outside the
        family's support (negative counts, amounts <= 0 for power >= 2) are refused by the
        model when the fit starts, naming the smallest."""
        check_number(self.alpha, "alpha")
        self._model_of(1)

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        """The predicted means."""
        z = self._checked(X) @ self.coef_ + self.intercept_
        return np.exp(z) if self._log_link() else z

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """D^2: ``1 - deviance / null deviance`` of the family, weighted (scikit-learn's)."""
        if isinstance(X, ShardedDataset) or is_dask_collection(X):
            return super().score(X, y, sample_weight)
        y = np.asarray(y, dtype=np.float64)
        w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        mean = float(np.average(y, weights=w))
        return share_explained(float(w @ self._deviance(y, self.predict(X))), float(w @ self._deviance(y, mean)))

    def _deviance(self, y: Any, predicted: Any) -> Any:
        return unit_deviance(y, predicted, self._power())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:  # labels the family takes: -1 is outside them at every power > 0 (scikit-learn's tag)
            tags.target_tags.positive_only = self._power() > 0
        except ConfigurationError:  # a bad power is refused by fit, not by the tags
            pass
        return tags


class PoissonRegressor(TweedieRegressor):
    """scikit-learn's ``PoissonRegressor``: :class:`TweedieRegressor` at power 1, the log link."""

    def __init__(self, *, alpha: float = 1.0, fit_intercept: bool = True, max_iter: int = 100, tol: float = 1e-4,
                 warm_start: bool = False, solver: str = "sandblaster", standardize: bool = True,
                 learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, random_state: int | None = None,
                 client: Any = None) -> None:
        store_parameters(self, locals())

    power, link = 1.0, "log"


class GammaRegressor(PoissonRegressor):
    """scikit-learn's ``GammaRegressor``: :class:`TweedieRegressor` at power 2, the log link."""

    power = 2.0
