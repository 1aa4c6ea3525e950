"""What every objective shares: the flat parameter vector, sums over rows, data checks.

A model is a function of one flat float64 parameter vector. Solvers only ever ask it for
*sums over rows* (:meth:`Model.loss_grad_sum`), because sums from any split of the rows
(portions on different workers, mini-batches) add up exactly; one call of
:meth:`Model.objective_from_sums` then turns the added sums into the mean objective and its
gradient. With sample weights ``w`` the sums are weighted (``sum_i w_i loss_i``) and the
mean is over the total weight instead of the row count. For most models the sums are the
loss and the gradient of the loss, and the objective is their mean plus the penalty. A model
whose objective is not a mean over rows (the sparse autoencoder's penalty depends on the
mean hidden activation) returns extra sufficient statistics after the gradient: ``n_sums``
can exceed ``n_params``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models._kernels import softmax_rows

__all__ = ["Model", "Scored", "SoftmaxOutput", "check_l2", "first_bad_label"]


class Scored(NamedTuple):
    """What an evaluation reads of a block of rows (:meth:`Model.scored`)."""

    #: the rows' loss sum (weighted as in the training sums)
    loss: float
    #: the row sums the objective's value needs beyond ``loss`` (:meth:`Model.objective_value`),
    #: or None when the value is the loss's mean plus the penalty
    sums: np.ndarray | None
    #: the class probabilities (n, K) of a classifier; the predictions otherwise
    outputs: np.ndarray
    #: a classifier's predicted classes (None for other tasks)
    predicted: np.ndarray | None


def check_l2(l2: Any, name: str = "l2") -> float:
    try:
        value = float(l2)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a non-negative number, got {l2!r}") from None
    if not np.isfinite(value) or value < 0:
        raise ConfigurationError(f"{name} must be a non-negative finite number, got {l2!r}")
    return value


def first_bad_label(data: Dataset, bad: Any) -> str:
    """Where the first label ``bad`` marks is, for an error message: ``"; the first is y = v in
    shard s at row r"`` (read shard by shard, labels only: the schema knows only the range)."""
    found = data.first_label(bad) if hasattr(data, "first_label") else None
    if found is None:
        return ""
    shard, row, value = found
    return f"; the first is y = {value:g} in shard {shard} at row {row}"


