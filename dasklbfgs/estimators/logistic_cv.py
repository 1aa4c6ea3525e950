"""scikit-learn's ``LogisticRegressionCV``: for each l1 ratio, the path of Cs on every fold,
all on one set of cached shards, chosen and recorded in scikit-learn's shapes."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.estimators.base import (
    REPLICAS,
    store_parameters,
)
from dasklbfgs.estimators.linear import LogisticRegression
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.selection.cv import fold_paths, folds_on
from dasklbfgs.selection.options import PathOptions
from dasklbfgs.selection.path import PathPlan, RegularizationPath
from dasklbfgs.solvers import minimize

#: scikit-learn's ``scoring`` names a LogisticRegressionCV chooses by, as the metric the
#: workers compute and its sign (a loss is scored negated, higher always better)
SCORERS = {"accuracy": ("accuracy", 1.0), "neg_log_loss": ("log_loss", -1.0), "roc_auc": ("roc_auc", 1.0),
           "average_precision": ("average_precision", 1.0), "neg_brier_score": ("brier_score", -1.0),
           "f1": ("f1", 1.0), "precision": ("precision", 1.0), "recall": ("recall", 1.0)}


class LogisticRegressionCV(LogisticRegression):
    """:class:`LogisticRegression` with ``C`` (and ``l1_ratio``) chosen by cross-validation,
    as scikit-learn 1.9's ``LogisticRegressionCV``: for each of ``l1_ratios``, the path of
    ``Cs`` (an integer: that many from 1e-4 to 1e4 on a log scale) from the smallest C up,
    warm started, on each of ``cv`` folds (``StratifiedKFold(cv)``, default 5, on the rows in
    order), scored on the fold's held-out rows by ``scoring`` (accuracy by default, as
    scikit-learn 1.9, with its FutureWarning; or ``"neg_log_loss"``, ``"roc_auc"``,
    ``"average_precision"``, ``"neg_brier_score"``, ``"f1"``, ``"precision"``, ``"recall"``:
    computed by the workers), all on the shards cached once. ``refit=True``: the (C,
    l1_ratio) of the best score summed over the folds, refitted on every row from the folds'
    mean solution there; ``refit=False``: each fold's best, their coefficients and C averaged.

    Each fold's penalty is scikit-learn's: ``C`` beside the loss summed over that fold's
    training rows. Fitted: ``Cs_``, ``l1_ratios_``, ``scores_``, ``coefs_paths_``, ``n_iter_``,
    ``C_``, ``l1_ratio_`` in scikit-learn's shapes (its legacy ones unless
    ``use_legacy_attributes=False``), ``coef_``, ``intercept_``, ``classes_``. Sandblaster
    L-BFGS (OWL-QN with an L1 part) fits every path; ``solver_options`` are its options.
    """

    def __init__(self, *, Cs: Any = 10, l1_ratios: Any = "warn", fit_intercept: bool = True, cv: int | None = None,
                 penalty: Any = "deprecated", scoring: Any = "warn", tol: float = 1e-4, max_iter: int = 100,
                 class_weight: Any = None, refit: bool = True, random_state: int | None = None,
                 use_legacy_attributes: Any = "warn", standardize: bool = True,
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, client: Any = None) -> None:
        store_parameters(self, locals())

    # what ShardedEstimator reads of the estimators that choose a solver: a path is Sandblaster's
    solver, warm_start = "sandblaster", False
    batch_size, n_replicas = REPLICAS.default("batch_size"), REPLICAS.default("n_replicas")

    def _learning_rate(self) -> float:
        return REPLICAS.default("learning_rate")  # (no replica method fits a path)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> LogisticRegressionCV:
        """Choose ``C`` (and ``l1_ratio``) on ``X, y`` (or a ShardedDataset ``X``) by
        cross-validation and fit there."""
        self._check_params()
        grid = _Grid.checked(self)
        self._check_class_weight()
        if self.cv is not None:
            check_int(self.cv, "cv")
        if not isinstance(self.refit, (bool, np.bool_)):
            raise ConfigurationError(f"refit must be True or False, got {self.refit!r}")
        with self._fit_data(X, y, classifier=True, sample_weight=sample_weight) as (data, classes), \
                contextlib.ExitStack() as stack:
            # each path varies 1 / C (scaled by its l1 share: the l1 penalty, or the l2 with no l1)
            models = [self._model(data, classes, l1=s, l2=1.0 - s) for s in grid.shares]
            plans = [PathPlan.checked(model, PathOptions(), self._options(model, data)).with_alphas(
                (share or 1.0) * grid.strengths) for model, share in zip(models, grid.shares)]
            shards, folds, _ = folds_on(plans[0].model, data, cv=5 if self.cv is None else self.cv, stratified=True,
                                        metric=grid.metric, client=self.client, stack=stack)
            found = grid.filled(fold_paths(plans, shards, folds, grid.metric, summed=True))
            if self.refit:
                c, i = found.best()
                plan = plans[i]
                refit = minimize(plan.model_for(float(plan.alphas[grid.fitted_at(c)]) / data.total_weight), shards,
                                 "sandblaster", plan.solver_options, client=shards.client,
                                 x0=found.coefs[:, i, c].mean(axis=0))
                x, C, share = refit.x, float(grid.Cs[c]), grid.ratios[i]
            else:
                x, C, share = found.averaged_best()
        self._record_fit(plans[0].model, classes, x)
        found.record(self, plans[0].model, C, share)
        return self


@dataclass(frozen=True)
class _Grid:
    """A LogisticRegressionCV's checked grid: ``Cs`` in the order given, the l1 ratios (as
    given, ``[None]`` for scikit-learn's none) and the l1 share each fits with, the metric the
    workers score by and its sign (higher always better)."""

    Cs: np.ndarray
    ratios: list[Any]
    shares: list[float]
    penalty: str
    metric: str
    sign: float
    legacy: bool
    ratios_given: bool

    @classmethod
    def checked(cls, estimator: LogisticRegressionCV) -> _Grid:
        """scikit-learn 1.9's reading of ``Cs``, ``l1_ratios``, ``penalty``, ``scoring`` and
        ``use_legacy_attributes``, with its FutureWarnings."""
        Cs = _given_Cs(estimator.Cs)
        penalty, ratios = _cv_penalty(estimator.penalty, estimator.l1_ratios)
        metric, sign = _scorer(estimator.scoring)
        legacy = estimator.use_legacy_attributes
        if isinstance(legacy, str) and legacy == "warn":
            warnings.warn(_LEGACY_WARNING, FutureWarning, stacklevel=3)
            legacy = True
        if not isinstance(legacy, (bool, np.bool_)):
            raise ConfigurationError(f"use_legacy_attributes must be True, False or 'warn', got {legacy!r}")
        shares = [{"l2": 0.0, "l1": 1.0}.get(penalty, r) for r in ratios]
        return cls(Cs, ratios, shares, penalty, metric, sign, bool(legacy), not (ratios == [None]))

    @property
    def order(self) -> np.ndarray:
        """The Cs' positions from the smallest C (the strongest penalty: a path's first fit) up."""
        return np.argsort(self.Cs, kind="stable")

    @property
    def strengths(self) -> np.ndarray:
        """1 / C in a path's order (0 for C = inf)."""
        return 1.0 / self.Cs[self.order]

    def fitted_at(self, c: int) -> int:
        """The position along a path of the C at position ``c`` of ``Cs``."""
        return int(np.flatnonzero(self.order == c)[0])

    def filled(self, paths: list[list[RegularizationPath]]) -> _Found:
        """The folds' paths (``paths[fold][l1 ratio]``) as arrays over (fold, l1 ratio, C in
        the order given): the signed scores, the iterations, the parameters."""
        shape = (len(paths), len(self.ratios), len(self.Cs))
        scores, iterations = np.empty(shape), np.empty(shape, dtype=np.int32)
        coefs = np.empty((*shape, paths[0][0].coef(0).size))
        for f, fold in enumerate(paths):
            for i, path in enumerate(fold):
                scores[f, i, self.order] = self.sign * np.array([float(s[self.metric]) for s in path.scores or []])
                iterations[f, i, self.order] = path.nit
                coefs[f, i, self.order] = [path.coef(k) for k in range(len(path))]
        return _Found(self, scores, iterations, coefs)


