"""What the estimators do once fitted: predict and score, on any input they take.

numpy, pandas and scipy.sparse input are computed in this process, as scikit-learn's; a
:class:`~dasklbfgs.data.ShardedDataset`, a dask array or a dask DataFrame by the workers, a
block of whole rows at a time: the predictions come back as a lazy dask array (as dask-ml's
``ParallelPostFit``), ``score`` as the number alone.

A fit on a table with text columns, or on a dataset written from one
(:meth:`~dasklbfgs.data.ShardedDataset.from_dataframe`), records how the table's columns
became features: ``frame_features_``, the
:class:`~dasklbfgs.data.frame_features.FrameFeatures` the ingest decided (for a dataset, the
one in its schema). The tables given to predict and score are turned into the same columns
by it, the one transform the ingest applies (unseen levels set no one-hot column, hashed
columns are hashed as written): a pandas table here, a Dask one partition by partition on
the workers.

What is computed at once (the rows of each partition of a dask DataFrame, the scores) is
computed by the estimator's ``client``, else the active one: the client its fit uses.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dasklbfgs.data import ShardedDataset
from dasklbfgs.data._client import active_client
from dasklbfgs.data.dask_input import is_dask_collection
from dasklbfgs.data.frame_input import feature_rows, is_table
from dasklbfgs.errors import ConfigurationError, InvalidDataError, ModelDataMismatchError

if TYPE_CHECKING:
    from dasklbfgs.data.frame_features import FrameFeatures

__all__ = ["FeatureRows", "PostFit", "ScoredOnTheCluster", "check_rows", "computed", "on_the_cluster",
           "partition_rows"]


@dataclass(frozen=True)
class FeatureRows:
    """Rows that are the fitted features already (a dataset's, a table's made by the
    transform the fit recorded, or a probe's zeros): the prediction methods take them as
    they are, without scikit-learn's checks of the input's columns."""

    rows: Any


def on_the_cluster(method: Callable[..., np.ndarray]) -> Callable[..., Any]:
    """``method`` (predict, predict_proba, ...) for numpy, pandas and scipy input as
    scikit-learn's (a table through the transform the fit recorded, if any); for a
    :class:`ShardedDataset` or a dask array or DataFrame, a lazy dask array computed by the
    workers (:meth:`PostFit._mapped`)."""

    @functools.wraps(method)
    def on_the_cluster(self: PostFit, X: Any) -> Any:
        if isinstance(X, ShardedDataset) or is_dask_collection(X):
            return self._mapped(X, method.__name__)
        return method(self, self._table_rows(X))

    return on_the_cluster


def computed(client: Any, *collections: Any) -> tuple[Any, ...]:
    """The values of the dask ``collections``, computed by ``client`` (None: dask's default)."""
    import dask

    return dask.compute(*collections, **({} if client is None else {"scheduler": client}))


def partition_rows(frame: Any, client: Any) -> tuple[int, ...]:
    """The rows of each partition of a dask DataFrame or Series, counted by ``client``."""
    (lengths,) = computed(client, frame.map_partitions(len))
    return tuple(int(n) for n in lengths)


def check_rows(shape: tuple[Any, ...]) -> None:
    """Refuse an ``X`` that is not 2-D (samples x features), naming its shape."""
    if len(shape) != 2:
        advice = "; pass 2-D rows: X.reshape(-1, 1) makes each value a row of one feature" if len(shape) == 1 else ""
        raise InvalidDataError(f"X must be 2-D (samples x features), got shape {shape}{advice}")


def dask_rows(X: Any, what: str, client: Any) -> Any:
    """``X`` (a dask array, DataFrame or Series) as a dask array whose chunks hold whole
    rows (a DataFrame's partitions counted by ``client``)."""
    if hasattr(X, "to_dask_array"):  # a dask DataFrame or Series
        return X.to_dask_array(lengths=partition_rows(X, client))
    if not hasattr(X, "map_blocks"):
        raise ConfigurationError(f"{what} must be a dask array or DataFrame here, got {type(X).__name__}")
    return X if X.ndim == 1 else X.rechunk({1: -1})


def _of_features(method: Callable[[Any], np.ndarray], block: Any) -> np.ndarray:
    """Task: ``method`` of a block of rows that are the fitted features already."""
    return method(FeatureRows(block))


class PostFit:
    """Predicting from any input, for the estimators (see the module docstring)."""

    #: whether fit and predict take scipy.sparse X (written as a sparse dataset: CSR shards)
    _accepts_sparse = False
    client: Any
    n_features_in_: int
    frame_features_: FrameFeatures

    def _client(self) -> Any:
        """The estimator's ``client``, else the active one (None: there is none)."""
        return self.client if self.client is not None else active_client()

    def _to_ship(self) -> PostFit:
        """The estimator as its tasks carry it to the workers: a copy without the client
        (which does not pickle, and which the workers have no use for)."""
        shipped = copy.copy(self)
        shipped.client = None
        return shipped

    def _checked(self, X: Any) -> Any:
        """``X`` to predict from, once fitted, checked against the fitted features (rows
        that are the features already as they are)."""
        check_is_fitted(self)
        if isinstance(X, FeatureRows):
            return X.rows
        return validate_data(self, X, reset=False, dtype=[np.float64, np.float32],
                             accept_sparse="csr" if self._accepts_sparse else False)

    def _recorded_transform(self, X: Any) -> FrameFeatures | None:
        """The transform the fit recorded when ``X`` is a table to apply it to, else None;
        a table without one of the columns it reads is refused, naming them."""
        features = getattr(self, "frame_features_", None)
        if features is None or not is_table(X):
            return None
        if missing := features.missing(X.columns):
            raise InvalidDataError(
                f"X has no column(s) {missing}; {type(self).__name__} was fitted on a table whose columns "
                f"{features.columns} became its features, and a table to predict from needs them all "
                f"(found {list(map(str, X.columns))})")
        return features

    def _table_rows(self, X: Any) -> Any:
        """A pandas table as the rows of its features, by the transform the fit recorded;
        other input as it is."""
        features = self._recorded_transform(X)
        return X if features is None else FeatureRows(features.features(X))

    def _dask_features(self, X: Any) -> tuple[Any, bool]:
        """The rows of a dataset or of dask input, as a lazy dask array of whole rows, and
        whether they are the fitted features already (else they are checked a block at a
        time as scikit-learn checks numpy input)."""
        if isinstance(X, ShardedDataset):
            if X.is_sparse and not self._accepts_sparse:
                raise ModelDataMismatchError(f"{type(self).__name__} takes dense rows, but X at {X.url!r} is sparse; "
                                             "the linear estimators predict on sparse datasets")
            return X.to_dask()[0], True
        client = self._client()
        features = self._recorded_transform(X)
        if features is not None:
            return feature_rows(features, X, partition_rows(X, client)), True
        return dask_rows(X, "X", client), False

    def _mapped(self, X: Any, method: str) -> Any:
        """``method`` over the rows of ``X`` (see :func:`on_the_cluster`), lazily."""
        check_is_fitted(self)
        rows, are_features = self._dask_features(X)
        check_rows(rows.shape)
        if rows.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {rows.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        compute = getattr(self._to_ship(), method)
        probe = compute(FeatureRows(np.zeros((1, self.n_features_in_), dtype=rows.dtype)))  # what a block gives back
        meta = np.empty((0, *probe.shape[1:]), dtype=probe.dtype)
        block_method = functools.partial(_of_features, compute) if are_features else compute
        if probe.ndim == 1:
            return rows.map_blocks(block_method, drop_axis=1, dtype=probe.dtype, meta=meta)
        return rows.map_blocks(block_method, chunks=(rows.chunks[0], probe.shape[1:]), dtype=probe.dtype, meta=meta)


def share_explained(unexplained: float, spread: float) -> float:
    """``1 - unexplained / spread`` (R^2, D^2), scikit-learn's 1 or 0 when there is no spread."""
    if spread == 0:
        return 1.0 if unexplained == 0 else 0.0
    return float(1.0 - unexplained / spread)


class ScoredOnTheCluster(PostFit):
    """``score`` for the estimators, first in their bases (before scikit-learn's mixins):
    scikit-learn's for numpy and pandas input, computed by the workers for a dataset or
    dask input."""

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """scikit-learn's score (accuracy for classifiers, R^2 for regressors, D^2 for the
        GLMs: the share of the deviance explained); for a
        ShardedDataset (its own labels and weights) or dask input, computed by the workers
        and the estimator's client."""
        if not (isinstance(X, ShardedDataset) or is_dask_collection(X)):
            return float(super().score(X, y, sample_weight=sample_weight))  # type: ignore[misc]
        import dask.array as da

        client = self._client()
        if isinstance(X, ShardedDataset):
            if y is not None or sample_weight is not None:
                raise ConfigurationError("a ShardedDataset holds its labels and weights: score(dataset) takes no y "
                                         "or sample_weight")
            y, sample_weight = X.to_dask()[1], X.weights_to_dask()
        else:
            if y is None:
                raise ConfigurationError("score(X, y) needs y for dask input (only a ShardedDataset holds its labels)")
            y = dask_rows(y, "y", client) if is_dask_collection(y) else da.from_array(np.asarray(y))
            if y.ndim == 2 and y.shape[1] == 1:  # a column, as scikit-learn's column_or_1d takes it
                y = y[:, 0]
            if y.ndim != 1:
                raise ConfigurationError(f"y must be 1-D, got shape {y.shape}")
            if sample_weight is not None:
                sample_weight = (dask_rows(sample_weight, "sample_weight", client) if is_dask_collection(sample_weight)
                                 else da.from_array(np.asarray(sample_weight, dtype=np.float64)))
        predicted = self.predict(X)  # type: ignore[attr-defined]
        if isinstance(self, ClassifierMixin):
            (accuracy,) = computed(client, da.average(predicted == y, weights=sample_weight))
            return float(accuracy)
        w = da.ones_like(y, dtype=np.float64) if sample_weight is None else sample_weight
        mean = (w * y).sum() / w.sum()
        unexplained, spread = computed(client, (w * self._deviance(y, predicted)).sum(),
                                       (w * self._deviance(y, mean)).sum())
        return share_explained(unexplained, spread)

    def _deviance(self, y: Any, predicted: Any) -> Any:
        """A regressor's per-row deviance of ``predicted`` from ``y`` (numpy or dask arrays):
        the squared error, so that the score above is R^2 (the GLMs': their family's
        deviance, and the score D^2)."""
        return (y - predicted) ** 2
