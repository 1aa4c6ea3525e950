"""Robust regression: Huber's loss, with its scale estimated jointly (scikit-learn's
``HuberRegressor``, Owen 2007) or fixed.

With the residual ``r_i = y_i - z_i`` of the decision value ``z_i = x_i . w + b`` (plus the
row's offset) and a scale ``sigma > 0``, a row's loss is

    sigma + sigma H(r_i / sigma),     H(t) = t^2 if |t| <= epsilon else 2 epsilon |t| - epsilon^2

squared inside ``epsilon sigma`` of the fit, linear beyond (rows that far out pull with a
bounded force: outliers). Jointly convex in ``(w, b, sigma)``. The objective is its weighted
mean plus ``(l2 / 2) ||w||^2`` and ``l1 ||w||_1`` (scikit-learn's ``HuberRegressor`` minimises
the weighted *sum* plus ``alpha ||w||^2``: the same optimum at ``l2 = 2 alpha / N``, ``N`` the
total weight; :class:`~dasklbfgs.estimators.HuberRegressor` converts).

``scale=None`` (the default, scikit-learn's): ``sigma`` is one more parameter, last in the
layout (coefficients, intercept, then ``sigma``: :attr:`~dasklbfgs.models.linear.LinearModel.n_extra`
is 1), started at 1 and kept ``>= 10`` machine epsilons (scikit-learn's bound) by the model's
:meth:`Huber.bounds`, so only Sandblaster (which keeps bounds) trains it. Its gradient in
``sigma``, ``1 - (r / sigma)^2`` inside and ``1 - epsilon^2`` beyond, is a row sum like every
other (:func:`~dasklbfgs.models._kernels.huber_scale_link`): it adds up across portions,
dense blocks, CSR blocks and a cached shard's compact columns (whose sums carry ``sigma``'s
position). ``scale=<number>``: ``sigma`` fixed, an ordinary link
(:func:`~dasklbfgs.models._kernels.huber_link`), the constant ``sigma`` kept in the loss so
that it is the joint model's loss at that scale; every solver trains it.

Predictions are ``z`` (the estimate of the mean); the held-out metrics are least squares'
(RMSE, R²).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models._kernels import huber_link, huber_scale_link
from dasklbfgs.models.nuisance import EstimatedNuisance

__all__ = ["SCALE_FLOOR", "Huber", "check_epsilon", "check_scale"]

#: The least jointly estimated scale: scikit-learn's bound, 10 machine epsilons.
SCALE_FLOOR = 10 * float(np.finfo(np.float64).eps)


def _real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_epsilon(epsilon: Any) -> float:
    """Huber's threshold in units of the scale: a finite number > 1 (at 1 and below the jointly
    estimated scale is not identified: every row tends to the linear part, least absolute
    deviations, with any scale below the smallest residual)."""
    if not (_real(epsilon) and np.isfinite(epsilon) and epsilon > 1):
        raise ConfigurationError(f"epsilon must be a finite number > 1 (Huber's threshold, in units of the scale; "
                                 f"scikit-learn's default 1.35), got {epsilon!r}")
    return float(epsilon)


def check_scale(scale: Any) -> float | None:
    """A fixed scale: None (estimated jointly) or a finite number > 0."""
    if scale is None:
        return None
    if not (_real(scale) and np.isfinite(scale) and scale > 0):
        raise ConfigurationError(f"scale must be None (estimated with the coefficients) or a finite number > 0, "
                                 f"got {scale!r}")
    return float(scale)


class Huber(EstimatedNuisance):
    """Huber regression (see the module): ``epsilon`` the threshold in units of the scale,
    ``scale`` fixed or (None) estimated with the coefficients as the last parameter."""

    name = "huber"
    nuisance = "scale"
    nuisance_floor = SCALE_FLOOR
    task = "regression"
    shape_options: ClassVar[tuple[str, ...]] = ("epsilon",)

    def __init__(self, n_features: int, *, epsilon: float = 1.35, scale: float | None = None, l2: float = 0.0,
                 fit_intercept: bool = True, l1: float = 0.0, lower_bounds: Any = None,
                 upper_bounds: Any = None) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1, lower_bounds=lower_bounds,
                         upper_bounds=upper_bounds)
        self.epsilon = check_epsilon(epsilon)
        self.scale = check_scale(scale)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> Huber:
        given = {name: value for name, value in shape.items() if value is not None}
        return cls(data.n_features, l2=l2, fit_intercept=fit_intercept, l1=l1, **given)

    # -- the scale: fixed, or estimated after the intercept (EstimatedNuisance) ---------------

    def scale_of(self, params: np.ndarray) -> float:
        """``sigma`` at ``params``: the last parameter, or the fixed ``scale``."""
        return self.nuisance_of(params)

    def link_at(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                ) -> tuple[float, np.ndarray]:
        return huber_link(z, y, w, epsilon=self.epsilon, scale=value)

    def link_and_derivative(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                            ) -> tuple[float, np.ndarray, float]:
        return huber_scale_link(z, y, w, epsilon=self.epsilon, scale=value)

    # -- prediction ---------------------------------------------------------------------------

    def predict(self, params: np.ndarray, X: Any, offset: np.ndarray | None = None) -> np.ndarray:
        """``z = X w + b`` (plus offsets): the estimate of the mean (``sigma`` plays no part)."""
        return self.decision_function(params, X, offset)

    def outliers(self, params: np.ndarray, X: Any, y: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
        """The rows whose residual is in the linear part: ``|y - z| > epsilon sigma``."""
        residual = np.abs(np.asarray(y, dtype=np.float64) - self.decision_function(params, X, offset))
        return residual > self.epsilon * self.scale_of(np.asarray(params, dtype=np.float64))

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "epsilon": self.epsilon, "scale": self.scale}
