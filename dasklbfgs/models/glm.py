"""Generalised linear models of the Tweedie family with the log link: Poisson (claim counts),
Gamma (claim sizes) and Tweedie with any power (pure premiums), on the linear models'
row-sum contract (:class:`~dasklbfgs.models.linear.LinearModel`: dense or sparse shards,
sample weights, l2, l1 and the elastic net, every solver).

The mean of row ``i`` is ``mu_i = exp(x_i . w + b)``; the loss is scikit-learn's half
Tweedie deviance less what depends on ``y`` alone (the kernel
:func:`~dasklbfgs.models._kernels.tweedie_link`), so the optimum and the gradient are
scikit-learn's ``PoissonRegressor``, ``GammaRegressor`` and ``TweedieRegressor(link="log")``
objectives' (``alpha`` there is ``l2`` here: both sit beside the mean loss).
:func:`unit_deviance` is the deviance itself, for scores (D²).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models._kernels import tweedie_link
from dasklbfgs.models.linear import LinearModel

__all__ = ["Gamma", "Poisson", "Tweedie", "check_power", "label_terms", "null_deviance", "unit_deviance"]


def check_power(power: Any) -> float:
    """A Tweedie power: 0 (normal), 1 (Poisson), in (1, 2) (compound Poisson-gamma), 2
    (gamma) or above (positive stable); (0, 1) and below 0 have no distribution we fit."""
    if not (isinstance(power, (int, float, np.integer, np.floating)) and not isinstance(power, bool)
            and np.isfinite(power) and (power == 0 or power >= 1)):
        raise ConfigurationError(f"power must be 0 or a number >= 1 (1: Poisson, 2: Gamma, between: compound "
                                 f"Poisson-gamma), got {power!r}")
    return float(power)


def unit_deviance(y: Any, mu: Any, power: float) -> Any:
    """The Tweedie unit deviance of labels ``y`` at means ``mu``, element by element (numpy
    or dask arrays): ``(y - mu)^2`` at power 0, ``2 (y log(y / mu) - y + mu)`` at 1,
    ``2 (log(mu / y) + y / mu - 1)`` at 2, else scikit-learn's general form."""
    from scipy.special import xlogy

    if power == 0:
        return (y - mu) ** 2
    if power == 1:
        return 2.0 * (xlogy(y, y / mu) - y + mu)
    if power == 2:
        return 2.0 * (np.log(mu / y) + y / mu - 1.0)
    return 2.0 * (np.maximum(y, 0) ** (2.0 - power) / ((1.0 - power) * (2.0 - power))
                  - y * mu ** (1.0 - power) / (1.0 - power) + mu ** (2.0 - power) / (2.0 - power))


def label_terms(y: np.ndarray, power: float) -> np.ndarray:
    """Per row, what the null deviance sums of the labels beyond their weight and weighted sum
    (:func:`null_deviance`): ``y log y`` at power 1, ``log y`` at 2, ``max(y, 0)^(2 - p)``
    otherwise (nothing at power 0: the labels' spread is their moments')."""
    from scipy.special import xlogy

    if power == 0:
        return np.zeros_like(y, dtype=np.float64)
    if power == 1:
        return xlogy(y, y)
    if power == 2:
        return np.log(y)
    return np.maximum(y, 0) ** (2.0 - power)


def null_deviance(power: float, weight: float, mean: float, spread: float, terms: float) -> float:
    """``sum_i w_i d(y_i, ybar)``, the deviance of the weighted mean ``ybar`` (``mean``), from
    sums any split of the rows adds up: the total ``weight``, the weighted squared deviations
    from the mean (``spread``, at power 0) and the weighted :func:`label_terms` (``terms``)."""
    total = weight * mean  # sum_i w_i y_i
    if power == 0:
        return spread
    if power == 1:
        return 2.0 * (terms - np.log(mean) * total) if mean > 0 else 0.0
    if power == 2:
        return 2.0 * (weight * np.log(mean) - terms)
    return 2.0 * (terms / ((1.0 - power) * (2.0 - power)) - mean ** (1.0 - power) * total / (1.0 - power)
                  + mean ** (2.0 - power) * weight / (2.0 - power))


class Tweedie(LinearModel):
    """Tweedie regression with the log link, variance power ``power`` (see the module)."""

    name = "tweedie"
    task = "regression"
    shape_options: ClassVar[tuple[str, ...]] = ("power",)

    def __init__(self, n_features: int, *, power: float = 1.5, l2: float = 0.0, fit_intercept: bool = True,
                 l1: float = 0.0) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1)
        self.power = check_power(power)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> LinearModel:
        power = {} if shape.get("power") is None else {"power": shape["power"]}
        return cls(data.n_features, l2=l2, fit_intercept=fit_intercept, l1=l1, **power)

    def link(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        return tweedie_link(z, y, w, power=self.power)

    def outputs_of(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The predicted means ``exp(z)``."""
        return np.exp(z), None

    def predict(self, params: np.ndarray, X: Any) -> np.ndarray:
        """The predicted means ``exp(x . w + b)``."""
        return np.exp(self.decision_function(params, X))

    def _check_labels(self, data: Dataset) -> None:
        low, _ = data.label_range
        if self.power >= 2 and low <= 0:
            raise ModelDataMismatchError(f"{self!r} needs labels > 0 (its variance power is {self.power:g}), but y "
                                         f"at {data.url!r} has the smallest value {low:g}")
        if 0 < self.power < 2 and low < 0:
            raise ModelDataMismatchError(f"{self!r} needs labels >= 0 (counts, amounts), but y at {data.url!r} has "
                                         f"the smallest value {low:g}")

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "power": self.power}


class _OnePower(Tweedie):
    """A family of the Tweedie family at its own power (``family_power``), not a parameter."""

    family_power: ClassVar[float]
    shape_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_features: int, *, l2: float = 0.0, fit_intercept: bool = True, l1: float = 0.0) -> None:
        super().__init__(n_features, power=self.family_power, l2=l2, fit_intercept=fit_intercept, l1=l1)

    def _config(self) -> dict[str, Any]:
        return {key: value for key, value in super()._config().items() if key != "power"}


class Poisson(_OnePower):
    """Poisson regression with the log link (counts, rates with sample weights)."""

    name = "poisson"
    family_power = 1.0


class Gamma(_OnePower):
    """Gamma regression with the log link (positive amounts: claim sizes, durations)."""

    name = "gamma"
    family_power = 2.0
