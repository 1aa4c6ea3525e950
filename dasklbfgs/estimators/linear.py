"""The linear estimators: scikit-learn's ``LogisticRegression``, ``LinearRegression``
(``Ridge``'s objective), ``ElasticNet`` and ``Lasso``."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.class_weight import compute_class_weight

from dasklbfgs._post_fit import ScoredOnTheCluster, on_the_cluster
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.estimators.base import (
    REPLICAS,
    ShardedEstimator,
    check_l1_ratio,
    check_number,
    store_parameters,
)
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.models._kernels import softmax_rows
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.schema import balanced_class_weight

#: scikit-learn 1.9's warning for ``penalty``, word for word (``penalty`` goes in 1.10)
_PENALTY_DEPRECATED = (
    "'penalty' was deprecated in version 1.8 and will be removed in 1.10. To avoid this warning, leave "
    "'penalty' set to its default value and use 'l1_ratio' or 'C' instead. Use l1_ratio=0 instead of "
    "penalty='l2', l1_ratio=1 instead of penalty='l1', l1_ratio set to a float between 0 and 1 instead of "
    "penalty='elasticnet', and C=np.inf instead of penalty=None."
)
_PENALTIES = ("l1", "l2", "elasticnet", None)


def _penalty_name(penalty: Any, C: float, l1_ratio: float | None) -> str | None:
    """The penalty scikit-learn 1.9's ``LogisticRegression`` applies, with its FutureWarnings:
    from ``l1_ratio`` and ``C`` when ``penalty`` is left at ``"deprecated"``, else ``penalty``."""
    if penalty != "deprecated":
        warnings.warn(_PENALTY_DEPRECATED, FutureWarning, stacklevel=4)
        return penalty
    if l1_ratio is None:
        warnings.warn("'l1_ratio=None' was deprecated in version 1.8 and will trigger an error in 1.10. "
                      "Use 0<=l1_ratio<=1 instead.", FutureWarning, stacklevel=4)
    if C == np.inf:
        return None
    return "l2" if not l1_ratio else "l1" if l1_ratio == 1 else "elasticnet"


def _logistic_penalty(penalty: Any, C: float, l1_ratio: float | None) -> tuple[float, float]:
    """``(1 / C, share of L1)`` of scikit-learn 1.9's ``LogisticRegression`` for these parameters,
    checked and warned about as scikit-learn does: the penalty is ``(1 / C) (share ||w||_1 +
    (1 - share) ||w||^2 / 2)`` beside the summed loss."""
    if penalty != "deprecated" and penalty not in _PENALTIES:
        raise ConfigurationError(f"penalty must be one of {_PENALTIES} (deprecated: use l1_ratio and C), "
                                 f"got {penalty!r}")
    check_number(C, "C", positive=True)
    if l1_ratio is not None:
        check_l1_ratio(l1_ratio)
    name = _penalty_name(penalty, C, l1_ratio)
    if name != "elasticnet" and l1_ratio is not None and 0 < l1_ratio < 1:
        warnings.warn(f"l1_ratio parameter is only used when penalty is 'elasticnet'. Got (penalty={name})",
                      stacklevel=3)
    if (penalty == "l2" and l1_ratio != 0) or (penalty == "l1" and l1_ratio != 1):
        warnings.warn(f"Inconsistent values: penalty={penalty} with l1_ratio={l1_ratio}. penalty is deprecated. "
                      "Please use l1_ratio only.", stacklevel=3)
    if name == "elasticnet" and l1_ratio is None:
        raise ConfigurationError("l1_ratio must be specified when penalty is elasticnet.")
    if name is None:
        if penalty is None and C != 1.0:
            warnings.warn("Setting penalty=None will ignore the C and l1_ratio parameters", stacklevel=3)
        return 0.0, 0.0
    share = {"l2": 0.0, "l1": 1.0}.get(name, l1_ratio)
    assert share is not None  # only elasticnet takes l1_ratio, which it requires (above)
    return 1.0 / C, share


class LogisticRegression(ScoredOnTheCluster, ClassifierMixin, ShardedEstimator):
    """Logistic regression (binary or multinomial) with scikit-learn's penalties, trained on Dask.

    Minimises scikit-learn's ``C * sum_i loss_i + l1_ratio ||w||_1 + (1 - l1_ratio) ||w||^2 / 2``,
    here solved as the equivalent ``mean_i loss_i + (l2 / 2) ||w||^2 + l1 ||w||_1`` with
    ``l2 = (1 - l1_ratio) / (C n)`` and ``l1 = l1_ratio / (C n)``; intercepts are not
    penalised. Binary problems use :class:`~dasklbfgs.models.Logistic`, more classes
    :class:`~dasklbfgs.models.Softmax`. An L1 part (``l1_ratio > 0``) needs a solver that
    minimises one (Sandblaster, by OWL-QN).

    Parameters
    ----------
    penalty
        Deprecated, as in scikit-learn 1.8+: ``"l2"``, ``"l1"``, ``"elasticnet"`` (with
        ``l1_ratio``) or ``None`` are still accepted, with scikit-learn's ``FutureWarning``;
        use ``l1_ratio`` and ``C`` instead.
    C
        Inverse regularisation strength (``np.inf``: no penalty).
    class_weight
        ``None``, ``"balanced"`` (``total weight / (n_classes * the class's total weight)``) or
        a dict ``{label: weight}``: each row's weight is multiplied by its class's, as in
        scikit-learn.
    l1_ratio
        The L1 share of the penalty, in [0, 1]: 0 is L2, 1 is L1, between is the elastic net.
    fit_intercept, max_iter, tol
        As in scikit-learn (``tol`` is the gradient tolerance; for Downpour ``max_iter``
        counts epochs).
    warm_start
        Start from the previous fit's ``coef_`` and ``intercept_`` (same features and classes).
    solver
        A registered solver (:func:`dasklbfgs.solver_names`): ``"sandblaster"`` (L-BFGS over
        data shards), ``"downpour"`` (asynchronous Adagrad) or a peer method.
    standardize
        Sandblaster only: optimise in standardised coordinates (same optimum).
    learning_rate, batch_size, n_replicas
        The replica methods (Downpour and the peers) only.
    solver_options
        Any other option of the chosen solver, by its name in the solver's options class
        (e.g. ``{"history": 20}`` for Sandblaster, ``{"n_fetch": 4}`` for Downpour).
    one_hot_max_levels, hash_features
        How the text and categorical columns of a pandas or Dask DataFrame become features,
        as :meth:`~dasklbfgs.data.ShardedDataset.from_dataframe` makes them: a column with at
        most ``one_hot_max_levels`` levels is one-hot encoded (unseen levels set no column),
        one with more hashed into ``hash_features`` columns (None: refused, naming it); the
        fit records the transform in ``frame_features_`` and predict applies it to the
        tables it is given.
    shard_rows
        Rows per shard of the temporary dataset arrays are written to (default: 8 shards).
    tmp_store
        Where that temporary dataset goes (a URL such as ``"s3://bucket/scratch"``, a
        folder, or a :class:`~dasklbfgs.data.location.Location` with storage options),
        deleted after the fit; default: the Dask config ``dasklbfgs.scratch``, else the
        client's temporary directory (for workers on this machine). Dask arrays are
        written there by the workers: their rows never reach the client.
    random_state
        Seeds Downpour's batch order.
    client
        Dask client; default: the active client, else an embedded cluster per fit.
    """

    def __init__(self, penalty: Any = "deprecated", *, C: float = 1.0, class_weight: Any = None,
                 l1_ratio: float | None = 0.0, fit_intercept: bool = True, max_iter: int = 100, tol: float = 1e-4,
                 warm_start: bool = False, solver: str = "sandblaster", standardize: bool = True,
                 learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        store_parameters(self, locals())

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> LogisticRegression:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``
        (the dataset's own weights for a ShardedDataset) and by its class's ``class_weight``."""
        self._check_params()
        strength, l1_share = _logistic_penalty(self.penalty, self.C, self.l1_ratio)
        self._check_class_weight()
        with self._fit_data(X, y, classifier=True, sample_weight=sample_weight) as (data, classes):
            scale = strength / self._penalty_scale(data)
            model = self._model(data, classes, l1=l1_share * scale, l2=(1.0 - l1_share) * scale)
            result = self._solve(model, data, x0=self._warm_start_x0(model))
        self._record_fit(model, classes, result.x)
        return self

    def _check_class_weight(self) -> None:
        if not (self.class_weight is None or self.class_weight == "balanced" or isinstance(self.class_weight, dict)):
            raise ConfigurationError(f"class_weight must be None, 'balanced' or a dict {{label: weight}}, "
                                     f"got {self.class_weight!r}")

    def _model(self, data: ShardedDataset, classes: np.ndarray, *, l1: float, l2: float) -> LinearModel:
        """The model of ``data``'s ``classes`` at penalties ``l1`` and ``l2``: logistic for two
        classes, softmax for more, each row weighted by its class's ``class_weight``."""
        penalties = {"l2": l2, "l1": l1, "fit_intercept": self.fit_intercept,
                     "class_weight": self._class_weights(data, classes)}
        if len(classes) == 2:
            return Logistic(data.n_features, **penalties)
        return Softmax(data.n_features, len(classes), **penalties)

    def _record_fit(self, model: LinearModel, classes: np.ndarray, x: np.ndarray) -> None:
        """``classes_``, ``coef_`` and ``intercept_`` (zeros without one) from the parameters ``x``."""
        W, b = model.unpack(x)
        self.classes_ = classes
        self.coef_ = np.atleast_2d(np.asarray(W).T).copy()
        self.intercept_ = np.atleast_1d(np.asarray(b, dtype=np.float64)).copy()

    def _class_weights(self, data: ShardedDataset, classes: np.ndarray) -> list[float] | None:
        """``class_weight`` per class index, in the order of ``classes`` (the data's labels are
        those indices): "balanced" from the totals the data recorded, a dict by label."""
        if self.class_weight is None:
            return None
        if self.class_weight == "balanced":
            return balanced_class_weight(data, len(classes))
        return [float(v) for v in compute_class_weight(self.class_weight, classes=classes, y=classes)]

    @on_the_cluster
    def decision_function(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    @on_the_cluster
    def predict_proba(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        if scores.shape[1] == 1:
            p1 = np.exp(-np.logaddexp(0.0, -scores[:, 0]))
            return np.column_stack([1.0 - p1, p1])
        return softmax_rows(scores)

    @on_the_cluster
    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(self.predict_proba(X))

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        index = (scores[:, 0] > 0).astype(int) if scores.shape[1] == 1 else scores.argmax(axis=1)
        return self.classes_[index]


class LeastSquaresEstimator(ScoredOnTheCluster, RegressorMixin, ShardedEstimator):
    """A linear regressor: what LinearRegression, ElasticNet, Lasso and the GLM regressors
    share (the fit and predict). Each checks its parameters in ``_check_penalty()`` and gives
    the model for the data in ``_model(data)`` (least squares with the ``l2`` and ``l1`` of
    ``_penalties(data)``, unless it says otherwise)."""

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> LeastSquaresEstimator:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``
        (the dataset's own weights for a ShardedDataset): the weighted mean of the squared errors."""
        self._check_params()
        self._check_penalty()
        with self._fit_data(X, y, classifier=False, sample_weight=sample_weight) as (data, _):
            if len(data.y_shape) != 1:
                raise InvalidDataError(f"y must be 1-D, got shape {data.y_shape}")
            model = self._model(data)
            result = self._solve(model, data, x0=self._warm_start_x0(model))
        W, b = model.unpack(result.x)
        self.coef_ = np.asarray(W, dtype=np.float64).copy()
        self.intercept_ = float(b[0]) if self.fit_intercept else 0.0
        self._fitted(model, result.x, X, y)
        return self

    def _fitted(self, model: LinearModel, x: np.ndarray, X: Any, y: Any) -> None:
        """What a regressor records of its fit beyond ``coef_`` and ``intercept_`` (``x``: the
        model's parameters; ``X``, ``y``: the input as given); nothing here."""

    def _model(self, data: ShardedDataset) -> LinearModel:
        return LeastSquares(data.n_features, fit_intercept=self.fit_intercept, **self._penalties(data),
                            **self._bounds())

    def _bounds(self) -> dict[str, float]:
        """scikit-learn's ``positive=True``: every coefficient >= 0 (Sandblaster's projected
        method keeps it; the intercept is free)."""
        positive = getattr(self, "positive", False)
        if not isinstance(positive, (bool, np.bool_)):
            raise ConfigurationError(f"positive must be True or False, got {positive!r}")
        return {"lower_bounds": 0.0} if positive else {}

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        return self._checked(X) @ self.coef_ + self.intercept_


class LinearRegression(LeastSquaresEstimator):
    """Least squares with an optional l2 penalty (``alpha``, as scikit-learn's ``Ridge``);
    ``positive=True`` keeps every coefficient >= 0 (scikit-learn's ``positive``).

    Minimises ``||y - X w - b||^2 + alpha ||w||^2``, solved as the equivalent
    ``mean_i (x_i w + b - y_i)^2 / 2 + (alpha / n) ||w||^2 / 2``. Parameters as
    :class:`LogisticRegression`'s.
    """

    def __init__(self, *, alpha: float = 0.0, fit_intercept: bool = True, positive: bool = False,
                 max_iter: int = 200, tol: float = 1e-6, warm_start: bool = False, solver: str = "sandblaster",
                 standardize: bool = True,
                 learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        store_parameters(self, locals())

    def _check_penalty(self) -> None:
        check_number(self.alpha, "alpha")

    def _penalties(self, data: ShardedDataset) -> dict[str, float]:
        return {"l2": self.alpha / self._penalty_scale(data), "l1": 0.0}


class ElasticNet(LeastSquaresEstimator):
    """Linear regression with scikit-learn's elastic-net penalty, trained on Dask.

    Minimises scikit-learn's ``||y - X w - b||^2 / (2 n) + alpha l1_ratio ||w||_1 +
    alpha (1 - l1_ratio) ||w||^2 / 2`` (intercept not penalised): the model
    :class:`~dasklbfgs.models.LeastSquares` with ``l1 = alpha l1_ratio`` and ``l2 = alpha
    (1 - l1_ratio)``, its loss already a mean, so the penalties do not scale with ``n``.
    The L1 part needs a solver that minimises one (Sandblaster, by OWL-QN); coefficients it
    removes are exactly 0.0. ``positive=True`` keeps every coefficient >= 0 (Sandblaster).
    ``tol`` is the tolerance on the (pseudo-)gradient, ``max_iter`` counts L-BFGS iterations;
    the other parameters are :class:`LogisticRegression`'s.
    """

    def __init__(self, alpha: float = 1.0, *, l1_ratio: float = 0.5, fit_intercept: bool = True,
                 positive: bool = False, max_iter: int = 200, tol: float = 1e-6, warm_start: bool = False,
                 solver: str = "sandblaster",
                 standardize: bool = True, learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        store_parameters(self, locals())

    def _l1_share(self) -> float:
        return self.l1_ratio

    def _check_penalty(self) -> None:
        check_number(self.alpha, "alpha")
        check_l1_ratio(self._l1_share())

    def _penalties(self, data: ShardedDataset) -> dict[str, float]:
        return {"l2": self.alpha * (1.0 - self._l1_share()), "l1": self.alpha * self._l1_share()}


class Lasso(ElasticNet):
    """:class:`ElasticNet` with ``l1_ratio=1``: scikit-learn's ``Lasso``, minimising
    ``||y - X w - b||^2 / (2 n) + alpha ||w||_1``."""

    def __init__(self, alpha: float = 1.0, *, fit_intercept: bool = True, positive: bool = False,
                 max_iter: int = 200, tol: float = 1e-6, warm_start: bool = False, solver: str = "sandblaster",
                 standardize: bool = True,
                 learning_rate: float = REPLICAS.default("learning_rate"),
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        store_parameters(self, locals())

    def _l1_share(self) -> float:
        return 1.0


