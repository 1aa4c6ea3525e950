"""scikit-learn estimators over Sandblaster L-BFGS and Downpour SGD.

``LogisticRegression``, ``LinearRegression``, ``ElasticNet``, ``Lasso``, ``MLPClassifier`` and
the cross-validated ``ElasticNetCV`` and ``LassoCV`` follow scikit-learn's parameter names and
objectives, so they drop into ``Pipeline``,
``GridSearchCV`` and ``clone``. ``fit`` accepts numpy arrays, pandas DataFrames (their column
names become ``feature_names_in_``, checked at predict; text and categorical columns are one-hot encoded
or hashed as :meth:`ShardedDataset.from_dataframe` encodes them, and predict applies the same
transform to the tables it is given: :mod:`dasklbfgs._post_fit`), scipy.sparse matrices (the
linear estimators: stored as CSR shards, never densified), dask arrays and DataFrames, an
``xarray.Dataset`` with ``X``/``y`` variables, or a :class:`ShardedDataset`. Other inputs are
written to a temporary dataset for the duration of the fit, dask input by the workers (its
rows never pass through the client), at ``tmp_store`` or the configured scratch URL on a
cluster without a shared disk (:mod:`dasklbfgs._fit_stores`). The linear estimators take
``warm_start``: a refit starts from the previous ``coef_`` and ``intercept_``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any, Literal, overload

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, validate_data

from dasklbfgs import errors
from dasklbfgs._checks import check_int
from dasklbfgs._fit_stores import temporary_dataset
from dasklbfgs._post_fit import PostFit, ScoredOnTheCluster, check_rows, computed, on_the_cluster, partition_rows
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.constructors import unpack_xarray
from dasklbfgs.data.dask_input import is_dask_collection
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS, FrameFeatures
from dasklbfgs.data.frame_input import check_encoding, decide_features, feature_rows, is_table, text_columns
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax
from dasklbfgs.models._kernels import softmax_rows
from dasklbfgs.models.base import Model
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.schema import balanced_class_weight
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.options import Options
from dasklbfgs.solvers import DownpourOptions, get_solver, minimize, solver_names

__all__ = ["LogisticRegression", "LinearRegression", "ElasticNet", "ElasticNetCV", "Lasso", "LassoCV",
           "MLPClassifier"]

_REPLICAS = DownpourOptions  # the replica options' declared defaults


def _check_number(value: Any, name: str, *, positive: bool = False) -> None:
    """Refuse a parameter that is not a number > 0 (``positive``) or >= 0."""
    if not (isinstance(value, (int, float, np.floating)) and (value > 0 if positive else value >= 0)):
        raise ConfigurationError(f"{name} must be {'a positive number' if positive else 'a number >= 0'}, "
                                 f"got {value!r}")


def _check_l1_ratio(value: Any) -> None:
    """scikit-learn's range for ``l1_ratio``: a number in [0, 1]."""
    if not (isinstance(value, (int, float, np.floating)) and 0 <= value <= 1):
        raise ConfigurationError(f"l1_ratio must be a number in [0, 1] (0: L2 penalty, 1: L1, between: "
                                 f"elastic net), got {value!r}")


def _as_array(values: Any, client: Any) -> Any:
    """A dask DataFrame or Series as a dask array (its partitions' rows counted by
    ``client``); other ``values`` as they are."""
    return values.to_dask_array(lengths=partition_rows(values, client)) if hasattr(values, "to_dask_array") else values


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


def _store_parameters(estimator: BaseEstimator, values: dict[str, Any]) -> None:
    """What an estimator's ``__init__`` does, as scikit-learn asks: store each parameter."""
    for name, value in values.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