@dataclass(frozen=True)
class _Found:
    """The cross-validated grid's fits: ``scores``, ``iterations`` (fold x l1 ratio x C) and
    ``coefs`` (each fit's parameters)."""

    grid: _Grid
    scores: np.ndarray
    iterations: np.ndarray
    coefs: np.ndarray

    def best(self, scores: np.ndarray | None = None) -> tuple[int, int]:
        """The (C, l1 ratio) positions of the best of ``scores`` (l1 ratio x C; default the
        sum over the folds): scikit-learn's order, C before l1 ratio, the first of equals."""
        table = self.scores.sum(axis=0) if scores is None else scores
        c, i = np.unravel_index(int(np.argmax(table.T)), table.T.shape)
        return int(c), int(i)

    def averaged_best(self) -> tuple[np.ndarray, float, Any]:
        """refit=False: each fold's best fit, their parameters, Cs and l1 ratios averaged."""
        best = [self.best(fold) for fold in self.scores]
        x = np.mean([self.coefs[f, i, c] for f, (c, i) in enumerate(best)], axis=0)
        C = float(np.mean([self.grid.Cs[c] for c, _ in best]))
        share = float(np.mean([self.grid.ratios[i] for _, i in best])) if self.grid.penalty == "elasticnet" else 0.0
        return x, C, share

    def record(self, estimator: LogisticRegressionCV, model: LinearModel, C: float, ratio: Any) -> None:
        """scikit-learn's fitted attributes of the grid: ``Cs_``, ``l1_ratios_``, ``scores_``,
        ``coefs_paths_``, ``n_iter_``, ``C_``, ``l1_ratio_`` (its legacy shapes, or the new)."""
        grid, classes = self.grid, estimator.classes_
        n_outputs = model.n_outputs
        W, b = np.split(self.coefs, [model.n_coef], axis=-1)  # per fit: coefficients (d x K, or d), intercepts
        W = W.reshape(*W.shape[:-1], model.n_features, n_outputs)
        per_class = np.concatenate([np.swapaxes(W, -1, -2), b[..., None] if model.fit_intercept else
                                    np.zeros((*b.shape[:-1], n_outputs, 0))], axis=-1)  # (..., K, n_dof)
        estimator.Cs_ = grid.Cs
        estimator.l1_ratios_ = np.asarray(grid.ratios)
        if not grid.legacy:
            estimator.coefs_paths_ = per_class
            estimator.scores_ = self.scores
            estimator.n_iter_ = self.iterations
            estimator.C_ = C
            estimator.l1_ratio_ = float(ratio) if grid.ratios_given or not estimator.refit else \
                (1.0 if grid.penalty == "l1" else 0.0)
            return
        keep = slice(None) if grid.ratios_given else 0  # the l1 ratio axis, gone when none was given
        paths = np.moveaxis(per_class, (1, 2), (2, 1))[:, :, keep]  # fold, C, (l1 ratio,) class, n_dof
        owners = classes[1:] if len(classes) == 2 else classes
        estimator.coefs_paths_ = {label: paths[..., k, :] for k, label in enumerate(owners)}
        scores = np.swapaxes(self.scores, 1, 2)[:, :, keep]
        estimator.scores_ = {label: scores for label in owners}
        estimator.n_iter_ = np.swapaxes(self.iterations, 1, 2)[None, :, :, keep]
        estimator.C_ = np.full(len(owners), C)
        estimator.l1_ratio_ = np.array([ratio] * len(owners), dtype=object if ratio is None else np.float64)


