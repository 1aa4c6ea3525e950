"""scikit-learn estimators over Sandblaster L-BFGS and Downpour SGD.

``LogisticRegression``, ``LinearRegression`` and ``MLPClassifier`` follow scikit-learn's parameter names and
objectives, so they drop into ``Pipeline``, ``GridSearchCV`` and ``clone``. ``fit`` accepts
numpy arrays, scipy.sparse matrices (the linear estimators: stored as CSR shards, never
densified), dask arrays, an ``xarray.Dataset`` with ``X``/``y`` variables, or a
:class:`ShardedDataset`; in-memory inputs are written to a temporary sharded Zarr store for
the duration of the fit (workers read it by path, so on a multi-machine cluster pass a
``ShardedDataset`` on shared storage instead).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dasklbfgs._checks import check_int
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.sharded import unpack_xarray
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax
from dasklbfgs.models._kernels import softmax_rows
from dasklbfgs.models.base import Model
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.options import Options
from dasklbfgs.solvers import DownpourOptions, get_solver, minimize, solver_names

__all__ = ["LogisticRegression", "LinearRegression", "MLPClassifier"]

_REPLICAS = DownpourOptions  # the replica options' declared defaults


def _check_number(value: Any, name: str, *, positive: bool = False) -> None:
    """Refuse a parameter that is not a number > 0 (``positive``) or >= 0."""
    if not (isinstance(value, (int, float, np.floating)) and (value > 0 if positive else value >= 0)):
        raise ConfigurationError(f"{name} must be {'a positive number' if positive else 'a number >= 0'}, "
                                 f"got {value!r}")


def _store_parameters(estimator: BaseEstimator, values: dict[str, Any]) -> None:
    """What an estimator's ``__init__`` does, as scikit-learn asks: store each parameter."""
    for name, value in values.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