class _ShardedEstimator(PostFit, BaseEstimator):
    """What the estimators share: input handling, solver options, fitted bookkeeping.

    scikit-learn's names map onto the solvers' options in :meth:`_options`, the one place
    that translates them: ``max_iter`` is L-BFGS's ``maxiter`` or the replica methods'
    ``epochs``, ``tol`` is ``gtol``, ``random_state`` the batch-order ``seed``. Every
    other option of the chosen solver is reachable through ``solver_options`` and checked
    by the solver's options class.
    """

    def _check_params(self) -> None:
        get_solver(self.solver)  # a registered solver, or an error listing them
        check_int(self.max_iter, "max_iter")
        _check_number(self.tol, "tol")
        if not isinstance(getattr(self, "warm_start", False), (bool, np.bool_)):
            raise ConfigurationError(f"warm_start must be True or False, got {self.warm_start!r}")
        if self.solver_options is not None and not isinstance(self.solver_options, dict):
            raise ConfigurationError(f"solver_options must be a dict or None, got {self.solver_options!r}")
        check_encoding(self.one_hot_max_levels, self.hash_features)

    def _options(self, model: Model, data: ShardedDataset) -> Options:
        """The chosen solver's options from this estimator's parameters."""
        solver = get_solver(self.solver)
        declared = solver.options.fields()
        n_replicas = 1 if data.n_samples < 2 * self.batch_size else self.n_replicas
        # scikit-learn's names in the solvers' vocabulary: each solver takes those its options declare
        translated = {"maxiter": self.max_iter, "epochs": self.max_iter, "gtol": self.tol,
                      "standardize": getattr(self, "standardize", False), "learning_rate": self._learning_rate(),
                      "batch_size": min(self.batch_size, data.n_samples), "n_replicas": n_replicas,
                      "seed": self.random_state if self.random_state is not None else 0}
        mapped = {name: value for name, value in translated.items() if name in declared}
        # the estimators' own choices, which solver_options may change: ftol as scikit-learn's
        # lbfgs solvers set it, so tol alone decides convergence; no more shards than parameters
        defaults: dict[str, Any] = {"ftol": 64 * np.finfo(float).eps}
        if "n_param_shards" in declared and solver.options.default("n_param_shards") is not None:
            defaults["n_param_shards"] = min(solver.options.default("n_param_shards"), model.n_params)
        defaults = {name: value for name, value in defaults.items() if name in declared}
        extra = solver.options.canonical(self.solver_options or {})
        clash = sorted(set(extra) & set(mapped))
        if clash:
            raise ConfigurationError(
                f"solver_options {clash} are set by the estimator's own parameters (max_iter, tol, standardize, "
                "learning_rate, batch_size, n_replicas, random_state): pass those instead"
            )
        return solver.options.from_mapping({**defaults, **mapped, **extra})

    def _penalty_scale(self, data: ShardedDataset) -> float:
        """What a penalty written on a summed loss (``C``, Ridge's and the MLP's ``alpha``) is
        divided by to sit beside the models' mean loss: what the mean divides by, the total
        sample weight (the number of rows when unweighted)."""
        return data.total_weight

    def _warm_start_x0(self, model: LinearModel) -> np.ndarray | None:
        """With ``warm_start=True`` and a fitted ``coef_``: the start ``x0`` made of ``coef_`` and
        ``intercept_`` (scikit-learn's warm start); otherwise ``None`` (the solver's start)."""
        if not self.warm_start or not hasattr(self, "coef_"):
            return None
        coef = np.asarray(self.coef_, dtype=np.float64)
        if coef.size != model.n_coef or coef.shape[-1] != model.n_features:
            raise ConfigurationError(
                f"warm_start=True starts from the fitted coef_, of shape {coef.shape}, but this data needs "
                f"{model.n_features} features x {model.n_outputs} output(s); fit with warm_start=False to start afresh"
            )
        W = coef.reshape(model.n_outputs, model.n_features).T.ravel()
        if not model.fit_intercept:
            return W
        return np.concatenate([W, np.broadcast_to(np.asarray(self.intercept_, dtype=np.float64), (model.n_outputs,))])

    def _solve(self, model: Model, data: ShardedDataset, x0: np.ndarray | None = None) -> Any:
        with warnings.catch_warnings():  # said below, as scikit-learn's warning
            warnings.simplefilter("ignore", errors.ConvergenceWarning)
            result = minimize(model, data, self.solver, self._options(model, data), client=self.client, x0=x0)
        # passes over the data, at most max_iter (a sync replica with fewer rows steps on empty batches)
        self.n_iter_ = np.array([min(result.stats.iterations(result.nit), self.max_iter)], dtype=np.int32)
        self.loss_curve_ = [h["loss"] for h in result.history if "loss" in h]
        if not result.success:
            if result.status == Status.LINE_SEARCH_FAILED:
                advice = ("; the objective stopped decreasing before the gradient met tol; tol may be "
                          "below the precision of the data (float32?)")
            elif result.status in (Status.NON_FINITE, Status.DIVERGED, Status.NO_PROGRESS):
                advice = "" if "learning_rate" in result.message else "; lower learning_rate"
            else:
                advice = "; increase max_iter or scale the features" + (
                    " (standardize=True)" if hasattr(self, "standardize") else "")
            warnings.warn(
                f"{type(self).__name__} did not converge: {result.message}{advice}.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return result

    def _learning_rate(self) -> float:
        return self.learning_rate

    @overload
    def _fit_data(self, X: Any, y: Any, *, classifier: Literal[True], sample_weight: Any = None
                  ) -> contextlib.AbstractContextManager[tuple[ShardedDataset, np.ndarray]]: ...

    @overload
    def _fit_data(self, X: Any, y: Any, *, classifier: Literal[False], sample_weight: Any = None
                  ) -> contextlib.AbstractContextManager[tuple[ShardedDataset, None]]: ...

    @contextlib.contextmanager
    def _fit_data(self, X: Any, y: Any, *, classifier: bool,
                  sample_weight: Any = None) -> Iterator[tuple[ShardedDataset, Any]]:  # classes: see the overloads
        """A ShardedDataset for ``X, y`` and ``sample_weight`` (a temporary one, deleted on
        exit, for in-memory input) and the classes (None unless ``classifier``)."""
        if isinstance(X, ShardedDataset):
            if y is not None:
                raise ConfigurationError("pass y=None when X is a ShardedDataset (y is read from it)")
            if sample_weight is not None:
                raise ConfigurationError("a ShardedDataset carries its own sample weights (write them with "
                                         "ShardedDataset.create(..., sample_weight=w)); pass sample_weight=None")
            self.n_features_in_ = X.n_features
            self._record_features(X.feature_names, X.frame_features)
            classes = None
            if classifier:
                counts = X.label_counts
                if counts is None:
                    raise InvalidDataError(f"y in {X.url!r} is not a set of integer class labels")
                classes = np.array(sorted(counts))
                if not np.array_equal(classes, np.arange(len(classes))):
                    raise InvalidDataError(
                        f"class labels in {X.url!r} must be 0..K-1 to fit from a ShardedDataset, "
                        f"got {classes.tolist()[:10]}; fit from arrays to map any labels"
                    )
            self._check_classes(classes)
            yield X, classes
            return
        X, y, _, sample_weight = unpack_xarray(X, y, sample_weight=sample_weight)  # or the Dataset's 'w'
        client = self._client()
        X, table = self._table_rows_to_fit(X, client)
        if client is not None and any(is_dask_collection(a) for a in (X, y, sample_weight)):
            with self._dask_fit_data(X, y, sample_weight, classifier=classifier, client=client) as fitted:
                self._record_table(table)
                yield fitted
            return
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], y_numeric=not classifier,
                             accept_sparse="csr" if self._accepts_sparse else False)
        self._record_table(table)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
        classes = None
        if classifier:
            check_classification_targets(y)
            classes, y = np.unique(y, return_inverse=True)
            self._check_classes(classes)
        shard_rows = self.shard_rows or max(1, -(-X.shape[0] // 8))
        with temporary_dataset(self.tmp_store, client, lambda where: ShardedDataset.create(
                where, X, y, sample_weight=sample_weight, shard_rows=shard_rows, compressor=None)) as data:
            yield data, classes

    @contextlib.contextmanager
    def _dask_fit_data(self, X: Any, y: Any, sample_weight: Any, *, classifier: bool, client: Any
                       ) -> Iterator[tuple[ShardedDataset, Any]]:
        """The temporary dataset of dask input, written by the workers (its rows never reach
        the client; a classifier's classes do, found on the workers)."""
        import dask.array as da

        X, y, sample_weight = (_as_array(a, client) for a in (X, y, sample_weight))
        X = da.asarray(X)
        check_rows(X.shape)
        self.n_features_in_ = int(X.shape[1])
        if hasattr(self, "feature_names_in_"):  # from an earlier fit: not this data's
            del self.feature_names_in_
        classes = None
        if classifier:
            classes = np.asarray(computed(client, da.unique(da.asarray(y)))[0], dtype=np.asarray(y[:0]).dtype) \
                if is_dask_collection(y) else np.unique(np.asarray(y))
            self._check_classes(classes)
            y = da.map_blocks(np.searchsorted, classes, da.asarray(y), dtype=np.int64) if is_dask_collection(y) \
                else np.searchsorted(classes, np.asarray(y))
        shard_rows = self.shard_rows or max(1, -(-int(X.shape[0]) // 8))
        with temporary_dataset(self.tmp_store, client, lambda where: ShardedDataset.from_dask(
                where, X, y, sample_weight, shard_rows=shard_rows, client=client, compressor=None)) as data:
            yield data, classes

    def _table_rows_to_fit(self, X: Any, client: Any) -> tuple[Any, FrameFeatures | None]:
        """A table with text or categorical columns as the rows of its features, encoded as
        :meth:`ShardedDataset.from_dataframe` encodes them (one-hot up to ``one_hot_max_levels``
        levels, else hashed into ``hash_features`` columns), with how (for predict): a pandas
        table here, a Dask one by the workers of ``client`` (a lazy dask array). Any other
        ``X`` as it is, with None."""
        if not is_table(X) or not text_columns(X):
            return X, None
        if is_dask_collection(X) and client is None:
            X = X.compute()  # no cluster: in this process, as other dask input without a client
        table, rows = decide_features(X, label=None, one_hot_max_levels=self.one_hot_max_levels,
                                      hash_features=self.hash_features, client=client)
        if table.sparse and not self._accepts_sparse:
            raise ConfigurationError(f"{type(self).__name__} takes dense rows, but hash_features={self.hash_features} "
                                     "makes a table's rows sparse: leave it None (text columns one-hot encoded, up to "
                                     "one_hot_max_levels levels each)")
        return (feature_rows(table, X, rows) if is_dask_collection(X) else table.features(X)), table

    def _record_features(self, names: list[str] | None, table: FrameFeatures | None) -> None:
        """``feature_names_in_`` (the names of the columns of X) and ``frame_features_`` (how
        a table's columns became them) of this fit; an earlier fit's go when this one has none."""
        for attribute, value in (("feature_names_in_", None if names is None else np.asarray(names, dtype=object)),
                                 ("frame_features_", table)):
            if value is not None:
                setattr(self, attribute, value)
            elif hasattr(self, attribute):
                delattr(self, attribute)

    def _record_table(self, table: FrameFeatures | None) -> None:
        """After a fit from arrays or a table: the table's transform and the names of the
        columns it makes, or none (the names of other input are scikit-learn's)."""
        if table is not None:
            self._record_features(table.feature_names, table)
        elif hasattr(self, "frame_features_"):  # from an earlier fit: not this data's
            del self.frame_features_

    def _check_classes(self, classes: np.ndarray | None) -> None:
        """A classifier needs two classes or more (checked before any data is written)."""
        if classes is not None and len(classes) < 2:
            raise InvalidDataError(
                f"{type(self).__name__} needs samples of at least 2 classes, but y holds only one class: "
                f"{classes.tolist()}"
            )

    def _decision(self, X: Any) -> np.ndarray:
        return self._checked(X) @ self.coef_.T + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # the replica methods' asynchrony makes runs differ; Sandblaster repeats bitwise
        tags.non_deterministic = self.solver not in solver_names() or not get_solver(self.solver).deterministic
        tags.input_tags.sparse = self._accepts_sparse
        return tags


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
    _check_number(C, "C", positive=True)
    if l1_ratio is not None:
        _check_l1_ratio(l1_ratio)
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


class LogisticRegression(ScoredOnTheCluster, ClassifierMixin, _ShardedEstimator):
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
                 learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> LogisticRegression:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``
        (the dataset's own weights for a ShardedDataset) and by its class's ``class_weight``."""
        self._check_params()
        strength, l1_share = _logistic_penalty(self.penalty, self.C, self.l1_ratio)
        if not (self.class_weight is None or self.class_weight == "balanced" or isinstance(self.class_weight, dict)):
            raise ConfigurationError(f"class_weight must be None, 'balanced' or a dict {{label: weight}}, "
                                     f"got {self.class_weight!r}")
        with self._fit_data(X, y, classifier=True, sample_weight=sample_weight) as (data, classes):
            scale = strength / self._penalty_scale(data)
            penalties = {"l2": (1.0 - l1_share) * scale, "l1": l1_share * scale, "fit_intercept": self.fit_intercept,
                         "class_weight": self._class_weights(data, classes)}
            model: LinearModel
            if len(classes) == 2:
                model = Logistic(data.n_features, **penalties)
            else:
                model = Softmax(data.n_features, len(classes), **penalties)
            result = self._solve(model, data, x0=self._warm_start_x0(model))
        W, b = model.unpack(result.x)
        self.classes_ = classes
        self.coef_ = np.atleast_2d(np.asarray(W).T).copy()
        self.intercept_ = np.atleast_1d(np.asarray(b, dtype=np.float64)).copy()
        return self

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


class _LeastSquaresEstimator(ScoredOnTheCluster, RegressorMixin, _ShardedEstimator):
    """Least squares with a penalty: what LinearRegression, ElasticNet and Lasso share (the
    model, the fit and predict). Each checks its penalty parameters in ``_check_penalty()``
    and gives the model's ``l2`` and ``l1`` for the data in ``_penalties(data)``."""

    _accepts_sparse = True

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> _LeastSquaresEstimator:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``
        (the dataset's own weights for a ShardedDataset): the weighted mean of the squared errors."""
        self._check_params()
        self._check_penalty()
        with self._fit_data(X, y, classifier=False, sample_weight=sample_weight) as (data, _):
            if len(data.y_shape) != 1:
                raise InvalidDataError(f"y must be 1-D, got shape {data.y_shape}")
            model = LeastSquares(data.n_features, fit_intercept=self.fit_intercept, **self._penalties(data))
            result = self._solve(model, data, x0=self._warm_start_x0(model))
        W, b = model.unpack(result.x)
        self.coef_ = np.asarray(W, dtype=np.float64).copy()
        self.intercept_ = float(b[0]) if self.fit_intercept else 0.0
        return self

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        return self._checked(X) @ self.coef_ + self.intercept_


class LinearRegression(_LeastSquaresEstimator):
    """Least squares with an optional l2 penalty (``alpha``, as scikit-learn's ``Ridge``).

    Minimises ``||y - X w - b||^2 + alpha ||w||^2``, solved as the equivalent
    ``mean_i (x_i w + b - y_i)^2 / 2 + (alpha / n) ||w||^2 / 2``. Parameters as
    :class:`LogisticRegression`'s.
    """

    def __init__(self, *, alpha: float = 0.0, fit_intercept: bool = True, max_iter: int = 200,
                 tol: float = 1e-6, warm_start: bool = False, solver: str = "sandblaster", standardize: bool = True,
                 learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    def _check_penalty(self) -> None:
        _check_number(self.alpha, "alpha")

    def _penalties(self, data: ShardedDataset) -> dict[str, float]:
        return {"l2": self.alpha / self._penalty_scale(data), "l1": 0.0}


class ElasticNet(_LeastSquaresEstimator):
    """Linear regression with scikit-learn's elastic-net penalty, trained on Dask.

    Minimises scikit-learn's ``||y - X w - b||^2 / (2 n) + alpha l1_ratio ||w||_1 +
    alpha (1 - l1_ratio) ||w||^2 / 2`` (intercept not penalised): the model
    :class:`~dasklbfgs.models.LeastSquares` with ``l1 = alpha l1_ratio`` and ``l2 = alpha
    (1 - l1_ratio)``, its loss already a mean, so the penalties do not scale with ``n``.
    The L1 part needs a solver that minimises one (Sandblaster, by OWL-QN); coefficients it
    removes are exactly 0.0. ``tol`` is the tolerance on the (pseudo-)gradient, ``max_iter``
    counts L-BFGS iterations; the other parameters are :class:`LogisticRegression`'s.
    """

    def __init__(self, alpha: float = 1.0, *, l1_ratio: float = 0.5, fit_intercept: bool = True,
                 max_iter: int = 200, tol: float = 1e-6, warm_start: bool = False, solver: str = "sandblaster",
                 standardize: bool = True, learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    def _l1_share(self) -> float:
        return self.l1_ratio

    def _check_penalty(self) -> None:
        _check_number(self.alpha, "alpha")
        _check_l1_ratio(self._l1_share())

    def _penalties(self, data: ShardedDataset) -> dict[str, float]:
        return {"l2": self.alpha * (1.0 - self._l1_share()), "l1": self.alpha * self._l1_share()}


class Lasso(ElasticNet):
    """:class:`ElasticNet` with ``l1_ratio=1``: scikit-learn's ``Lasso``, minimising
    ``||y - X w - b||^2 / (2 n) + alpha ||w||_1``."""

    def __init__(self, alpha: float = 1.0, *, fit_intercept: bool = True, max_iter: int = 200, tol: float = 1e-6,
                 warm_start: bool = False, solver: str = "sandblaster", standardize: bool = True,
                 learning_rate: float = _REPLICAS.default("learning_rate"),
                 batch_size: int = _REPLICAS.default("batch_size"), n_replicas: int = _REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None,
                 tmp_store: Any = None, random_state: int | None = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    def _l1_share(self) -> float:
        return 1.0


class ElasticNetCV(_LeastSquaresEstimator):
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
        _store_parameters(self, locals())

    # what _ShardedEstimator reads of the estimators that choose a solver: a path is Sandblaster's
    solver, warm_start, random_state = "sandblaster", False, None
    batch_size, n_replicas = _REPLICAS.default("batch_size"), _REPLICAS.default("n_replicas")

    def _l1_share(self) -> float:
        return self.l1_ratio

    def _check_penalty(self) -> None:
        share = self._l1_share()
        if not (isinstance(share, (int, float, np.floating)) and 0 < share <= 1):
            raise ConfigurationError(f"l1_ratio must be a number in (0, 1] (1: the lasso), got {share!r}")
        if self.cv is not None:
            check_int(self.cv, "cv")

    def _learning_rate(self) -> float:
        return _REPLICAS.default("learning_rate")  # (no replica method fits a path)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> ElasticNetCV:
        """Choose ``alpha`` on ``X, y`` (or a ShardedDataset ``X``) by cross-validation and fit there."""
        from dasklbfgs.selection.cv import cross_validate
        from dasklbfgs.selection.options import PathOptions
        from dasklbfgs.selection.path import PathPlan

        self._check_params()
        self._check_penalty()
        share = float(self._l1_share())
        own = isinstance(self.alphas, (int, np.integer)) and not isinstance(self.alphas, bool)
        penalties = PathOptions.from_mapping({"n_alphas": self.alphas if own else 100, "eps": self.eps})
        with self._fit_data(X, y, classifier=False, sample_weight=sample_weight) as (data, _):
            if len(data.y_shape) != 1:
                raise InvalidDataError(f"y must be 1-D, got shape {data.y_shape}")
            # the path varies l1 = alpha l1_ratio with l2 = alpha (1 - l1_ratio) kept in ratio
            model = LeastSquares(data.n_features, fit_intercept=self.fit_intercept, l1=share, l2=1.0 - share)
            plan = PathPlan.checked(model, penalties, self._options(model, data))
            given = None if own else _given_alphas(self.alphas)
            if given is not None:
                plan = plan.with_alphas(given * share)
            found = cross_validate(plan, data, cv=5 if self.cv is None else self.cv, stratified=False, metric=None,
                                   client=self.client)
        self.alphas_ = found.alphas / share if given is None else given  # the alphas given, exactly
        self.alpha_ = float(self.alphas_[found.best_index])
        if type(self) is not LassoCV:  # scikit-learn's LassoCV has none
            self.l1_ratio_ = share
        self.mse_path_ = found.scores["mse"].T
        W, b = model.unpack(found.coef)
        self.coef_ = np.asarray(W, dtype=np.float64).copy()
        self.intercept_ = float(b[0]) if self.fit_intercept else 0.0
        self.n_iter_ = int(found.refit.nit)  # type: ignore[assignment]  # an int, as scikit-learn's CV estimators
        return self


class LassoCV(ElasticNetCV):
    """:class:`ElasticNetCV` with ``l1_ratio=1``: scikit-learn's ``LassoCV``."""

    def __init__(self, *, eps: float = 1e-3, alphas: Any = 100, fit_intercept: bool = True,
                 max_iter: int = 200, tol: float = 1e-6, cv: int | None = None, standardize: bool = True,
                 solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, client: Any = None) -> None:
        _store_parameters(self, locals())

    def _l1_share(self) -> float:
        return 1.0


class MLPClassifier(ScoredOnTheCluster, ClassifierMixin, _ShardedEstimator):
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
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, random_state: int | None = None,
                 client: Any = None) -> None:
        _store_parameters(self, locals())

    def _learning_rate(self) -> float:
        return self.learning_rate_init

    def _model(self, n_features: int, n_classes: int, l2: float = 0.0) -> MLP:
        return MLP(n_features, tuple(self.hidden_layer_sizes), n_classes, activation=self.activation, l2=l2)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> MLPClassifier:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``."""
        self._check_params()
        _check_number(self.alpha, "alpha")
        self._model(1, 2)  # hidden_layer_sizes and activation, before any data is written
        with self._fit_data(X, y, classifier=True, sample_weight=sample_weight) as (data, classes):
            model = self._model(data.n_features, len(classes), self.alpha / self._penalty_scale(data))
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

    @on_the_cluster
    def predict_proba(self, X: Any) -> np.ndarray:
        model, params, X = self._params(X)
        return model.predict_proba(params, X)

    @on_the_cluster
    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(self.predict_proba(X))

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        model, params, X = self._params(X)
        return self.classes_[model.predict(params, X)]
