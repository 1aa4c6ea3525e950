"""The model contract: what every solver needs of a model, as a public ``typing.Protocol``.

A model of your own implements :class:`ModelContract`: seven members (eight for a
classifier), no base class needed. :func:`as_model` gives the solvers a
:class:`~dasklbfgs.models.base.Model` of it, with every optional capability (row-sparse
tables, compact sums, offsets, bounds, partitions) off. The shipped models subclass
:class:`~dasklbfgs.models.base.Model` for those capabilities; they meet the contract too.

:func:`dasklbfgs.testing.check_model` runs any model through the contract's checks.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.base import Model

__all__ = ["ModelContract", "as_model", "CONTRACT_MEMBERS", "TASKS"]

TASKS = ("classification", "regression", "reconstruction")


@runtime_checkable
class ModelContract(Protocol):
    """What every solver calls on a model. The objective is

        f(theta) = sum_i w_i loss(theta; x_i, y_i) / sum_i w_i + penalty(theta)

    and a model only ever gives *sums over rows*, so that sums from any split of the rows
    (portions on many workers, mini-batches) add up to the whole's.

    Members
    -------
    task
        ``"classification"`` (labels 0..K-1; the model also has ``predict_proba``),
        ``"regression"`` or ``"reconstruction"`` (unsupervised): it picks the metrics.
    n_features, n_params
        The width of a row of X, and of the flat float64 parameter vector.
    init_params(seed)
        The starting parameters (seed ``None``: the model's default start).
    loss_grad_sum(params, X, y, w=None)
        The loss summed over the rows of ``X`` (a float) and its gradient (``(n_params,)``),
        each row weighted by ``w`` when given. A model whose signature has no ``w``
        refuses weighted data.
    penalty(params)
        The penalty and its gradient (``0.0, zeros`` for none).
    predict(params, X)
        The predictions: labels, values or reconstructions, by ``task``.
    predict_proba(params, X)
        Classifiers only: the class probabilities, ``(n, K)``.
    """

    task: str

    @property
    def n_features(self) -> int: ...

    @property
    def n_params(self) -> int: ...

    def init_params(self, seed: int | None = None) -> np.ndarray: ...

    def loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray) -> tuple[float, np.ndarray]: ...

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]: ...

    def predict(self, params: np.ndarray, X: Any) -> np.ndarray: ...


#: The contract's members, in the order the docs list them (a classifier adds predict_proba).
CONTRACT_MEMBERS = ("task", "n_features", "n_params", "init_params", "loss_grad_sum", "penalty", "predict")


def as_model(model: Any) -> Model:
    """``model`` as the solvers take it: a :class:`Model` as it is; an object that meets
    :class:`ModelContract` wrapped in one; anything else a :class:`ConfigurationError`
    that names what it lacks."""
    if isinstance(model, Model):
        return model
    missing = [name for name in CONTRACT_MEMBERS if not hasattr(model, name)]
    if getattr(model, "task", None) == "classification" and not hasattr(model, "predict_proba"):
        missing.append("predict_proba")
    if missing:
        raise ConfigurationError(f"{type(model).__name__} is not a model: it lacks {', '.join(missing)} of the model "
                                 "contract (dasklbfgs.models.ModelContract: task, n_features, n_params, init_params, "
                                 "loss_grad_sum, penalty, predict, and predict_proba for a classifier)")
    if model.task not in TASKS:
        raise ConfigurationError(f"{type(model).__name__}.task must be one of {TASKS}, got {model.task!r}")
    return ContractModel(model)


def _takes_weights(loss_grad_sum: Any) -> bool:
    """Whether ``loss_grad_sum(params, X, y, w)`` can be called with ``w``."""
    try:
        parameters = list(inspect.signature(loss_grad_sum).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


class ContractModel(Model):
    """A :class:`Model` made of an object that meets :class:`ModelContract` (see :func:`as_model`)."""

    name = "contract"

    def __init__(self, model: Any) -> None:
        self.model = model
        self.task = model.task  # type: ignore[misc]
        self.accepts_weights = _takes_weights(model.loss_grad_sum)  # type: ignore[misc]

    @property
    def n_features(self) -> int:
        return int(self.model.n_features)

    @property
    def n_params(self) -> int:
        return int(self.model.n_params)

    @property
    def n_classes(self) -> int | None:
        return getattr(self.model, "n_classes", None)

    def init_params(self, seed: int | None = None) -> np.ndarray:
        return np.asarray(self.model.init_params(seed), dtype=np.float64)

    def loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        loss, grad = self.model.loss_grad_sum(params, X, y) if w is None else self.model.loss_grad_sum(params, X, y, w)
        return float(loss), np.asarray(grad, dtype=np.float64)

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self.model.penalty(params)
        return float(value), np.asarray(grad, dtype=np.float64)

    def predict(self, params: np.ndarray, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict(params, X))

    def predict_proba(self, params: np.ndarray, X: Any) -> np.ndarray:
        return np.asarray(self.model.predict_proba(params, X))

    def _check_labels(self, data: Any) -> None:
        if self.task == "classification" and self.n_classes is not None:
            self._check_class_labels(data, int(self.n_classes))

    def _config(self) -> dict[str, Any]:
        return {"model": self.model}

    def __repr__(self) -> str:
        return repr(self.model)
