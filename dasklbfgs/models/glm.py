"""Generalised linear models for counts and amounts, on the linear models' row-sum contract
(:class:`~dasklbfgs.models.linear.LinearModel`: dense or sparse shards, sample weights, l2,
l1 and the elastic net, every solver): the Tweedie family with the log link (Poisson for
claim counts, Gamma for claim sizes, Tweedie with any power for pure premiums), Gamma with
its canonical inverse link, and the negative binomial (NB2) for over-dispersed counts.

With the log link the mean of row ``i`` is ``mu_i = exp(x_i . w + b)``; the loss is
scikit-learn's half Tweedie deviance less what depends on ``y`` alone (the kernel
:func:`~dasklbfgs.models._kernels.tweedie_link`), so the optimum and the gradient are
scikit-learn's ``PoissonRegressor``, ``GammaRegressor`` and ``TweedieRegressor(link="log")``
objectives' (``alpha`` there is ``l2`` here: both sit beside the mean loss). Gamma's inverse
link and the negative binomial are statsmodels' ``GLM`` families (see their classes).
:func:`unit_deviance` is the deviance itself, for scores (D²).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models._kernels import (
    gamma_inverse_curvature,
    gamma_inverse_link,
    negative_binomial_curvature,
    negative_binomial_dispersion_link,
    negative_binomial_link,
    tweedie_curvature,
    tweedie_link,
)
from dasklbfgs.models.base import first_bad_label
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.nuisance import EstimatedNuisance

__all__ = ["Gamma", "NegativeBinomial", "Poisson", "Tweedie", "check_dispersion", "check_power", "label_terms",
           "null_deviance", "unit_deviance"]

#: The least jointly estimated negative binomial dispersion (``NegativeBinomial(dispersion=None)``).
DISPERSION_FLOOR = 1e-8
#: Gamma's links: the mean ``exp(z)`` or the canonical ``1 / z``.
GAMMA_LINKS = ("log", "inverse")


def check_power(power: Any) -> float:
    """A Tweedie power: 0 (normal), 1 (Poisson), in (1, 2) (compound Poisson-gamma), 2
    (gamma) or above (positive stable); (0, 1) and below 0 have no distribution we fit."""
    if not (isinstance(power, (int, float, np.integer, np.floating)) and not isinstance(power, bool)
            and np.isfinite(power) and (power == 0 or power >= 1)):
        raise ConfigurationError(f"power must be 0 or a number >= 1 (1: Poisson, 2: Gamma, between: compound "
                                 f"Poisson-gamma), got {power!r}")
    return float(power)


def _positive_number(value: Any) -> bool:
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            and bool(np.isfinite(value)) and bool(value > 0))


def check_dispersion(dispersion: Any) -> float:
    """The negative binomial's dispersion ``a`` (variance ``mu + a mu^2``): a finite number > 0."""
    if not _positive_number(dispersion):
        raise ConfigurationError(f"dispersion must be a finite number > 0 (the variance is mu + dispersion mu^2; "
                                 f"statsmodels' alpha), got {dispersion!r}")
    return float(dispersion)


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


class _MeanRegression(LinearModel):
    """A regression whose prediction is a mean of the margins ``z = x . w + b``
    (:meth:`mean_of`: ``exp(z)`` here), scored by the Tweedie deviance at
    :attr:`deviance_power`, its shape options given to the constructor as they are."""

    task = "regression"

    @property
    def deviance_power(self) -> float:
        """The Tweedie power of the deviance metrics (``mean_tweedie_deviance``, ``d2``)."""
        raise NotImplementedError

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> LinearModel:
        given = {name: value for name, value in shape.items() if value is not None}
        return cls(data.n_features, l2=l2, fit_intercept=fit_intercept, l1=l1, **given)

    def mean_of(self, z: np.ndarray) -> np.ndarray:
        """The means of margins ``z``: ``exp(z)``."""
        return np.exp(z)

    def outputs_of(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The predicted means."""
        return self.mean_of(z), None

    def predict(self, params: np.ndarray, X: Any, offset: np.ndarray | None = None) -> np.ndarray:
        """The predicted means of the rows of ``X``."""
        return self.mean_of(self.decision_function(params, X, offset))

    def _refuse_negative_labels(self, data: Dataset) -> None:
        low, _ = data.label_range
        if low < 0:
            raise ModelDataMismatchError(f"{self!r} needs labels >= 0 (counts, amounts), but y at {data.url!r} has "
                                         f"the smallest value {low:g}{first_bad_label(data, lambda y: y < 0)}")


class Tweedie(_MeanRegression):
    """Tweedie regression with the log link, variance power ``power`` (see the module)."""

    name = "tweedie"
    shape_options: ClassVar[tuple[str, ...]] = ("power",)

    def __init__(self, n_features: int, *, power: float = 1.5, l2: float = 0.0, fit_intercept: bool = True,
                 l1: float = 0.0, lower_bounds: Any = None, upper_bounds: Any = None) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1,
                         lower_bounds=lower_bounds, upper_bounds=upper_bounds)
        self.power = check_power(power)

    @property
    def deviance_power(self) -> float:
        """The family's own: :attr:`power`."""
        return self.power

    def link(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        return tweedie_link(z, y, w, power=self.power)

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return tweedie_curvature(z, y, power=self.power)

    def _check_labels(self, data: Dataset) -> None:
        low, _ = data.label_range
        if self.power >= 2 and low <= 0:
            raise ModelDataMismatchError(f"{self!r} needs labels > 0 (its variance power is {self.power:g}), but y "
                                         f"at {data.url!r} has the smallest value {low:g}"
                                         f"{first_bad_label(data, lambda y: y <= 0)}")
        if 0 < self.power < 2:
            self._refuse_negative_labels(data)

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "power": self.power}


class _OnePower(Tweedie):
    """A family of the Tweedie family at its own power (``family_power``), not a parameter."""

    family_power: ClassVar[float]
    shape_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, n_features: int, *, l2: float = 0.0, fit_intercept: bool = True, l1: float = 0.0,
                 lower_bounds: Any = None, upper_bounds: Any = None) -> None:
        super().__init__(n_features, power=self.family_power, l2=l2, fit_intercept=fit_intercept, l1=l1,
                         lower_bounds=lower_bounds, upper_bounds=upper_bounds)

    def _config(self) -> dict[str, Any]:
        return {key: value for key, value in super()._config().items() if key != "power"}