#: scikit-learn 1.9's warning for ``use_legacy_attributes`` left at its default, word for word
_LEGACY_WARNING = (
    "The fitted attributes of LogisticRegressionCV will be simplified in scikit-learn 1.10 to remove redundancy. "
    "Set`use_legacy_attributes=False` to enable the new behavior now, or set it to `True` to silence this warning "
    "during the transition period while keeping the deprecated behavior for the time being. The default value of "
    "use_legacy_attributes will change from True to False in scikit-learn 1.10. See the docstring of "
    "LogisticRegressionCV for more details."
)


def _given_Cs(Cs: Any) -> np.ndarray:
    """``Cs``: an integer (that many from 1e-4 to 1e4 on a log scale) or a list of numbers > 0."""
    if isinstance(Cs, (int, np.integer)) and not isinstance(Cs, bool):
        check_int(Cs, "Cs")
        return np.logspace(-4, 4, int(Cs))
    try:
        found = np.asarray(Cs, dtype=np.float64)
    except (TypeError, ValueError):
        found = np.array([np.nan])
    if found.ndim != 1 or found.size == 0 or np.any(np.isnan(found)) or np.any(found <= 0):
        raise ConfigurationError(f"Cs must be a number of Cs (an integer >= 1) or a non-empty list of numbers > 0, "
                                 f"got {Cs!r}")
    return found


