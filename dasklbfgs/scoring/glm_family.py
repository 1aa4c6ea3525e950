"""A linear model's GLM family under statsmodels' names (:func:`family_of`), and what
:func:`~dasklbfgs.scoring.inference.inference` needs of it row by row (:class:`Family`): the
mean of a linear predictor, the variance function, the working weight of the link, the unit
deviance and log-likelihood, the deviance of the labels' weighted mean, and for data with
offsets the intercept-only model's start and derivatives (docs/algorithms.md §11).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.glm import NegativeBinomial, Tweedie, label_terms, null_deviance, unit_deviance
from dasklbfgs.models.linear import LeastSquares, Logistic, Softmax

if TYPE_CHECKING:
    from dasklbfgs.models.base import Model
    from dasklbfgs.scoring.summaries import Moments

__all__ = ["EPS", "Family", "family_of"]

EPS = np.finfo(np.float64).eps

#: a Tweedie-family model's ``link_name``: statsmodels' name of its link
_LINKS = {"log": "Log", "inverse": "InversePower"}


@dataclass(frozen=True)
class Family:
    """A GLM family under statsmodels' names, and its row-by-row figures: the mean of a
    linear predictor, the variance function ``V(mu) = mu^power`` (``mu (1 - mu)`` for the
    binomial, ``mu + a mu^2`` for the negative binomial), the GLM working weight of the link,
    the unit deviance and the log-likelihood."""

    name: str  # Gaussian, Binomial, Poisson, Gamma, Tweedie or NegativeBinomial
    link: str  # Identity, Logit, Log or InversePower
    power: float  # the variance power (0 Gaussian, 1 Poisson, 2 Gamma; 0 and unused for the binomial and the NB)
    estimated_scale: bool  # the dispersion is Pearson chi2 / df_resid (else 1)
    dispersion: float = 0.0  # the negative binomial's a (statsmodels' alpha)

    @property
    def binomial(self) -> bool:
        return self.name == "Binomial"

    @property
    def negative_binomial(self) -> bool:
        """The NB2 family, whose sample weights are statsmodels' ``freq_weights``."""
        return self.name == "NegativeBinomial"

    def mean(self, z: np.ndarray) -> np.ndarray:
        """The inverse link of the linear predictor ``z``."""
        from scipy.special import expit

        if self.link == "Log":
            return np.exp(z)
        if self.link == "InversePower":
            return 1.0 / z
        return expit(z) if self.binomial else z

    def variance(self, mu: np.ndarray) -> np.ndarray:
        """``V(mu)``; the binomial's with ``mu`` clipped to ``[eps, 1 - eps]``, as statsmodels does."""
        if self.binomial:
            p = np.clip(mu, EPS, 1.0 - EPS)
            return p * (1.0 - p)
        if self.negative_binomial:
            return mu + self.dispersion * mu**2
        return np.ones_like(mu) if self.power == 0 else mu**self.power

    def working_weights(self, mu: np.ndarray) -> np.ndarray:
        """``1 / (g'(mu)^2 V(mu))``: 1 for the identity link, ``V(mu)`` for the logit,
        ``mu^(2 - p)`` for the log link (``mu / (1 + a mu)`` for the NB), ``mu^(4 - p)`` for
        the inverse (``g' = -1 / mu^2``)."""
        if self.negative_binomial:
            return mu / (1.0 + self.dispersion * mu)
        if self.link == "Log":
            return mu ** (2.0 - self.power)
        if self.link == "InversePower":
            return mu ** (4.0 - self.power)
        return self.variance(mu) if self.binomial else np.ones_like(mu)

    def unit_deviance(self, y: np.ndarray, z: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """Per row, the deviance: twice the log-loss for the binomial (from ``z``: no
        overflow), statsmodels' ``2 (y log(y / mu) - (y + 1/a) log((1 + a y) / (1 + a mu)))``
        for the NB, the Tweedie unit deviance at ``power`` otherwise."""
        from scipy.special import xlogy

        if self.binomial:
            return 2.0 * (np.logaddexp(0.0, z) - y * z)
        if self.negative_binomial:
            a = self.dispersion
            return 2.0 * (xlogy(y, y / mu) - (y + 1.0 / a) * (np.log1p(a * y) - np.log1p(a * mu)))
        return unit_deviance(y, mu, self.power)

    def label_terms(self, y: np.ndarray) -> np.ndarray:
        """Per row, what the deviance of the weighted mean sums of the labels beyond their
        weight and weighted sum (:meth:`null_deviance`): the NB's ``y log y - (y + 1/a)
        log(1 + a y)``, :func:`~dasklbfgs.models.glm.label_terms` otherwise."""
        from scipy.special import xlogy

        if self.negative_binomial:
            return xlogy(y, y) - (y + 1.0 / self.dispersion) * np.log1p(self.dispersion * y)
        return label_terms(y, self.power)

    def null_deviance(self, labels: Moments, terms: float) -> float:
        """The deviance of the labels' weighted mean (statsmodels' ``null_deviance`` without
        offsets), from their weighted moments and :meth:`label_terms` summed (``terms``):
        the binomial's from the weight of the 1s and 0s, the Tweedie family's by
        :func:`~dasklbfgs.models.glm.null_deviance`."""
        from scipy.special import xlogy

        if self.binomial:
            ones, zeros = labels.weight * labels.mean, labels.weight * (1.0 - labels.mean)
            return float(-2.0 * (xlogy(ones, labels.mean) + xlogy(zeros, 1.0 - labels.mean)))
        if self.negative_binomial:
            if labels.mean <= 0:
                return 0.0
            a, total = self.dispersion, labels.weight * labels.mean
            return float(2.0 * (terms - np.log(labels.mean) * total
                                + np.log1p(a * labels.mean) * (total + labels.weight / a)))
        return float(null_deviance(self.power, labels.weight, labels.mean, labels.m2, terms))

    def unit_loglike(self, y: np.ndarray, z: np.ndarray, mu: np.ndarray) -> np.ndarray | None:
        """Per row, the log-likelihood at scale 1 where it is the row's alone: statsmodels'
        Poisson (power 1) and NB ``loglike_obs``; None for the others (:meth:`loglike`)."""
        from scipy.special import gammaln, xlogy

        if self.negative_binomial:
            a = self.dispersion
            return (y * (np.log(a) + z) - (y + 1.0 / a) * np.log1p(a * mu) + gammaln(y + 1.0 / a)
                    - gammaln(1.0 / a) - gammaln(y + 1.0))
        if self.power == 1 and not self.binomial:
            return xlogy(y, mu) - mu - gammaln(y + 1.0)
        return None

    def loglike(self, y: np.ndarray, mu: np.ndarray, weight: np.ndarray, scale: float) -> np.ndarray:
        """Per row, statsmodels' Gamma (power 2) or Tweedie (``1 < p < 2``) ``loglike_obs``
        at dispersion ``scale`` with ``var_weights`` ``weight``."""
        if self.power == 2:
            return _gamma_loglike(y, mu, weight, scale)
        return _tweedie_loglike(y, mu, weight, scale, self.power)

    # -- the intercept-only model with offsets ----------------------------------------------

    def null_start_sums(self, y: np.ndarray, offset: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Two sums over rows with offsets for :meth:`null_start`: ``sum w y e^((1-p) o)``
        and ``sum w e^((2-p) o)`` with the log link (the NB's at ``p = 1``), ``sum w o`` and
        ``sum w`` with the others."""
        if self.link == "Log":
            p = 1.0 if self.negative_binomial else self.power
            return np.array([weight @ (y * np.exp((1.0 - p) * offset)), weight @ np.exp((2.0 - p) * offset)])
        return np.array([weight @ offset, weight.sum()])

    def null_start(self, sums: np.ndarray, labels: Moments) -> float:
        """The first intercept of the intercept-only model with offsets ``o``, from the
        :meth:`null_start_sums`: with the log link ``log(sum w y e^((1-p) o) / sum w
        e^((2-p) o))``, its optimum (the NB's from Poisson's); otherwise ``g(ybar) - sum w o /
        sum w``, the Gaussian's optimum. -inf or inf when every label is at the family's
        bound (no count, no event or all events)."""
        from scipy.special import logit

        with np.errstate(divide="ignore", invalid="ignore"):
            if self.link == "Log":
                return float(np.log(sums[0] / sums[1]))
            return float((logit(labels.mean) if self.binomial else labels.mean) - sums[0] / sums[1])

    def intercept_derivatives(self, y: np.ndarray, mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the first and second derivatives in the linear predictor ``z`` of the
        half deviance (the NB's negative log-likelihood): ``(mu - y) r`` and ``v + (mu - y)
        r'``, with ``r = mu'(z) / V(mu)`` (1 for the canonical identity and logit) and ``v``
        the working weight. Not for the inverse link (inference refuses it with offsets)."""
        residual = mu - y
        if self.link != "Log":
            return residual, self.working_weights(mu)
        if self.negative_binomial:
            ratio = 1.0 / (1.0 + self.dispersion * mu)
            slope = -self.dispersion * mu * ratio**2
        else:
            ratio = mu ** (1.0 - self.power)
            slope = (1.0 - self.power) * ratio
        return residual * ratio, self.working_weights(mu) + residual * slope


def family_of(model: Model) -> Family:
    """The GLM family of ``model`` (least squares: Gaussian with the identity link; logistic:
    binomial with the logit; Poisson, Gamma, Tweedie and the negative binomial with the log
    link, a Gamma with the inverse link too), or a :class:`ConfigurationError` for a model
    that is none of these."""
    if isinstance(model, Softmax):
        raise ConfigurationError(f"inference does not cover multiclass models: {model!r} is a softmax (multinomial) "
                                 "regression, which statsmodels' GLM has no family for; fit a Logistic model per "
                                 "class (one-vs-rest) to get standard errors")
    if isinstance(model, LeastSquares):
        return Family("Gaussian", "Identity", 0.0, True)
    if isinstance(model, Logistic):
        return Family("Binomial", "Logit", 0.0, False)
    if isinstance(model, NegativeBinomial):
        if model.dispersion is None:
            raise ConfigurationError(
                f"{model!r} estimates its dispersion with the coefficients; inference takes a fixed one (statsmodels' "
                "GLM family): fit NegativeBinomial(dispersion=<the estimate>) at the estimated parameters")
        return Family("NegativeBinomial", "Log", 0.0, False, model.dispersion)
    if isinstance(model, Tweedie):
        name = {"poisson": "Poisson", "gamma": "Gamma"}.get(model.name, "Tweedie")
        link = getattr(model, "link_name", "log")  # a Gamma's may be its canonical inverse
        if link not in _LINKS:
            raise ConfigurationError(f"inference knows the log and inverse links, and {model!r} has link {link!r}")
        return Family(name, _LINKS[link], model.power, name != "Poisson")
    raise ConfigurationError(f"inference computes the standard errors of a generalised linear model's coefficients, "
                             f"and {model!r} is not one: it takes LeastSquares, Logistic, Poisson, Gamma, Tweedie or "
                             "NegativeBinomial")


def _gamma_loglike(y: np.ndarray, mu: np.ndarray, weight: np.ndarray, scale: float) -> np.ndarray:
    """statsmodels' Gamma ``loglike_obs``: shape ``w / scale`` (its ``var_weights``
    convention, ``Var(y) = scale mu^2 / w``)."""
    from scipy.special import gammaln

    shape = weight / scale
    ratio = np.maximum(y / mu, EPS)
    return shape * np.log(shape * ratio) - shape * ratio - gammaln(shape) - np.log(y)


def _tweedie_loglike(y: np.ndarray, mu: np.ndarray, weight: np.ndarray, scale: float, p: float) -> np.ndarray:
    """statsmodels' Tweedie ``loglike_obs`` for ``1 < p < 2`` (Dunn and Smyth 2005): the
    exponential-family terms, plus ``log(wright_bessel(-a, 0, x) / y)`` for ``y > 0``."""
    from scipy import special

    dispersion = scale / weight
    alpha = (2.0 - p) / (1.0 - p)
    found = (y * mu ** (1.0 - p) / (1.0 - p) - mu ** (2.0 - p) / (2.0 - p)) / dispersion
    positive = y > 0
    y_, phi = y[positive], dispersion[positive]
    x = ((p - 1.0) * phi / y_) ** alpha / ((2.0 - p) * phi)
    log_bessel = (special.log_wright_bessel(-alpha, 0.0, x) if hasattr(special, "log_wright_bessel")
                  else np.log(special.wright_bessel(-alpha, 0.0, x)))
    found[positive] += log_bessel - np.log(y_)
    return found
