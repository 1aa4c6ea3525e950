"""Statistical inference for a fitted generalised linear model, by the workers: standard
errors, z statistics, p-values and confidence intervals of the coefficients, the deviance,
the Pearson chi2, the dispersion, the log-likelihood, AIC and BIC, as statsmodels'
``GLM(y, X, family=..., var_weights=w).fit().summary()`` reports them for the same
parameters.

Each shard's task computes its :class:`Sums` (the Fisher information ``Xa^T diag(w v) Xa``
of its rows, ``d+1`` square with the intercept, and a few numbers); the tasks' sums merge in
a fixed tree on the workers (:func:`~dasklbfgs.scoring.evaluation.merged_in_a_tree`: the
bits do not depend on the worker count) and only the merged sums reach this process, which
inverts the information matrix. The families whose log-likelihood at the estimated
dispersion is not a function of sums (Gamma, Tweedie with ``1 < p <= 2``) take a second
pass over the shards once the dispersion is known, a number per shard. Without a Dask
client the same tasks run in this process, one after another (docs/algorithms.md §11).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from dasklbfgs._format import human_bytes
from dasklbfgs._typing import is_sparse
from dasklbfgs._wire import INLINE_PARAMS_BYTES, aligned
from dasklbfgs.data._client import active_client
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.glm import Tweedie, label_terms, null_deviance, unit_deviance
from dasklbfgs.models.linear import LeastSquares, LinearModel, Logistic, Softmax
from dasklbfgs.scoring.evaluation import merged_in_a_tree
from dasklbfgs.scoring.summaries import Moments

if TYPE_CHECKING:
    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model

__all__ = ["INFORMATION_LIMIT_BYTES", "Family", "Inference", "Sums", "family_of", "inference"]

T = TypeVar("T")

#: the largest information matrix (``n_params^2`` float64) :func:`inference` forms: each task
#: holds one, and this process one and its factor
INFORMATION_LIMIT_BYTES = 2 * 2**30

#: rows of a dense shard multiplied at once for its information matrix (float64 copies of them)
BLOCK_BYTES = 32 * 2**20

_EPS = np.finfo(np.float64).eps

#: a Tweedie-family model's ``link_name``: statsmodels' name of its link
_LINKS = {"log": "Log", "inverse": "InversePower"}


@dataclass(frozen=True)
class Family:
    """A linear model's GLM family under statsmodels' names, and what inference needs of it
    row by row: the mean of a linear predictor, the variance function ``V(mu) = mu^power``
    (``mu (1 - mu)`` for the binomial), the GLM working weight of the link and the unit
    deviance."""

    name: str  # Gaussian, Binomial, Poisson, Gamma or Tweedie
    link: str  # Identity, Logit, Log or InversePower
    power: float  # the variance power (0 Gaussian, 1 Poisson, 2 Gamma; 0 and unused for the binomial)
    estimated_scale: bool  # the dispersion is Pearson chi2 / df_resid (else 1)

    @property
    def binomial(self) -> bool:
        return self.name == "Binomial"

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
            p = np.clip(mu, _EPS, 1.0 - _EPS)
            return p * (1.0 - p)
        return np.ones_like(mu) if self.power == 0 else mu**self.power

    def working_weights(self, mu: np.ndarray) -> np.ndarray:
        """``1 / (g'(mu)^2 V(mu))``: 1 for the identity link, ``V(mu)`` for the logit,
        ``mu^(2 - p)`` for the log link, ``mu^(4 - p)`` for the inverse (``g' = -1 / mu^2``)."""
        if self.link == "Log":
            return mu ** (2.0 - self.power)
        if self.link == "InversePower":
            return mu ** (4.0 - self.power)
        return self.variance(mu) if self.binomial else np.ones_like(mu)

    def unit_deviance(self, y: np.ndarray, z: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """Per row, the deviance: twice the log-loss for the binomial (from ``z``: no
        overflow), the Tweedie unit deviance at ``power`` otherwise."""
        if self.binomial:
            return 2.0 * (np.logaddexp(0.0, z) - y * z)
        return unit_deviance(y, mu, self.power)


def family_of(model: Model) -> Family:
    """The GLM family of ``model`` (least squares: Gaussian with the identity link; logistic:
    binomial with the logit; Poisson, Gamma, Tweedie with the log link, a Gamma with the
    inverse link too), or a :class:`ConfigurationError` for a model that is none of these."""
    if isinstance(model, Softmax):
        raise ConfigurationError(f"inference does not cover multiclass models: {model!r} is a softmax (multinomial) "
                                 "regression, which statsmodels' GLM has no family for; fit a Logistic model per "
                                 "class (one-vs-rest) to get standard errors")
    if isinstance(model, LeastSquares):
        return Family("Gaussian", "Identity", 0.0, True)
    if isinstance(model, Logistic):
        return Family("Binomial", "Logit", 0.0, False)
    if isinstance(model, Tweedie):
        name = {"poisson": "Poisson", "gamma": "Gamma"}.get(model.name, "Tweedie")
        link = getattr(model, "link_name", "log")  # a Gamma's may be its canonical inverse
        if link not in _LINKS:
            raise ConfigurationError(f"inference knows the log and inverse links, and {model!r} has link {link!r}")
        return Family(name, _LINKS[link], model.power, name != "Poisson")
    raise ConfigurationError(f"inference computes the standard errors of a generalised linear model's coefficients, "
                             f"and {model!r} is not one: it takes LeastSquares, Logistic, Poisson, Gamma or Tweedie")


@dataclass(frozen=True, eq=False)
class Sums:
    """What some rows contribute to the inference, at given parameters: sums that add up
    over any split of the rows (:meth:`__add__`; Chan's update for the labels' moments)."""

    rows: int
    information: np.ndarray  # Xa^T diag(w v) Xa, n_params square
    labels: Moments  # total weight, weighted mean and spread of y
    label_terms: float  # sum of w * glm.label_terms(y): the null deviance's
    deviance: float  # sum of w * unit deviance
    pearson_chi2: float  # sum of w (y - mu)^2 / V(mu)
    poisson_loglike: float  # sum of w (y log mu - mu - log y!): a power-1 family's log-likelihood at scale 1
    log_weights: float  # sum of log w: the Gaussian log-likelihood's

    def __add__(self, other: Sums) -> Sums:
        return Sums(self.rows + other.rows, self.information + other.information, self.labels.merge(other.labels),
                    self.label_terms + other.label_terms, self.deviance + other.deviance,
                    self.pearson_chi2 + other.pearson_chi2, self.poisson_loglike + other.poisson_loglike,
                    self.log_weights + other.log_weights)


@dataclass(frozen=True, eq=False)
class Inference:
    """Inference for a GLM's parameters, statsmodels' ``GLMResults`` figures.

    ``coef``, ``names``, ``std_err``, ``z``, ``p_values`` and ``conf_int`` (n x 2) follow the
    parameters' layout: coefficients, then the intercept. ``std_err`` is
    ``sqrt(diag(scale * J^-1))`` with ``J`` the Fisher information summed over the rows;
    ``z`` is ``coef / std_err`` (a t statistic when the scale is estimated), and the p-values
    and intervals use the normal distribution even then, as statsmodels' GLM does by default
    (``use_t=False``). ``scale`` is Pearson's chi2 over ``df_resid`` (statsmodels'
    ``scale="X2"``) for the Gaussian, Gamma and Tweedie families, 1 for the binomial and
    Poisson. ``loglike`` is the family's log-likelihood at that scale (the Gaussian's with
    the scale profiled out: ``SSR / n``; NaN for a Tweedie power outside ``[1, 2]``, where
    statsmodels defines none); ``aic = -2 loglike + 2 (df_model + 1)`` and ``bic`` is
    statsmodels 0.15's ``bic`` (= ``bic_llf``): ``-2 loglike + (df_model + 1) log(n)``, not
    the deviance-based ``bic_deviance`` older releases returned. ``df_model`` is the rank of
    ``J`` less 1 and ``df_resid`` the rows less the rank (statsmodels': with the intercept
    counted among the ``df_model + 1`` parameters whether or not it is fitted). A
    coefficient whose feature has no value in any row of positive weight has a NaN standard
    error (statsmodels reports 0, to rounding).
    """

    coef: np.ndarray
    names: tuple[str, ...]
    std_err: np.ndarray
    z: np.ndarray
    p_values: np.ndarray
    conf_int: np.ndarray
    deviance: float
    null_deviance: float
    pearson_chi2: float
    scale: float
    df_model: int
    df_resid: int
    loglike: float
    aic: float
    bic: float
    n_samples: int
    penalized: bool
    family: str
    link: str
    alpha: float
    model: str  # the model's repr

    def summary(self) -> str:
        """A printable table laid out as statsmodels' GLM summary: the fit's figures, then a
        row per parameter (coef, std err, z, P>|z| and the 1 - alpha interval); a penalised
        fit ends with what its standard errors are."""
        return "\n".join(_summary_lines(self))

    def __str__(self) -> str:
        return self.summary()


def inference(model: Model, params: Any, data: Dataset, *, client: Any = None, alpha: float = 0.05) -> Inference:
    """Standard errors, z statistics, p-values, 1 - ``alpha`` confidence intervals and the
    fit's deviance, dispersion and log-likelihood of ``model`` at ``params`` on ``data``
    (:class:`Inference`: statsmodels' ``GLM(y, X, family, var_weights=w)`` figures at the
    same parameters, the data's sample weights being statsmodels' ``var_weights``, times a
    logistic model's ``class_weight``).

    ``model``: a fitted :class:`~dasklbfgs.models.LeastSquares` (Gaussian, identity link),
    :class:`~dasklbfgs.models.Logistic` (binomial, logit), or
    :class:`~dasklbfgs.models.Poisson`, :class:`~dasklbfgs.models.Gamma`,
    :class:`~dasklbfgs.models.Tweedie` (log link; a Gamma's inverse link too); a penalised one (``l2`` or ``l1``) is
    reported with ``penalized=True`` and a caveat in the summary: its standard errors are
    those of the unpenalised likelihood at the penalised estimate. ``data``: a
    :class:`~dasklbfgs.data.ShardedDataset` (or its path or URL), or a ``dasklbfgs.cached``
    one (its shards summed where they are held). A dataset is summed by the workers of
    ``client`` (or of the active client), a task per shard; with none, here.

    Raises :class:`ConfigurationError` for another model, a softmax, or one whose
    information matrix would exceed :data:`INFORMATION_LIMIT_BYTES` (hashed wide data).
    """
    import os

    from dasklbfgs.data.sharded import as_dataset

    family = family_of(model)
    linear = cast(LinearModel, model)
    _check_width(linear)
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
    futures of the dataset's shards in the workers' memory, ``(X, y, w)`` each in shard order."""
    model.check_data(data)
    params = model.check_params(params, "params")
    if getattr(data, "has_offsets", False):
        raise ConfigurationError(f"the dataset at {data.url!r} has offsets, which inference does not take into the "
                                 "linear predictor yet (nor into its null deviance); use a dataset without them")
    sums = _on_the_shards(shard_sums, model, params, data, client, cached)
    variances, rank = inverse_diagonal(sums.information)
    df_resid = sums.rows - rank
    scale = _scale(family, sums.pearson_chi2, df_resid)
    loglike = _loglike_of_sums(family, sums, scale)
    if loglike is None:
        loglike = _on_the_shards(shard_loglike, model, params, data, client, cached, scale)
    return _finished(model, params, data, family, alpha, sums, variances, rank, scale, float(loglike))


def shard_sums(model: LinearModel, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None) -> Sums:
    """The :class:`Sums` of a block of rows at ``params`` (weights ``w``, None: 1 each)."""
    from scipy.special import gammaln, xlogy

    family = family_of(model)
    y, z, mu, weight = _predicted(model, family, params, X, y, w)
    poisson = weight @ (xlogy(y, mu) - mu - gammaln(y + 1.0)) if family.power == 1 else 0.0
    return Sums(int(y.shape[0]), information(X, weight * family.working_weights(mu), model.fit_intercept),
                Moments.of(y, weight), float(weight @ label_terms(y, family.power)),
                float(weight @ family.unit_deviance(y, z, mu)),
                float(weight @ ((y - mu) ** 2 / family.variance(mu))), float(poisson),
                float(np.log(weight).sum()) if family.name == "Gaussian" else 0.0)


def shard_loglike(model: LinearModel, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
                  scale: float) -> float:
    """The log-likelihood of a block of rows at dispersion ``scale``: statsmodels' Gamma
    (power 2) or Tweedie (``1 < p < 2``: Dunn and Smyth's series, the Wright Bessel function)
    ``loglike_obs`` with ``var_weights`` ``w``, summed."""
    family = family_of(model)
    y, _, mu, weight = _predicted(model, family, params, X, y, w)
    if family.power == 2:
        return float(_gamma_loglike(y, mu, weight, scale).sum())
    return float(_tweedie_loglike(y, mu, weight, scale, family.power).sum())


def information(X: Any, weights: np.ndarray, intercept: bool) -> np.ndarray:
    """``Xa^T diag(weights) Xa``, ``Xa`` being ``X`` with a column of ones appended when
    ``intercept`` (last, as in the parameters), in float64: a sparse ``X`` by sparse products
    (the ``d x d`` result densified), a dense one a block of rows at a time."""
    d = X.shape[1]
    if is_sparse(X):
        X = X.tocsr()
        gram = np.asarray((X.T @ X.multiply(weights[:, None]).tocsr()).toarray(), dtype=np.float64)
        column = np.asarray(X.T @ weights, dtype=np.float64)
    else:
        gram, column = np.zeros((d, d)), np.zeros(d)
        step = max(1, BLOCK_BYTES // (8 * max(d, 1)))
        for start in range(0, X.shape[0], step):
            block = np.asarray(X[start : start + step], dtype=np.float64)
            scaled = block * weights[start : start + step, None]
            gram += block.T @ scaled
            column += scaled.sum(axis=0)
    if not intercept:
        return gram
    full = np.empty((d + 1, d + 1))
    full[:d, :d], full[:d, d], full[d, :d], full[d, d] = gram, column, column, weights.sum()
    return full


def inverse_diagonal(information: np.ndarray) -> tuple[np.ndarray, int]:
    """The diagonal of the inverse of the information matrix, and its rank.

    The matrix is scaled to a unit diagonal first (its conditioning is then the features'
    correlation's, not their units'). A well-conditioned one is inverted through its
    Cholesky factor ``U`` (``diag(J^-1)`` is the row sums of squares of ``U^-1``); a singular
    or nearly singular one (collinear features) through its eigenvalues, the pseudo-inverse
    over those above ``n eps`` of the largest, its rank their count. A parameter whose
    diagonal entry is 0 (a feature with no value in any row of positive weight) gets NaN and
    does not count in the rank."""
    from scipy.linalg import lapack

    diagonal = np.diag(information).copy()
    kept = np.flatnonzero(diagonal > 0)
    found = np.full(diagonal.shape, np.nan)
    if kept.size == 0:
        return found, 0
    unit = 1.0 / np.sqrt(diagonal[kept])
    scaled = information[np.ix_(kept, kept)]
    scaled *= unit[:, None]
    scaled *= unit[None, :]
    factor, info = lapack.dpotrf(scaled, lower=0, clean=1, overwrite_a=0)
    pivots = np.diag(factor)
    if info == 0 and pivots.min() ** 2 > kept.size * _EPS * pivots.max() ** 2:
        inverse, info = lapack.dtrtri(factor, lower=0, overwrite_c=1)
        if info == 0:
            found[kept] = np.einsum("ij,ij->i", inverse, inverse) * unit**2
            return found, int(kept.size)
    values, vectors = np.linalg.eigh(scaled)
    above = values > values.max() * kept.size * _EPS
    found[kept] = (vectors[:, above] ** 2 / values[above]).sum(axis=1) * unit**2
    return found, int(above.sum())


def _predicted(model: LinearModel, family: Family, params: np.ndarray, X: Any, y: np.ndarray,
               w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, linear predictors, means and row weights (sample weights times a classifier's
    class weights; 1 without) of a block of rows, in float64."""
    z = np.asarray(model.decision_function(params, X), dtype=np.float64)
    weight = model.row_weights(y, None if w is None else np.asarray(w, dtype=np.float64))
    weight = np.ones(z.shape[0]) if weight is None else np.asarray(weight, dtype=np.float64)
    return np.asarray(y, dtype=np.float64), z, family.mean(z), weight


def _gamma_loglike(y: np.ndarray, mu: np.ndarray, weight: np.ndarray, scale: float) -> np.ndarray:
    """statsmodels' Gamma ``loglike_obs``: shape ``w / scale`` (its ``var_weights``
    convention, ``Var(y) = scale mu^2 / w``)."""
    from scipy.special import gammaln

    shape = weight / scale
    ratio = np.maximum(y / mu, _EPS)
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


def _scale(family: Family, pearson_chi2: float, df_resid: int) -> float:
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
    if family.power == 1:
        return sums.poisson_loglike / scale
    if family.power < 1 or family.power > 2 or not np.isfinite(scale):
        return float("nan")
    return None


def _on_the_shards(work: Callable[..., T], model: LinearModel, params: np.ndarray, data: Dataset, client: Any,
                   cached: list[Any] | None, *args: Any) -> T:
    """``work(model, params, X, y, w, *args)`` of every shard, added up (``+``) in a fixed
    tree: by the workers of ``client`` where ``cached`` shards are held or reading the
    dataset's store, the parameters sent once; with no client, here."""
    if client is not None and cached is not None:
        params_future = (client.scatter(params, hash=False) if params.nbytes > INLINE_PARAMS_BYTES else params)
        where = client.who_has(cached)
        parts = [client.submit(_rows_work, work, model, params_future, shard, *args, pure=False,
                               workers=list(where.get(shard.key, ())) or None, allow_other_workers=True)
                 for shard in cached]
        total = merged_in_a_tree(parts, lambda a, b: client.submit(operator.add, a, b, pure=False))
        return total.result()
    if client is not None and hasattr(data, "location"):  # a store the workers read
        import dask

        params_ = dask.delayed(params, traverse=False)  # sent once, not inlined in every task
        shard = dask.delayed(_shard_work, pure=True)
        added = dask.delayed(operator.add, pure=True)
        delayed_parts = [shard(work, model, params_, data, index, *args) for index in range(data.n_shards)]
        return client.compute(merged_in_a_tree(delayed_parts, added)).result()
    return merged_in_a_tree([_shard_work(work, model, params, data, index, *args) for index in range(data.n_shards)],
                            operator.add)


def _shard_work(work: Callable[..., T], model: LinearModel, params: np.ndarray, data: Dataset, index: int,
                *args: Any) -> T:
    """Task: ``work`` of shard ``index``, read from the store (parameters that came over the
    wire aligned: :func:`~dasklbfgs._wire.aligned`)."""
    X, y = data.load_shard(index)
    return work(model, aligned(params), X, y, data.load_shard_weights(index), *args)


def _rows_work(work: Callable[..., T], model: LinearModel, params: np.ndarray, shard: Sequence[Any],
               *args: Any) -> T:
    """Task: ``work`` of a shard held in memory: its rows, labels and weights first (compact
    sparse rows as CSR again; no offsets: :func:`inferred` refuses data with them)."""
    X, y, w = shard[:3]
    return work(model, aligned(params), aligned(X.to_csr() if hasattr(X, "to_csr") else X), aligned(y),
                None if w is None else aligned(w), *args)


def _finished(model: LinearModel, params: np.ndarray, data: Dataset, family: Family, alpha: float, sums: Sums,
              variances: np.ndarray, rank: int, scale: float, loglike: float) -> Inference:
    """The :class:`Inference` of the merged sums, the inverse information's diagonal and rank,
    the dispersion and the log-likelihood."""
    from scipy.stats import norm

    with np.errstate(divide="ignore", invalid="ignore"):
        std_err = np.sqrt(scale * variances)
        z = params / std_err
    half = norm.ppf(1.0 - alpha / 2.0) * std_err
    n = sums.rows
    return Inference(
        coef=params.copy(), names=_names(model, data), std_err=std_err, z=z, p_values=2.0 * norm.sf(np.abs(z)),
        conf_int=np.column_stack([params - half, params + half]), deviance=sums.deviance,
        null_deviance=_null_deviance(family, sums), pearson_chi2=sums.pearson_chi2, scale=scale,
        df_model=rank - 1, df_resid=n - rank, loglike=loglike, aic=-2.0 * loglike + 2.0 * rank,
        bic=float(-2.0 * loglike + rank * np.log(n)), n_samples=n, penalized=model.l2 > 0 or model.l1 > 0,
        family=family.name, link=family.link, alpha=alpha, model=repr(model))


def _null_deviance(family: Family, sums: Sums) -> float:
    """The deviance of the weighted mean of the labels (statsmodels' ``null_deviance``):
    the binomial's from the weight of the 1s and 0s, the Tweedie family's from its sums
    (:func:`~dasklbfgs.models.glm.null_deviance`)."""
    from scipy.special import xlogy

    labels = sums.labels
    if family.binomial:
        ones, zeros = labels.weight * labels.mean, labels.weight * (1.0 - labels.mean)
        return float(-2.0 * (xlogy(ones, labels.mean) + xlogy(zeros, 1.0 - labels.mean)))
    return float(null_deviance(family.power, labels.weight, labels.mean, labels.m2, sums.label_terms))


def _names(model: LinearModel, data: Dataset) -> tuple[str, ...]:
    """The data's feature names (``x0``, ``x1``, ... without), then ``intercept``."""
    d = model.n_features
    given = getattr(data, "feature_names", None)
    names = [str(name) for name in given] if given is not None and len(given) == d else [f"x{i}" for i in range(d)]
    return (*names, *(("intercept",) if model.fit_intercept else ()))


def _check_width(model: LinearModel) -> None:
    n = model.n_params
    size = n * n * 8
    if size > INFORMATION_LIMIT_BYTES:
        raise ConfigurationError(
            f"inference forms the {n} x {n} information matrix of {model!r} (d = {model.n_features} features"
            f"{' and the intercept' if model.fit_intercept else ''}), {size} bytes ({human_bytes(size)}), more than "
            f"the {human_bytes(INFORMATION_LIMIT_BYTES)} it allows: too wide (hashed or one-hot features?); select or "
            "aggregate the features, then refit")


def _checked_alpha(alpha: Any) -> float:
    if not (isinstance(alpha, (int, float, np.floating)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ConfigurationError(f"alpha must be a number in (0, 1) (0.05: 95% intervals), got {alpha!r}")
    return float(alpha)


# -- the summary -----------------------------------------------------------------------------

_WIDTH = 78
_CELLS = (11, 11, 11, 11, 12, 12)  # statsmodels' column widths: coef, std err, z, P>|z| and the interval


def _summary_lines(found: Inference) -> list[str]:
    left = [("Model:", found.model.split("(")[0]), ("Model Family:", found.family), ("Link Function:", found.link),
            ("Covariance Type:", "nonrobust"), ("Penalised:", "yes" if found.penalized else "no"),
            ("AIC:", _figure(found.aic)), ("BIC:", _figure(found.bic)), ("", "")]
    right = [("No. Observations:", str(found.n_samples)), ("Df Residuals:", str(found.df_resid)),
             ("Df Model:", str(found.df_model)), ("Scale:", _figure(found.scale)),
             ("Log-Likelihood:", _figure(found.loglike)), ("Deviance:", _figure(found.deviance)),
             ("Null Deviance:", _figure(found.null_deviance)), ("Pearson chi2:", _figure(found.pearson_chi2, 3))]
    header = [f"{a}{b:>{36 - len(a)}}   {c}{d:>{39 - len(c)}}" for (a, b), (c, d) in zip(left, right)]
    table = _coefficient_lines(found)
    width = max(_WIDTH, len(table[0]))
    lines = ["Generalized Linear Model Regression Results".center(width).rstrip(), "=" * width, *header, "=" * width,
             table[0], "-" * width, *table[1:], "=" * width]
    if found.penalized:
        lines.append(f"Penalised fit ({found.model}): the standard errors are those of the unpenalised likelihood at "
                     "the penalised estimate; they do not account for the penalty's shrinkage.")
    return lines


def _coefficient_lines(found: Inference) -> list[str]:
    width = max(10, max((len(name) for name in found.names), default=0) + 1)
    low, high = found.alpha / 2.0, 1.0 - found.alpha / 2.0
    heads = ("coef", "std err", "z", "P>|z|", f"[{low:.3g}", f"{high:.3g}]")
    lines = [" " * width + "".join(f"{head:>{cell}}" for head, cell in zip(heads, _CELLS))]
    for i, name in enumerate(found.names):
        cells = (_cell(found.coef[i], 4), _cell(found.std_err[i], 3), _cell(found.z[i], 3),
                 f"{found.p_values[i]:.3f}", _cell(found.conf_int[i, 0], 3), _cell(found.conf_int[i, 1], 3))
        lines.append(f"{name:<{width}}" + "".join(f"{text:>{cell}}" for text, cell in zip(cells, _CELLS)))
    return lines


def _cell(value: float, decimals: int) -> str:
    """statsmodels' table format: fixed decimals, or 3 significant digits far from 1."""
    if value != 0 and np.isfinite(value) and not 1e-4 <= abs(value) < 1e4:
        return f"{value:.3g}"
    return f"{value:.{decimals}f}"


def _figure(value: float, digits: int = 5) -> str:
    return f"{value:#.{digits}g}"
