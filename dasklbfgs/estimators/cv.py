"""The cross-validated elastic nets: scikit-learn's ``ElasticNetCV`` and ``LassoCV``, every
fold's path on one set of cached shards."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.estimators.base import (
    REPLICAS,
    store_parameters,
)
from dasklbfgs.estimators.linear import LeastSquaresEstimator
from dasklbfgs.models import LeastSquares
from dasklbfgs.selection.cv import fold_paths, folds_on, held_out_table
from dasklbfgs.selection.options import PathOptions
from dasklbfgs.selection.path import PathPlan
from dasklbfgs.solvers import minimize


def _given_alphas(alphas: Any) -> np.ndarray:
    """A CV estimator's ``alphas`` list, strongest first."""
    try:
        found = np.sort(np.asarray(alphas, dtype=np.float64))[::-1]
    except (TypeError, ValueError):
        found = np.array([np.nan])
    if found.ndim != 1 or found.size == 0 or not np.all(np.isfinite(found)) or np.any(found < 0):
        raise ConfigurationError(f"alphas must be a number of alphas (an integer >= 1) or a non-empty list of "
                                 f"numbers >= 0, got {alphas!r}")
    return found


class ElasticNetCV(LeastSquaresEstimator):
    """:class:`ElasticNet` with ``alpha`` chosen by cross-validation, as scikit-learn's
    ``ElasticNetCV`` (1.9's parameters): a path of ``alphas`` penalties (an integer) from the
    one that zeroes every coefficient down to ``eps`` times it, or the ``alphas`` given,
    fitted on each of ``cv`` folds (``KFold(cv)``, default 5, on the rows in order) warm
    started along the path, all on the shards cached once
    (:func:`dasklbfgs.cross_validated_path`); the alpha of the least mean squared error over
    the folds is refitted on every row. Fitted: ``alpha_``, ``alphas_``, ``mse_path_``
    (``n_alphas x cv``), ``l1_ratio_`` (not ``LassoCV``), ``coef_``, ``intercept_``, ``n_iter_``
    (the refit's iterations). One
    ``l1_ratio`` in (0, 1]; Sandblaster L-BFGS (OWL-QN) fits every path, ``solver_options``
    are its options.
    """

    def __init__(self, *, l1_ratio: float = 0.5, eps: float = 1e-3, alphas: Any = 100,
                 fit_intercept: bool = True, max_iter: int = 200, tol: float = 1e-6, cv: int | None = None,
                 standardize: bool = True, solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, client: Any = None) -> None:
        store_parameters(self, locals())

    # what ShardedEstimator reads of the estimators that choose a solver: a path is Sandblaster's
    solver, warm_start, random_state = "sandblaster", False, None
    batch_size, n_replicas = REPLICAS.default("batch_size"), REPLICAS.default("n_replicas")

    def _l1_shares(self) -> tuple[float, ...]:
        """The ``l1_ratio`` values to cross-validate, in the order given (each in (0, 1])."""
        given = self.l1_ratio if isinstance(self.l1_ratio, (list, tuple, np.ndarray)) else [self.l1_ratio]
        if len(given) == 0 or not all(isinstance(s, (int, float, np.integer, np.floating)) and not isinstance(s, bool)
                                      and 0 < s <= 1 for s in given):
            raise ConfigurationError(f"l1_ratio must be a number in (0, 1] (1: the lasso) or a non-empty list of "
                                     f"them, got {self.l1_ratio!r}")
        return tuple(float(s) for s in given)

    def _check_penalty(self) -> None:
        self._l1_shares()
        if self.cv is not None:
            check_int(self.cv, "cv")

    def _learning_rate(self) -> float:
        return REPLICAS.default("learning_rate")  # (no replica method fits a path)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> ElasticNetCV:
        """Choose ``alpha`` (and ``l1_ratio``, given several) on ``X, y`` (or a ShardedDataset
        ``X``) by cross-validation and fit there."""
        self._check_params()
        self._check_penalty()
        shares = self._l1_shares()
        own = isinstance(self.alphas, (int, np.integer)) and not isinstance(self.alphas, bool)
        given = None if own else _given_alphas(self.alphas)
        penalties = PathOptions.from_mapping({"n_alphas": self.alphas if own else 100, "eps": self.eps})
        with self._fit_data(X, y, classifier=False, sample_weight=sample_weight) as (data, _), \
                contextlib.ExitStack() as stack:
            if len(data.y_shape) != 1:
                raise InvalidDataError(f"y must be 1-D, got shape {data.y_shape}")
            # each path varies l1 = alpha l1_ratio with l2 = alpha (1 - l1_ratio) kept in ratio
            models = [LeastSquares(data.n_features, fit_intercept=self.fit_intercept, l1=s, l2=1.0 - s) for s in shares]
            plans = [PathPlan.checked(model, penalties, self._options(model, data)) for model in models]
            shards, folds, _ = folds_on(plans[0].model, data, cv=5 if self.cv is None else self.cv, stratified=False,
                                        metric=None, client=self.client, stack=stack)
            plans = [plan.with_alphas(plan.alphas_for(shards)[0] if given is None else given * share)
                     for plan, share in zip(plans, shares)]
            paths = fold_paths(plans, shards, folds, None)
            mse = np.stack([held_out_table([fold[i] for fold in paths], None)[0]["mse"] for i in range(len(plans))])
            mean = mse.mean(axis=1)  # (l1_ratio, alpha): scikit-learn's choice, the first of the least
            best, at = (int(i) for i in np.unravel_index(int(np.argmin(mean)), mean.shape))
            plan = plans[best]
            start = np.mean([fold[best].coef(at) for fold in paths], axis=0)
            refit = minimize(plan.model_for(float(plan.alphas[at])), shards, "sandblaster", plan.solver_options,
                             client=shards.client, x0=start)
        alphas = np.tile(given, (len(shares), 1)) if given is not None else \
            np.stack([plan.alphas / share for plan, share in zip(plans, shares)])  # the alphas given, exactly
        one = len(shares) == 1  # scikit-learn squeezes the l1_ratio axis away, given as a list or not
        self.alphas_ = alphas[0] if one else alphas
        self.mse_path_ = mse[0].T if one else np.moveaxis(mse, 1, 2)  # (l1_ratio,) alpha, fold
        self.alpha_ = float(alphas[best, at])
        if type(self) is not LassoCV:  # scikit-learn's LassoCV has none
            self.l1_ratio_ = shares[best]
        W, b = plan.model.unpack(refit.x)
        self.coef_ = np.asarray(W, dtype=np.float64).copy()
        self.intercept_ = float(b[0]) if self.fit_intercept else 0.0
        self.n_iter_ = int(refit.nit)  # type: ignore[assignment]  # an int, as scikit-learn's CV estimators
        return self


class LassoCV(ElasticNetCV):
    """:class:`ElasticNetCV` with ``l1_ratio=1``: scikit-learn's ``LassoCV``."""

    def __init__(self, *, eps: float = 1e-3, alphas: Any = 100, fit_intercept: bool = True,
                 max_iter: int = 200, tol: float = 1e-6, cv: int | None = None, standardize: bool = True,
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, client: Any = None) -> None:
        store_parameters(self, locals())

    def _l1_shares(self) -> tuple[float, ...]:
        return (1.0,)