class Model:
    """Base class: subclasses define the layout, the row sums, the penalty and prediction.

    ``task`` is ``"classification"`` (labels 0..K-1; ``predict_proba``), ``"regression"``
    or ``"reconstruction"`` (unsupervised: y is ignored); it picks the held-out metrics.
    """

    name: ClassVar[str]
    task: ClassVar[str] = "classification"
    #: Whether :meth:`loss_grad_sum` and prediction take a ``scipy.sparse`` X (CSR rows of a
    #: sparse dataset); other models refuse sparse datasets in :meth:`check_data`.
    accepts_sparse: ClassVar[bool] = False
    #: Whether :meth:`loss_grad_sum` takes per-row weights ``w``; other models refuse
    #: weighted datasets in :meth:`check_data`.
    accepts_weights: ClassVar[bool] = False
    #: Whether the row sums and prediction take per-row offsets ``offset`` (a known term of
    #: each row's linear predictor); other models refuse datasets with offsets.
    accepts_offsets: ClassVar[bool] = False
    if TYPE_CHECKING:  # read-only to a model's users: a subclass sets them in __init__ or computes them
        @property
        def n_features(self) -> int: ...

        @property
        def n_params(self) -> int: ...
    else:
        n_features: int
        n_params: int
    #: The parameters' row table (word embeddings) whose rows a batch touches sparsely, or
    #: None. With one, Downpour pushes and fetches only the rows batches touch.
    row_table: Any = None
    #: What the command line and pipelines may set when they build the model for a dataset
    #: (:meth:`for_dataset`): its shape options (fields of
    #: :class:`~dasklbfgs.models.registry.ModelOptions`), and whether it is linear (takes
    #: ``l1`` and ``fit_intercept``) and takes ``class_weight``.
    shape_options: ClassVar[tuple[str, ...]] = ()
    linear: ClassVar[bool] = False
    takes_class_weight: ClassVar[bool] = False

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> Model:
        """This model sized for ``data`` (its features, classes or vocabulary, from its
        schema) with these penalties and ``shape`` options (those :attr:`shape_options` names;
        :func:`~dasklbfgs.models.registry.model_for_dataset` checks which apply)."""
        raise NotImplementedError

    @property
    def starts_at_zero(self) -> bool:
        """Whether :meth:`init_params` (no seed) is all zeros, so that a solver may make the start
        where its vectors live without forming it (Sandblaster's sharded state); False here."""
        return False

    @property
    def n_sums(self) -> int:
        """Length of the sum vector :meth:`loss_grad_sum` returns (the gradient first)."""
        return self.n_params

    # -- what every solver calls; subclasses implement these ------------------------------

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """Starting parameters (zeros, or a seeded random initialisation for neural models)."""
        raise NotImplementedError

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Summed loss over the rows of ``X`` and the ``n_sums`` sums (gradient first), each
        row's terms weighted by ``w`` when given (models with :attr:`accepts_weights`)."""
        raise NotImplementedError

    def sums_of(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                w: np.ndarray | None = None, offset: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """:meth:`loss_grad_sum`, handing it ``w`` only when there are weights and ``offset``
        only when there are offsets: a model that takes neither (a ``loss_grad_sum`` of three
        arguments) still trains on data without them. What every caller of the row sums
        goes through."""
        if offset is not None:
            self.check_offsets_taken()
            return self.loss_grad_sum(params, X, y, w, offset=offset)  # type: ignore[call-arg]
        return self.loss_grad_sum(params, X, y) if w is None else self.loss_grad_sum(params, X, y, w)

    def check_offsets_taken(self) -> None:
        """Raise :class:`ModelDataMismatchError` unless this model takes offsets."""
        if not self.accepts_offsets:
            raise ModelDataMismatchError(
                f"{type(self).__name__} does not take offsets; the single-output linear models do "
                "(least_squares, logistic and the GLMs)")

    def portion_loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                              w: np.ndarray | None = None, offset: np.ndarray | None = None) -> tuple[float, Any]:
        """:meth:`loss_grad_sum` in the form a Sandblaster portion task sends it: dense
        here; a model whose sums on some blocks are zero outside a few coordinates returns
        a :class:`~dasklbfgs.models.sums.SparseSum` for them (the same numbers, added with
        :func:`~dasklbfgs.models.sums.add_sum_parts`)."""
        return self.sums_of(params, X, y, w, offset)

    def compact_positions(self, X: Any) -> np.ndarray | None:
        """The parameters that the portion sums of the rows ``X`` (a cached shard, or any
        range of its rows) read, and the only coordinates where their gradient sum may be
        non-zero: sorted positions in the parameters, for :meth:`compact_loss_grad_sum`.
        ``None`` (the default): the portions read every parameter."""
        return None

    def compact_loss_grad_sum(self, local_params: np.ndarray, X: Any, y: np.ndarray,
                              w: np.ndarray | None = None, offset: np.ndarray | None = None
                              ) -> tuple[float, np.ndarray]:
        """:meth:`portion_loss_grad_sum` of rows ``X`` given only the parameters at
        :meth:`compact_positions` of them (``local_params``, in that order): the loss sum and
        the gradient sum's values at those positions, the same bits. What a worker computes
        when it is sent just the parameters its shard reads."""
        raise NotImplementedError(f"{type(self).__name__} has no compact portion sums")

    def check_workers(self, client: Any) -> None:
        """Raise :class:`~dasklbfgs.errors.ConfigurationError` when a worker of ``client``
        cannot compute this model's sums, before a run sends them work (a model whose code
        the workers import: a torch module named by its import path). Nothing here."""
        return None

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        """The penalty term of the objective and its gradient."""
        raise NotImplementedError

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(lower, upper)``, one of each per parameter (-inf, inf: unbounded), that the
        parameters must stay within, or ``None`` when the model has none (the default)."""
        return None

    def l1_weights(self) -> np.ndarray | None:
        """Per-parameter weights of an L1 term ``sum_j w_j |theta_j|`` that the optimizer adds
        to the objective (OWL-QN), or ``None`` when the model has none (the default)."""
        return None

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predictions for the rows of ``X`` (labels, values or reconstructions, by ``task``)."""
        raise NotImplementedError

    def row_table_for(self, data: Dataset) -> Any:
        """The row table whose rows a batch of ``data`` touches sparsely (None: none): the
        model's :attr:`row_table`, or one that only some data makes sparse."""
        return self.row_table

    def touched_rows(self, X: np.ndarray) -> np.ndarray:
        """Rows of the row table (:meth:`row_table_for`) that the rows of ``X`` read."""
        raise NotImplementedError(f"{type(self).__name__} has no row table")

    def objective_from_sums(self, params: np.ndarray, loss_sum: float, sums: np.ndarray, n: float
                            ) -> tuple[float, np.ndarray]:
        """Mean objective over ``n`` rows and its gradient, from row sums added over any split."""
        grad = sums[: self.n_params] / n
        return loss_sum / n + self.add_penalty(params, grad), grad

    def add_penalty(self, params: np.ndarray, grad: np.ndarray) -> float:
        """Add the penalty's gradient at ``params`` to ``grad`` in place; return the penalty.
        A model whose penalty's gradient is cheap to form in pieces overrides this, so that no
        parameter-length temporary is made."""
        penalty, penalty_grad = self.penalty(params)
        grad += penalty_grad
        return penalty

    def objective_value(self, params: np.ndarray, loss_sum: float, sums: np.ndarray | None, n: float) -> float:
        """The mean objective over ``n`` rows from an evaluation's sums (:attr:`Scored.sums`)."""
        if sums is None:
            return loss_sum / n + self.penalty(params)[0]
        return self.objective_from_sums(params, loss_sum, sums, n)[0]

    def outputs(self, params: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:attr:`Scored.outputs` and :attr:`Scored.predicted` of the rows of ``X``."""
        if self.task == "classification":
            return self.predict_proba(params, X), self.predict(params, X)  # type: ignore[attr-defined]
        return self.predict(params, X), None

    def scored(self, params: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray | None = None,
               offset: np.ndarray | None = None) -> Scored:
        """What an evaluation needs of the rows of ``X``: their loss, the sums the objective's
        value needs, the model's outputs. Here the training sums and :meth:`outputs`; a model
        that can form all of it from one pass over the rows (and takes offsets) overrides this."""
        loss, sums = self.sums_of(params, X, y, w, offset)
        return Scored(float(loss), np.asarray(sums, dtype=np.float64), *self.outputs(params, X))

    def objective(self, params: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray | None = None, *,
                  n: float | None = None, offset: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Objective and gradient over all of ``X`` in one process (a reference path, and a
        mini-batch's): the loss sum (weighted by ``w``; with the rows' ``offset``) over ``n``,
        by default the row count, or the total weight ``w.sum()``."""
        loss, sums = self.sums_of(params, X, y, w, offset)
        if n is None:
            n = X.shape[0] if w is None else float(np.sum(w, dtype=np.float64))
        return self.objective_from_sums(params, loss, sums, n)

    def check_params(self, params: Any, name: str = "x0") -> np.ndarray:
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (self.n_params,):
            raise ModelDataMismatchError(
                f"{name} must have shape ({self.n_params},) for {self!r}, got {params.shape}"
            )
        if not np.all(np.isfinite(params)):
            bad = int(np.flatnonzero(~np.isfinite(params))[0])
            raise ModelDataMismatchError(f"{name} is not finite: {name}[{bad}] = {params[bad]}")
        return params

    # -- data checks ----------------------------------------------------------------------

    def check_data(self, data: Dataset) -> None:
        """Raise :class:`ModelDataMismatchError` when ``data`` does not fit this model."""
        self.check_features(data)
        if getattr(data, "is_weighted", False) and not self.accepts_weights:
            raise ModelDataMismatchError(
                f"{type(self).__name__} does not take sample weights, but the dataset at {data.url!r} has "
                "them (its 'w' array); train it on unweighted data"
            )
        if len(data.y_shape) != 1:
            raise ModelDataMismatchError(
                f"{type(self).__name__} needs 1-D y, but y at {data.url!r} has shape {data.y_shape}"
            )
        self._check_labels(data)

    def check_features(self, data: Dataset) -> None:
        """Raise :class:`ModelDataMismatchError` when this model cannot read the rows of
        ``data`` (what predicting needs; training checks the labels and weights too)."""
        if getattr(data, "is_sparse", False) and not self.accepts_sparse:
            raise ModelDataMismatchError(
                f"{type(self).__name__} takes dense data, but X at {data.url!r} is sparse; the linear models "
                "(least_squares, logistic, softmax and the GLMs) train on sparse data"
            )
        if data.n_features != self.n_features:
            raise ModelDataMismatchError(
                f"{self!r} expects {self.n_features} features but the dataset at "
                f"{data.url!r} has {data.n_features}"
            )
        if getattr(data, "has_offsets", False) and not self.accepts_offsets:
            raise ModelDataMismatchError(
                f"{type(self).__name__} does not take offsets, but the dataset at {data.url!r} has them (its "
                "'offset' array); the single-output linear models do (least_squares, logistic and the GLMs)")

    def _check_labels(self, data: Dataset) -> None:
        return None

    def _check_class_labels(self, data: Dataset, n_classes: int) -> None:
        low, high = data.label_range
        integral = data.schema.get("y_integral", data.label_counts is not None)
        if not integral or low < 0 or high > n_classes - 1:
            raise ModelDataMismatchError(
                f"{type(self).__name__} needs integer labels in 0..{n_classes - 1}, but y at "
                f"{data.url!r} ranges over [{low:g}, {high:g}]"
                + ("" if integral else " and is not integer-valued")
                + first_bad_label(data, lambda y: (y < 0) | (y > n_classes - 1) | (np.mod(y, 1) != 0))
            )

    # -- identity ---------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        """The constructor's keyword arguments: ``type(self)(**self._config())`` is equal."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._config() == other._config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, repr(self._config())))


class SoftmaxOutput:
    """Prediction and label checks for models whose ``decision_function(params, X)`` gives
    class scores (n, K), labels 0..n_classes-1."""

    decision_function: Any
    if TYPE_CHECKING:  # read-only, as Model's n_features and n_params
        @property
        def n_classes(self) -> int: ...
    else:
        n_classes: int
    _check_class_labels: Any

    def predict_proba(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        return softmax_rows(self.decision_function(params, X))

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        return np.argmax(self.decision_function(params, X), axis=1)

    def outputs(self, params: np.ndarray, X: np.ndarray, offset: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """The probabilities and the classes from one computation of the class scores (no
        offsets: :attr:`Model.accepts_offsets` is False for them)."""
        return self.outputs_of(self.decision_function(params, X))

    def outputs_of(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The probabilities and the predicted classes of class scores ``z``."""
        return softmax_rows(z), np.argmax(z, axis=1)

    def _check_labels(self, data: Dataset) -> None:
        self._check_class_labels(data, self.n_classes)
