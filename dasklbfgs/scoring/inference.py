"""Statistical inference for a fitted generalised linear model, by the workers: standard
errors, z statistics, p-values and confidence intervals of the coefficients, the deviance,
the null deviance, the Pearson chi2, the dispersion, the log-likelihood, AIC and BIC, as
statsmodels' ``GLM(y, X, family=..., offset=o, var_weights=w).fit().summary()`` reports them
for the same parameters (``freq_weights=w`` for the negative binomial).

Each shard's task computes its :class:`~dasklbfgs.scoring.inference_passes.Sums` (the Fisher
information ``Xa^T diag(w v) Xa`` of its rows, ``d+1`` square with the intercept, and a few
numbers); the tasks' sums merge in a fixed tree on the workers and only the merged sums reach
this process, which inverts the information matrix
(:mod:`~dasklbfgs.scoring.information_matrix`). The families whose log-likelihood at the
estimated dispersion is not a function of sums (Gamma, Tweedie with ``1 < p <= 2``) take a
second pass over the shards once the dispersion is known, a number per shard; data with
offsets take a pass per Newton step on the intercept-only model, for the null deviance.
Without a Dask client the same tasks run in this process, one after another
(docs/algorithms.md §11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dasklbfgs.data._client import active_client
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.scoring.glm_family import Family, family_of
from dasklbfgs.scoring.inference_passes import Sums, on_the_shards, shard_loglike, shard_null, shard_sums
from dasklbfgs.scoring.inference_summary import Inference
from dasklbfgs.scoring.information_matrix import INFORMATION_LIMIT_BYTES, check_width, inverse_diagonal

if TYPE_CHECKING:
    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model

__all__ = ["INFORMATION_LIMIT_BYTES", "Family", "Inference", "Sums", "family_of", "inference", "inferred"]

#: Newton's method on the intercept-only model with offsets stops at a step below this,
#: relative to the intercept (or 1), or after :data:`NULL_PASSES` passes
NULL_TOLERANCE = 1e-12
NULL_PASSES = 60


def inference(model: Model, params: Any, data: Dataset, *, client: Any = None, alpha: float = 0.05) -> Inference:
    """Standard errors, z statistics, p-values, 1 - ``alpha`` confidence intervals and the
    fit's deviance, dispersion and log-likelihood of ``model`` at ``params`` on ``data``
    (:class:`Inference`: statsmodels' ``GLM(y, X, family, offset=o, var_weights=w)`` figures
    at the same parameters, the data's sample weights being statsmodels' ``var_weights``,
    times a logistic model's ``class_weight``; a negative binomial's are its
    ``freq_weights``, as in its fit).

    ``model``: a fitted :class:`~dasklbfgs.models.LeastSquares` (Gaussian, identity link),
    :class:`~dasklbfgs.models.Logistic` (binomial, logit), or
    :class:`~dasklbfgs.models.Poisson`, :class:`~dasklbfgs.models.Gamma`,
    :class:`~dasklbfgs.models.Tweedie`, :class:`~dasklbfgs.models.NegativeBinomial` (log
    link; a Gamma's inverse link too); a penalised one (``l2`` or ``l1``) is reported with
    ``penalized=True`` and a caveat in the summary: its standard errors are those of the
    unpenalised likelihood at the penalised estimate. ``data``: a
    :class:`~dasklbfgs.data.ShardedDataset` (or its path or URL), or a ``dasklbfgs.cached``
    one (its shards summed where they are held), with or without offsets. A dataset is
    summed by the workers of ``client`` (or of the active client), a task per shard; with
    none, here.

    Raises :class:`ConfigurationError` for another model, a softmax, a Gamma with the
    inverse link on data with offsets, or a model whose information matrix would exceed
    :data:`INFORMATION_LIMIT_BYTES` (hashed wide data).
    """
    import os

    from dasklbfgs.data.sharded import as_dataset

    family = family_of(model)
    linear = cast(LinearModel, model)
    check_width(linear)
    alpha = _checked_alpha(alpha)
    if hasattr(data, "shards_for"):  # dasklbfgs.cached(...): summed where its shards are
        given: Any = data
        client = given.client if client is None else client
        return inferred(linear, params, given.dataset, family, alpha, client, given.shards_for(client))
    if isinstance(data, (str, os.PathLike)):
        data = as_dataset(data)
    return inferred(linear, params, data, family, alpha, active_client() if client is None else client)


def inferred(model: LinearModel, params: Any, data: Dataset, family: Family, alpha: float, client: Any,
             cached: list[Any] | None = None) -> Inference:
    """:func:`inference`, by the workers of ``client``, or here if it is None; ``cached``:
    futures of the dataset's shards in the workers' memory (``Rows``), in shard order."""
    model.check_data(data)
    params = model.check_params(params, "params")
    offsets = bool(getattr(data, "has_offsets", False))
    if offsets and family.link == "InversePower":
        raise ConfigurationError(f"inference does not take offsets with the inverse link of {model!r}: the null "
                                 "deviance is that of the intercept-only model fitted with the offsets, whose "
                                 "intercept must keep every row's x . w + b + offset > 0; use the log link, or a "
                                 f"dataset without offsets (the one at {data.url!r} has them)")
    sums = on_the_shards(shard_sums, model, params, data, client, cached)
    variances, rank = inverse_diagonal(sums.information)
    observations = _observations(family, sums, bool(getattr(data, "is_weighted", False)))
    scale = _scale(family, sums.pearson_chi2, observations - rank)
    loglike = _loglike_of_sums(family, sums, scale)
    if loglike is None:
        loglike = on_the_shards(shard_loglike, model, params, data, client, cached, scale)
    null = (_null_deviance_with_offsets(model, params, data, family, sums, client, cached) if offsets
            else family.null_deviance(sums.labels, sums.label_terms))
    return _finished(model, params, data, family, alpha, sums, variances, rank, observations, scale, float(loglike),
                     null)


def _null_deviance_with_offsets(model: LinearModel, params: np.ndarray, data: Dataset, family: Family, sums: Sums,
                                client: Any, cached: list[Any] | None) -> float:
    """statsmodels' null deviance with offsets: the deviance of the intercept-only model
    fitted with them. Newton's method on its intercept ``b`` from
    :meth:`Family.null_start <dasklbfgs.scoring.glm_family.Family.null_start>` (the optimum
    itself for the Gaussian and the log-link Tweedie family: one pass), a pass over the shards
    per step (:func:`~dasklbfgs.scoring.inference_passes.shard_null`: the derivatives and the
    deviance at ``b``), until a step is below :data:`NULL_TOLERANCE`; a step out of the
    bracket the signs of the derivatives so far give is a bisection of it. Labels all at the
    family's bound (the optimum at infinity) have null deviance 0."""
    intercept = family.null_start(sums.null_start, sums.labels)
    if not np.isfinite(intercept):
        return 0.0 if np.isinf(intercept) else float("nan")
    low, high = -np.inf, np.inf
    for _ in range(NULL_PASSES):
        first, second, deviance = on_the_shards(shard_null, model, params, data, client, cached, intercept)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = first / second
        if not abs(step) > NULL_TOLERANCE * max(1.0, abs(intercept)):
            break
        low, high = (intercept, high) if first < 0 else (low, intercept)
        intercept -= step
        if not low < intercept < high:
            intercept = 0.5 * (low + high)
    return float(deviance)


def _observations(family: Family, sums: Sums, weighted: bool) -> float:
    """statsmodels' ``wnobs``: the rows, or the sum of a negative binomial's weights (its
    ``freq_weights``); an int when whole."""
    if not (family.negative_binomial and weighted):
        return sums.rows
    total = sums.labels.weight
    return int(total) if total.is_integer() else total


def _scale(family: Family, pearson_chi2: float, df_resid: float) -> float:
    """The dispersion: Pearson's chi2 over the residual degrees of freedom (NaN with none
    left) for a family whose dispersion is estimated, else 1."""
    if not family.estimated_scale:
        return 1.0
    return pearson_chi2 / df_resid if df_resid > 0 else float("nan")


def _loglike_of_sums(family: Family, sums: Sums, scale: float) -> float | None:
    """statsmodels' ``llf`` when the merged sums give it, else None (the rows are needed at
    ``scale``: Gamma, Tweedie with ``1 < p <= 2``). The Gaussian's is the concentrated
    log-likelihood (the scale ``SSR / n`` profiled out); NaN for a Tweedie power outside
    ``[1, 2]``, for which statsmodels has none."""
    if family.name == "Gaussian":
        n = sums.rows
        return -0.5 * (n + n * np.log(sums.deviance / n) - sums.log_weights + n * np.log(2.0 * np.pi))
    if family.binomial:
        return -0.5 * sums.deviance
    if family.power == 1 or family.negative_binomial:
        return sums.loglike / scale
    if family.power < 1 or family.power > 2 or not np.isfinite(scale):
        return float("nan")
    return None


def _finished(model: LinearModel, params: np.ndarray, data: Dataset, family: Family, alpha: float, sums: Sums,
              variances: np.ndarray, rank: int, observations: float, scale: float, loglike: float,
              null_deviance: float) -> Inference:
    """The :class:`Inference` of the merged sums, the inverse information's diagonal and rank,
    the observations (:func:`_observations`), the dispersion, the log-likelihood and the null
    deviance."""
    from scipy.stats import norm

    with np.errstate(divide="ignore", invalid="ignore"):
        std_err = np.sqrt(scale * variances)
        z = params / std_err
    half = norm.ppf(1.0 - alpha / 2.0) * std_err
    return Inference(
        coef=params.copy(), names=_names(model, data), std_err=std_err, z=z, p_values=2.0 * norm.sf(np.abs(z)),
        conf_int=np.column_stack([params - half, params + half]), deviance=sums.deviance,
        null_deviance=null_deviance, pearson_chi2=sums.pearson_chi2, scale=scale, df_model=rank - 1,
        df_resid=observations - rank, loglike=loglike, aic=-2.0 * loglike + 2.0 * rank,
        bic=float(-2.0 * loglike + rank * np.log(observations)), n_samples=sums.rows,
        penalized=model.l2 > 0 or model.l1 > 0, family=family.name, link=family.link, alpha=alpha, model=repr(model))


def _names(model: LinearModel, data: Dataset) -> tuple[str, ...]:
    """The data's feature names (``x0``, ``x1``, ... without), then ``intercept``."""
    d = model.n_features
    given = getattr(data, "feature_names", None)
    names = [str(name) for name in given] if given is not None and len(given) == d else [f"x{i}" for i in range(d)]
    return (*names, *(("intercept",) if model.fit_intercept else ()))


def _checked_alpha(alpha: Any) -> float:
    if not (isinstance(alpha, (int, float, np.floating)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ConfigurationError(f"alpha must be a number in (0, 1) (0.05: 95% intervals), got {alpha!r}")
    return float(alpha)