class _ShardedEstimator(BaseEstimator):
    """What the estimators share: input handling, solver options, fitted bookkeeping.

    scikit-learn's names map onto the solvers' options in :meth:`_options`, the one place
    that translates them: ``max_iter`` is L-BFGS's ``maxiter`` or the replica methods'
    ``epochs``, ``tol`` is ``gtol``, ``random_state`` the batch-order ``seed``. Every
    other option of the chosen solver is reachable through ``solver_options`` and checked
    by the solver's options class.
    """

    #: whether fit and predict take scipy.sparse X (written as a sparse dataset: CSR shards)
    _accepts_sparse = False

    def _check_params(self) -> None:
        get_solver(self.solver)  # a registered solver, or an error listing them
        check_int(self.max_iter, "max_iter")
        _check_number(self.tol, "tol")
        if self.solver_options is not None and not isinstance(self.solver_options, dict):
            raise ConfigurationError(f"solver_options must be a dict or None, got {self.solver_options!r}")

    def _options(self, model: Model, data: ShardedDataset) -> Options:
        """The chosen solver's options from this estimator's parameters."""
        solver = get_solver(self.solver)
        defaults: dict[str, Any] = {}  # the estimators' own choices, which solver_options may change
        if solver.iterative:
            mapped = {"maxiter": self.max_iter, "gtol": self.tol, "standardize": getattr(self, "standardize", False)}
            # ftol as scikit-learn's lbfgs solvers set it, so tol alone decides convergence.
            defaults["ftol"] = 64 * np.finfo(float).eps
        else:
            n_replicas = 1 if data.n_samples < 2 * self.batch_size else self.n_replicas
            mapped = {"epochs": self.max_iter, "learning_rate": self._learning_rate(),
                      "batch_size": min(self.batch_size, data.n_samples), "n_replicas": n_replicas,
                      "seed": self.random_state if self.random_state is not None else 0}
            if "n_param_shards" in solver.options.fields():
                defaults["n_param_shards"] = min(solver.options.default("n_param_shards"), model.n_params)
        extra = solver.options.canonical(self.solver_options or {})
        clash = sorted(set(extra) & set(mapped))
        if clash:
            raise ConfigurationError(
                f"solver_options {clash} are set by the estimator's own parameters (max_iter, tol, standardize, "
                "learning_rate, batch_size, n_replicas, random_state): pass those instead"
            )
        return solver.options.from_mapping({**defaults, **mapped, **extra})

    def _solve(self, model: Model, data: ShardedDataset, x0: np.ndarray | None = None) -> Any:
        result = minimize(model, data, self.solver, self._options(model, data), client=self.client, x0=x0)
        solver = get_solver(self.solver)
        self.n_iter_ = np.array([result.nit if solver.iterative else self.max_iter], dtype=np.int32)
        self.loss_curve_ = [h[solver.loss_key] for h in result.history if solver.loss_key in h]
        if not result.success:
            if result.status == Status.LINE_SEARCH_FAILED:
                advice = ("the objective stopped decreasing before the gradient met tol; tol may be "
                          "below the precision of the data (float32?)")
            elif result.status in (Status.NON_FINITE, Status.DIVERGED):
                advice = "lower learning_rate"
            else:
                advice = "increase max_iter or scale the features" + (
                    " (standardize=True)" if hasattr(self, "standardize") else "")
            warnings.warn(
                f"{type(self).__name__} did not converge: {result.message}; {advice}.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return result

    def _learning_rate(self) -> float:
        return self.learning_rate

    @contextlib.contextmanager
    def _fit_data(self, X: Any, y: Any, *, classifier: bool) -> Iterator[tuple[ShardedDataset, np.ndarray | None]]:
        """A ShardedDataset for ``X, y`` (a temporary one, deleted on exit, for in-memory
        input) and the classes."""
        if isinstance(X, ShardedDataset):
            if y is not None:
                raise ConfigurationError("pass y=None when X is a ShardedDataset (y is read from it)")
            self.n_features_in_ = X.n_features
            if X.feature_names is not None:
                self.feature_names_in_ = np.asarray(X.feature_names, dtype=object)
            classes = None
            if classifier:
                counts = X.label_counts
                if counts is None:
                    raise InvalidDataError(f"y in {str(X.path)!r} is not a set of integer class labels")
                classes = np.array(sorted(counts))
                if not np.array_equal(classes, np.arange(len(classes))):
                    raise InvalidDataError(
                        f"class labels in {str(X.path)!r} must be 0..K-1 to fit from a ShardedDataset, "
                        f"got {classes.tolist()[:10]}; fit from arrays to map any labels"
                    )
            self._check_classes(classes)
            yield X, classes
            return
        X, y, _, _ = unpack_xarray(X, y)
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], y_numeric=not classifier,
                             accept_sparse="csr" if self._accepts_sparse else False)
        classes = None
        if classifier:
            check_classification_targets(y)
            classes, y = np.unique(y, return_inverse=True)
            self._check_classes(classes)
        folder = Path(tempfile.mkdtemp(prefix="dasklbfgs-fit-"))
        try:
            shard_rows = self.shard_rows or max(1, -(-X.shape[0] // 8))
            yield ShardedDataset.create(folder / "data", X, y, shard_rows=shard_rows, compressor=None), classes
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _check_classes(self, classes: np.ndarray | None) -> None:
        """A classifier needs two classes or more (checked before any data is written)."""
        if classes is not None and len(classes) < 2:
            raise InvalidDataError(
                f"{type(self).__name__} needs samples of at least 2 classes, but y holds only one class: {classes.tolist()}"
            )

    def _checked(self, X: Any) -> np.ndarray:
        """``X`` to predict from, once fitted, checked against the fitted features."""
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=[np.float64, np.float32],
                             accept_sparse="csr" if self._accepts_sparse else False)

    def _decision(self, X: Any) -> np.ndarray:
        return self._checked(X) @ self.coef_.T + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # the replica methods' asynchrony makes runs differ; Sandblaster repeats bitwise
        tags.non_deterministic = self.solver not in solver_names() or not get_solver(self.solver).iterative
        tags.input_tags.sparse = self._accepts_sparse
        return tags


class LogisticRegression(ClassifierMixin, _ShardedEstimator):
    """L2-regularised logistic regression (binary or multinomial) trained on Dask.

    Minimises ``C * sum_i loss_i + ||w||^2 / 2`` like scikit-learn's, here solved as the
    equivalent ``mean_i loss_i + ||w||^2 / (2 C n)``. Binary problems use
    :class:`~dasklbfgs.models.Logistic`, more classes :class:`~dasklbfgs.models.Softmax`.

    Parameters
    ----------
    C
        Inverse regularisation strength (``np.inf``: none).
    fit_intercept, max_iter, tol
        As in scikit-learn (``tol`` is the gradient tolerance; for Downpour ``max_iter``
        counts epochs).
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
    shard_rows
        Rows per shard of the temporary store for in-memory input (default: 8 shards).
    random_state
        Seeds Downpour's batch order.
    client
        Dask client; default: the active client, else an embedded cluster per fit.
    """

    def __init__(self, *, C: float = 1.0, fit_intercept: bool = True, max_iter: int = 100, tol: float = 1e-4,
                 solver: str = "sandblaster", standardize: bool = True, learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None, shard_rows: int | None = None,
                 random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None) -> LogisticRegression:
        self._check_params()
        _check_number(self.C, "C", positive=True)
        with self._fit_data(X, y, classifier=True) as (data, classes):
            l2 = 0.0 if np.isinf(self.C) else 1.0 / (self.C * data.n_samples)
            d = data.n_features
            if len(classes) == 2:
                model = Logistic(d, l2=l2, fit_intercept=self.fit_intercept)
            else:
                model = Softmax(d, len(classes), l2=l2, fit_intercept=self.fit_intercept)
            result = self._solve(model, data)
        W, b = model.unpack(result.x)
        self.classes_ = classes
        self.coef_ = np.atleast_2d(np.asarray(W).T).copy()
        self.intercept_ = np.atleast_1d(np.asarray(b, dtype=np.float64)).copy()
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        if scores.shape[1] == 1:
            p1 = np.exp(-np.logaddexp(0.0, -scores[:, 0]))
            return np.column_stack([1.0 - p1, p1])
        return softmax_rows(scores)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        scores = self._decision(X)
        index = (scores[:, 0] > 0).astype(int) if scores.shape[1] == 1 else scores.argmax(axis=1)
        return self.classes_[index]


class LinearRegression(RegressorMixin, _ShardedEstimator):
    """Least squares with an optional l2 penalty (``alpha``, as scikit-learn's ``Ridge``).

    Minimises ``||y - X w - b||^2 + alpha ||w||^2``, solved as the equivalent
    ``mean_i (x_i w + b - y_i)^2 / 2 + (alpha / n) ||w||^2 / 2``.
    """

    def __init__(self, *, alpha: float = 0.0, fit_intercept: bool = True, max_iter: int = 200,
                 tol: float = 1e-6, solver: str = "sandblaster", standardize: bool = True,
                 learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None, shard_rows: int | None = None,
                 random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None) -> LinearRegression:
        self._check_params()
        _check_number(self.alpha, "alpha")
        with self._fit_data(X, y, classifier=False) as (data, _):
            if len(data.y_shape) != 1:
                raise InvalidDataError(f"y must be 1-D, got shape {data.y_shape}")
            model = LeastSquares(data.n_features, l2=self.alpha / data.n_samples, fit_intercept=self.fit_intercept)
            result = self._solve(model, data)
        W, b = model.unpack(result.x)
        self.coef_ = np.asarray(W, dtype=np.float64).copy()
        self.intercept_ = float(b[0]) if self.fit_intercept else 0.0
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self._checked(X) @ self.coef_ + self.intercept_


class MLPClassifier(ClassifierMixin, _ShardedEstimator):
    """A multi-layer perceptron classifier (:class:`~dasklbfgs.models.MLP`) trained on Dask.

    Names follow scikit-learn's ``MLPClassifier``: it minimises the mean cross-entropy plus
    ``alpha / (2 n) sum ||W||^2``, with a softmax output for any number of classes (two
    included). ``solver="sandblaster"`` runs full-batch L-BFGS over the data shards
    (scikit-learn's ``solver="lbfgs"``, distributed); ``"downpour"`` runs asynchronous
    Adagrad with ``learning_rate_init`` at the parameter shards, ``max_iter`` epochs.

    Fitted attributes: ``coefs_``, ``intercepts_`` (lists per layer, as scikit-learn's),
    ``classes_``, ``n_iter_``, ``loss_curve_``, ``n_layers_``, ``n_outputs_``.
    """

    def __init__(self, hidden_layer_sizes: tuple[int, ...] = (100,), *, activation: str = "relu",
                 alpha: float = 1e-4, max_iter: int = 200, tol: float = 1e-4, solver: str = "sandblaster",
                 learning_rate_init: float = 0.05, batch_size: int = _REPLICAS.default("batch_size"),
                 n_replicas: int = _REPLICAS.default("n_replicas"), solver_options: dict[str, Any] | None = None,
                 shard_rows: int | None = None, random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    def _learning_rate(self) -> float:
        return self.learning_rate_init

    def _model(self, n_features: int, n_classes: int, l2: float = 0.0) -> MLP:
        return MLP(n_features, tuple(self.hidden_layer_sizes), n_classes, activation=self.activation, l2=l2)

    def fit(self, X: Any, y: Any = None) -> MLPClassifier:
        self._check_params()
        _check_number(self.alpha, "alpha")
        self._model(1, 2)  # hidden_layer_sizes and activation, before any data is written
        with self._fit_data(X, y, classifier=True) as (data, classes):
            model = self._model(data.n_features, len(classes), self.alpha / data.n_samples)
            seed = 0 if self.random_state is None else self.random_state
            result = self._solve(model, data, x0=model.init_params(seed))
        views = model.layout.views(np.asarray(result.x, dtype=np.float64).copy())
        self.coefs_ = [views[f"W{l}"] for l in range(model.n_layers)]
        self.intercepts_ = [views[f"b{l}"] for l in range(model.n_layers)]
        self.classes_ = classes
        self.n_layers_ = model.n_layers + 1
        self.n_outputs_ = len(classes)
        return self

    def _params(self, X: Any) -> tuple[MLP, np.ndarray, np.ndarray]:
        X = self._checked(X)
        model = self._model(self.n_features_in_, len(self.classes_))
        flat = np.concatenate([a.ravel() for pair in zip(self.coefs_, self.intercepts_) for a in pair])
        return model, flat, X

    def predict_proba(self, X: Any) -> np.ndarray:
        model, params, X = self._params(X)
        return model.predict_proba(params, X)

    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(self.predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        model, params, X = self._params(X)
        return self.classes_[model.predict(params, X)]