def _cv_penalty(penalty: Any, l1_ratios: Any) -> tuple[str, list[Any]]:
    """scikit-learn 1.9's penalty of a LogisticRegressionCV and its l1 ratios (``[None]`` for
    none given), with its FutureWarnings."""
    ratios = None
    if isinstance(l1_ratios, str) and l1_ratios == "warn":
        warnings.warn("The default value for l1_ratios will change from None to (0.0,) in version 1.10. From "
                      "version 1.10 onwards, only array-like with values in [0, 1] will be allowed, None will be "
                      "forbidden. To avoid this warning, explicitly set a value, e.g. l1_ratios=(0,).", FutureWarning,
                      stacklevel=4)
    elif l1_ratios is not None:
        ratios = list(np.atleast_1d(np.asarray(l1_ratios, dtype=object)))
        if not ratios or not all(isinstance(r, (int, float, np.integer, np.floating)) and not isinstance(r, bool)
                                 and 0 <= r <= 1 for r in ratios):
            raise ConfigurationError(f"l1_ratios must be a list of numbers in [0, 1] (0: L2 penalty, 1: L1, between: "
                                     f"elastic net), got {l1_ratios!r}")
        ratios = [float(r) for r in ratios]
    if penalty == "deprecated":
        if l1_ratios is None:
            warnings.warn("'l1_ratios=None' was deprecated in version 1.8 and will trigger an error in 1.10. Use an "
                          "array-like with values in [0, 1] instead.", FutureWarning, stacklevel=4)
        name = "l2" if ratios is None or all(r == 0 for r in ratios) else "l1" if all(r == 1 for r in ratios) \
            else "elasticnet"
        return name, ratios if ratios is not None else [None]
    if penalty not in ("l1", "l2", "elasticnet"):
        raise ConfigurationError(f"penalty must be 'l1', 'l2' or 'elasticnet' (deprecated: use l1_ratios), "
                                 f"got {penalty!r}")
    warnings.warn("'penalty' was deprecated in version 1.8 and will be removed in 1.10. To avoid this warning, leave "
                  "'penalty' set to its default value and use 'l1_ratios' and 'Cs' instead. Use l1_ratios=(0,) instead "
                  "of penalty='l2', l1_ratios=(1,) instead of penalty='l1', l1_ratios set to floats between 0 and 1 "
                  "instead of penalty='elasticnet', and Cs=(np.inf,) instead of penalty=None.", FutureWarning,
                  stacklevel=4)
    if penalty == "elasticnet" and ratios is None:
        raise ConfigurationError(f"l1_ratios must be an array-like of numbers between 0 and 1; got "
                                 f"(l1_ratios={l1_ratios!r})")
    return penalty, ratios if ratios is not None else [None]


def _scorer(scoring: Any) -> tuple[str, float]:
    """The metric a ``scoring`` name asks the workers for and its sign (None and scikit-learn
    1.9's default: accuracy, the default with its FutureWarning)."""
    if isinstance(scoring, str) and scoring == "warn":
        warnings.warn("The default value of the parameter 'scoring' will change from None, i.e. accuracy, to "
                      "'neg_log_loss' in version 1.11. To silence this warning, explicitly set the scoring "
                      "parameter: scoring='neg_log_loss' for the new, scoring='accuracy' or scoring=None for the "
                      "old default.", FutureWarning, stacklevel=4)
        scoring = None
    if scoring is None:
        return SCORERS["accuracy"]
    if not isinstance(scoring, str) or scoring not in SCORERS:
        raise ConfigurationError(f"scoring must be None or one of {sorted(SCORERS)} (the workers score the folds "
                                 f"by name), got {scoring!r}")
    return SCORERS[scoring]
