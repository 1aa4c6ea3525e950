"""The passes of :func:`~dasklbfgs.scoring.inference.inference` over a dataset's shards: a
task per shard computes what its rows contribute (:func:`shard_sums`, :func:`shard_loglike`,
:func:`shard_null`), and the tasks' results merge in a fixed tree on the workers
(:func:`~dasklbfgs.scoring.evaluation.merged_in_a_tree`: the bits do not depend on the worker
count), reading the store or where ``dasklbfgs.cached`` shards are held; with no client, here
(:func:`on_the_shards`). Each row's linear predictor includes its offset, when the data have
them."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dasklbfgs._wire import INLINE_PARAMS_BYTES, aligned
from dasklbfgs.data.rows import Rows, aligned_rows
from dasklbfgs.models.compact_rows import plain_rows
from dasklbfgs.models.gram import weighted_gram
from dasklbfgs.scoring.evaluation import merged_in_a_tree
from dasklbfgs.scoring.glm_family import Family, family_of
from dasklbfgs.scoring.summaries import Moments

if TYPE_CHECKING:
    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.linear import LinearModel

__all__ = ["Sums", "on_the_shards", "shard_loglike", "shard_null", "shard_sums"]

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Sums:
    """What some rows contribute to the inference, at given parameters: sums that add up
    over any split of the rows (:meth:`__add__`; Chan's update for the labels' moments)."""

    rows: int
    information: np.ndarray  # Xa^T diag(w v) Xa, n_params square
    labels: Moments  # total weight, weighted mean and spread of y
    label_terms: float  # sum of w * Family.label_terms(y): the null deviance's
    deviance: float  # sum of w * unit deviance
    pearson_chi2: float  # sum of w (y - mu)^2 / V(mu)
    loglike: float  # sum of w * Family.unit_loglike: Poisson's (power 1) or the NB's log-likelihood at scale 1
    log_weights: float  # sum of log w: the Gaussian log-likelihood's
    null_start: np.ndarray  # with offsets, Family.null_start_sums (zeros without)

    def __add__(self, other: Sums) -> Sums:
        return Sums(self.rows + other.rows, self.information + other.information, self.labels.merge(other.labels),
                    self.label_terms + other.label_terms, self.deviance + other.deviance,
                    self.pearson_chi2 + other.pearson_chi2, self.loglike + other.loglike,
                    self.log_weights + other.log_weights, self.null_start + other.null_start)


def shard_sums(model: LinearModel, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
               offset: np.ndarray | None) -> Sums:
    """The :class:`Sums` of a block of rows at ``params`` (weights ``w``, None: 1 each;
    offsets ``offset``, None: none)."""
    family = family_of(model)
    y, z, mu, weight = _predicted(model, family, params, X, y, w, offset)
    loglike = family.unit_loglike(y, z, mu)
    return Sums(int(y.shape[0]), weighted_gram(X, weight * family.working_weights(mu), model.fit_intercept),
                Moments.of(y, weight), float(weight @ family.label_terms(y)),
                float(weight @ family.unit_deviance(y, z, mu)),
                float(weight @ ((y - mu) ** 2 / family.variance(mu))),
                float(0.0 if loglike is None else weight @ loglike),
                float(np.log(weight).sum()) if family.name == "Gaussian" else 0.0,
                np.zeros(2) if offset is None else family.null_start_sums(y, np.asarray(offset, np.float64), weight))


def shard_loglike(model: LinearModel, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
                  offset: np.ndarray | None, scale: float) -> float:
    """The log-likelihood of a block of rows at dispersion ``scale``: statsmodels' Gamma
    (power 2) or Tweedie (``1 < p < 2``: Dunn and Smyth's series, the Wright Bessel function)
    ``loglike_obs`` with ``var_weights`` ``w``, summed."""
    family = family_of(model)
    y, _, mu, weight = _predicted(model, family, params, X, y, w, offset)
    return float(family.loglike(y, mu, weight, scale).sum())


def shard_null(model: LinearModel, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
               offset: np.ndarray | None, intercept: float) -> np.ndarray:
    """The intercept-only model of a block of rows at ``intercept`` (each row's linear
    predictor ``intercept + offset``; ``X`` and ``params`` unused): the first and second
    derivatives of its half deviance in the intercept, and its deviance, summed with the
    row weights."""
    family = family_of(model)
    y = np.asarray(y, dtype=np.float64)
    weight = _weights(model, y, w)
    z = intercept + (np.zeros(y.shape[0]) if offset is None else np.asarray(offset, dtype=np.float64))
    mu = family.mean(z)
    first, second = family.intercept_derivatives(y, mu)
    return np.array([weight @ first, weight @ second, weight @ family.unit_deviance(y, z, mu)])


def _predicted(model: LinearModel, family: Family, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
               offset: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, linear predictors (offsets included), means and row weights of a block of
    rows, in float64."""
    z = np.asarray(model.decision_function(params, X, offset), dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return y, z, family.mean(z), _weights(model, y, w)


def _weights(model: LinearModel, y: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """Row weights: sample weights times a classifier's class weights; 1 without."""
    weight = model.row_weights(y, None if w is None else np.asarray(w, dtype=np.float64))
    return np.ones(y.shape[0]) if weight is None else np.asarray(weight, dtype=np.float64)


def on_the_shards(work: Callable[..., T], model: LinearModel, params: np.ndarray, data: Dataset, client: Any,
                  cached: list[Any] | None, *args: Any) -> T:
    """``work(model, params, X, y, w, offset, *args)`` of every shard, added up (``+``) in a
    fixed tree: by the workers of ``client`` where ``cached`` shards are held or reading the
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
    """Task: ``work`` of shard ``index``, its rows read from the store in one fetch
    (:meth:`~dasklbfgs.data.ShardedDataset.load_shards`)."""
    return _rows_work(work, model, params, data.load_shards([index])[0], *args)


def _rows_work(work: Callable[..., T], model: LinearModel, params: np.ndarray, shard: Rows, *args: Any) -> T:
    """Task: ``work`` of a shard's rows (compact sparse rows as CSR again), rows and parameters
    that came over the wire aligned (:func:`~dasklbfgs._wire.aligned`)."""
    X, y, w, offset = aligned_rows(shard)
    return work(model, aligned(params), plain_rows(X), y, w, offset, *args)