class Poisson(_OnePower):
    """Poisson regression with the log link (counts, rates with sample weights)."""

    name = "poisson"
    family_power = 1.0


class Gamma(_OnePower):
    """Gamma regression (positive amounts: claim sizes, durations) with the log link
    (``link="log"``, the default) or the canonical inverse link (``link="inverse"``).

    With the inverse link the mean is ``mu = 1 / z``, defined where ``z = x . w + b > 0``;
    the loss is the half gamma deviance ``log(mu / y) + y / mu - 1`` less what depends on
    ``y`` alone, ``y z - log z``, with derivative ``y - 1 / z``
    (:func:`~dasklbfgs.models._kernels.gamma_inverse_link`): statsmodels'
    ``GLM(family=Gamma(link=InversePower()))`` optimum. Where some row has ``z <= 0`` the loss
    is ``+inf``, which the line searches of L-BFGS and OWL-QN take as a step too long. The
    start is coefficients 0 and intercept ``1 / start_mean`` (every row's mean ``start_mean``):
    inside the domain whatever the data, which is why the inverse link needs
    ``fit_intercept``. Built for a dataset (:func:`~dasklbfgs.models.registry.model_for_dataset`:
    the command line, pipelines) ``start_mean`` is the geometric middle of the labels' range;
    constructed, 1 unless given. A start far from the labels' scale (amounts in the thousands
    from mean 1) can leave L-BFGS stuck against the boundary, some row's ``z`` near 0: give
    ``start_mean`` near the labels' mean, or ``x0``. Mini-batch solvers (Downpour, the peer
    methods) take fixed steps that can leave the domain: train it with Sandblaster.
    Predictions of rows outside the domain are ``1 / z`` all the same (negative or infinite).
    """

    name = "gamma"
    family_power = 2.0
    shape_options: ClassVar[tuple[str, ...]] = ("link",)

    def __init__(self, n_features: int, *, link: str = "log", start_mean: float | None = None, l2: float = 0.0,
                 fit_intercept: bool = True, l1: float = 0.0, lower_bounds: Any = None,
                 upper_bounds: Any = None) -> None:
        super().__init__(n_features, l2=l2, fit_intercept=fit_intercept, l1=l1,
                         lower_bounds=lower_bounds, upper_bounds=upper_bounds)
        if link not in GAMMA_LINKS:
            raise ConfigurationError(f"link must be one of {GAMMA_LINKS!r}, got {link!r}")
        if link == "inverse" and not self.fit_intercept:
            raise ConfigurationError("link='inverse' needs fit_intercept=True: the mean 1 / (x . w + b) is defined "
                                     "for x . w + b > 0 only, and the intercept is what starts every row there")
        if start_mean is not None and not (link == "inverse" and _positive_number(start_mean)):
            raise ConfigurationError(f"start_mean is the inverse link's starting mean, a finite number > 0; got "
                                     f"{start_mean!r} with link={link!r}")
        self.link_name = link
        self.start_mean = None if start_mean is None else float(start_mean)

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> LinearModel:
        """With the inverse link, ``start_mean`` the geometric middle ``sqrt(y_min y_max)`` of the
        labels' recorded range: every row starts at a mean of the labels' scale."""
        low, high = data.label_range if shape.get("link") == "inverse" else (0.0, 0.0)
        if low > 0:
            shape = {**shape, "start_mean": math.sqrt(low * high)}
        return super().for_dataset(data, l2=l2, l1=l1, fit_intercept=fit_intercept, class_weight=class_weight,
                                   **shape)

    def link(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        if self.link_name == "inverse":
            return gamma_inverse_link(z, y, w)
        return super().link(z, y, w)

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.link_name == "inverse":
            return gamma_inverse_curvature(z)
        return super().curvature(z, y)

    def mean_of(self, z: np.ndarray) -> np.ndarray:
        """``exp(z)``, or ``1 / z`` with the inverse link."""
        return 1.0 / z if self.link_name == "inverse" else super().mean_of(z)

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """The linear models' start; with the inverse link, the intercept ``1 / start_mean``
        (default 1) added: zeros are ``z = 0`` on every row, outside its domain."""
        params = super().init_params(seed)
        if self.link_name == "inverse":
            params[self.n_coef] += 1.0 / (self.start_mean or 1.0)
        return params

    def _config(self) -> dict[str, Any]:
        start = {} if self.start_mean is None else {"start_mean": self.start_mean}
        return {**super()._config(), "link": self.link_name, **start}


class NegativeBinomial(EstimatedNuisance, _MeanRegression):
    """Negative binomial regression (NB2) with the log link, for over-dispersed counts: mean
    ``mu = exp(z)``, variance ``mu + a mu^2`` with a fixed ``dispersion`` ``a > 0``
    (statsmodels' ``alpha``; named apart from the solvers' and the path's own ``alpha``).

    The loss of a row is its negative log-likelihood less the log-gamma terms of ``y`` and
    ``a``: ``(y + 1/a) log(1 + a mu) - y z - y log a``, derivative ``(mu - y) / (1 + a mu)``
    (:func:`~dasklbfgs.models._kernels.negative_binomial_link`, stable for any ``z``); a sample
    weight multiplies the row's log-likelihood (statsmodels' ``freq_weights``), so the optimum
    is statsmodels' ``GLM(family=NegativeBinomial(alpha=a))``. As ``a -> 0`` it tends to Poisson.
    The deviance metrics are Poisson's (:attr:`deviance_power` 1), the same whatever ``a``:
    they compare an NB fit with a Poisson fit of the same counts.

    ``dispersion=None`` estimates ``a`` with the coefficients, by maximum likelihood
    (statsmodels' discrete ``NegativeBinomial(loglike_method="nb2")``): ``a`` is one more
    parameter, last in the layout, started at 1 and kept ``>=`` :data:`DISPERSION_FLOOR` by
    :meth:`bounds` (so Sandblaster trains it), the loss the full negative log-likelihood less
    ``log Γ(y + 1)`` (:func:`~dasklbfgs.models._kernels.negative_binomial_dispersion_link`).
    """

    name = "negative_binomial"
    nuisance = "dispersion"
    nuisance_floor = DISPERSION_FLOOR
    shape_options: ClassVar[tuple[str, ...]] = ("dispersion",)

    def __init__(self, n_features: int, *, dispersion: float | None = 1.0, l2: float = 0.0,
                 fit_intercept: bool = True, l1: float = 0.0, lower_bounds: Any = None,
                 upper_bounds: Any = None) -> None:
        super().__init__(n_features, 1, l2=l2, fit_intercept=fit_intercept, l1=l1,
                         lower_bounds=lower_bounds, upper_bounds=upper_bounds)
        self.dispersion = None if dispersion is None else check_dispersion(dispersion)

    @property
    def deviance_power(self) -> float:
        """Poisson's, 1 (see the class)."""
        return 1.0

    # -- the dispersion: fixed, or estimated after the intercept (EstimatedNuisance) ----------

    def dispersion_of(self, params: np.ndarray) -> float:
        """``a`` at ``params``: the last parameter, or the fixed ``dispersion``."""
        return self.nuisance_of(params)

    def link_at(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                ) -> tuple[float, np.ndarray]:
        return negative_binomial_link(z, y, w, dispersion=value)

    def link_and_derivative(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                            ) -> tuple[float, np.ndarray, float]:
        return negative_binomial_dispersion_link(z, y, w, dispersion=value)

    def curvature(self, z: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        """At the fixed dispersion; None when it is estimated (a parameter the Hessian does not cover)."""
        if self.dispersion is None:
            return None
        return negative_binomial_curvature(z, y, dispersion=self.dispersion)

    def _check_labels(self, data: Dataset) -> None:
        self._refuse_negative_labels(data)

    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "dispersion": self.dispersion}
