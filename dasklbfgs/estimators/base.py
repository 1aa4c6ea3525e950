"""What the estimators share: scikit-learn's names translated into the solvers' options,
every kind of input turned into a dataset to fit, the fitted bookkeeping."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, validate_data

from dasklbfgs import errors
from dasklbfgs._checks import check_int
from dasklbfgs._fit_stores import temporary_dataset
from dasklbfgs._post_fit import PostFit, check_rows, computed, on_the_cluster, partition_rows
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.constructors import unpack_xarray
from dasklbfgs.data.dask_input import is_dask_collection
from dasklbfgs.data.frame_features import FrameFeatures
from dasklbfgs.data.frame_input import check_encoding, decide_features, feature_rows, is_table, text_columns
from dasklbfgs.errors import ConfigurationError, InvalidDataError
from dasklbfgs.models.base import Model
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.options import Options
from dasklbfgs.solvers import DownpourOptions, get_solver, minimize, solver_names

REPLICAS = DownpourOptions  # the replica options' declared defaults, the estimators' own


def check_number(value: Any, name: str, *, positive: bool = False) -> None:
    """Refuse a parameter that is not a number > 0 (``positive``) or >= 0."""
    if not (isinstance(value, (int, float, np.floating)) and (value > 0 if positive else value >= 0)):
        raise ConfigurationError(f"{name} must be {'a positive number' if positive else 'a number >= 0'}, "
                                 f"got {value!r}")


def check_l1_ratio(value: Any) -> None:
    """scikit-learn's range for ``l1_ratio``: a number in [0, 1]."""
    if not (isinstance(value, (int, float, np.floating)) and 0 <= value <= 1):
        raise ConfigurationError(f"l1_ratio must be a number in [0, 1] (0: L2 penalty, 1: L1, between: "
                                 f"elastic net), got {value!r}")


def as_array(values: Any, client: Any) -> Any:
    """A dask DataFrame or Series as a dask array (its partitions' rows counted by
    ``client``); other ``values`` as they are."""
    return values.to_dask_array(lengths=partition_rows(values, client)) if hasattr(values, "to_dask_array") else values


def store_parameters(estimator: BaseEstimator, values: dict[str, Any]) -> None:
    """What an estimator's ``__init__`` does, as scikit-learn asks: store each parameter."""
    for name, value in values.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


class ModelClassifier:
    """``predict_proba``, ``predict_log_proba`` and ``predict`` of a classifier whose fitted
    model gives its outputs: ``_fitted(X)`` returns the model, its parameters and ``X``
    checked; ``classes_`` maps the model's classes 0..K-1 back to the labels."""

    classes_: np.ndarray
    if TYPE_CHECKING:  # each classifier's own
        def _fitted(self, X: Any) -> tuple[Any, np.ndarray, Any]: ...

    @on_the_cluster
    def predict_proba(self, X: Any) -> np.ndarray:
        model, params, X = self._fitted(X)
        return model.predict_proba(params, X)

    @on_the_cluster
    def predict_log_proba(self, X: Any) -> np.ndarray:
        return np.log(self.predict_proba(X))

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        model, params, X = self._fitted(X)
        return self.classes_[model.predict(params, X)]


class ShardedEstimator(PostFit, BaseEstimator):
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
        check_number(self.tol, "tol")
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
        if getattr(self, "early_stopping", False):  # scikit-learn's: on held-out rows of the training data
            if not isinstance(self.early_stopping, (bool, np.bool_)):
                raise ConfigurationError(f"early_stopping must be True or False, got {self.early_stopping!r}")
            per_epoch = max(1, data.n_samples // self.batch_size)  # the replica methods score about every epoch
            translated |= {"early_stopping": True, "validation_fraction": self.validation_fraction,
                           "n_iter_no_change": self.n_iter_no_change, "min_improvement": self.tol,
                           "eval_every": 1 if solver.unit == "iteration" else per_epoch}
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
                "learning_rate, batch_size, n_replicas, random_state, early_stopping): pass those instead"
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
        X, y, _, sample_weight, offset = unpack_xarray(X, y, sample_weight=sample_weight)  # or the Dataset's 'w'
        if offset is not None:
            raise ConfigurationError("the xarray.Dataset holds offsets: write it as a dataset (ShardedDataset.create) "
                                     "and fit from that, where offsets are kept with their rows")
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

        X, y, sample_weight = (as_array(a, client) for a in (X, y, sample_weight))
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


