"""scikit-learn estimators of a user's torch module (:class:`~dasklbfgs.models.TorchModel`),
in the manner of skorch: ``TorchClassifier`` and ``TorchRegressor`` fit inside
``GridSearchCV`` and pipelines, trained by any solver on Dask."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from dasklbfgs._post_fit import ScoredOnTheCluster, on_the_cluster
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.estimators.base import REPLICAS, ModelClassifier, ShardedEstimator, store_parameters
from dasklbfgs.models.torch_model import TorchModel

__all__ = ["TorchClassifier", "TorchRegressor"]


class _TorchEstimator(ShardedEstimator):
    """What the torch estimators share: the model from the parameters, the fit, the outputs.

    Parameters
    ----------
    module
        An ``nn.Module``, a zero-argument factory of one, or its import path
        (:class:`~dasklbfgs.models.TorchModel`).
    loss, input_shape, l2
        :class:`~dasklbfgs.models.TorchModel`'s: the per-row loss, the shape of one row as
        the module takes it, the weight decay on the mean loss.
    solver
        Any registered solver: ``"sandblaster"`` (full-batch L-BFGS; ``max_iter``
        iterations, ``tol`` its gradient tolerance) or a replica method (``"downpour"``,
        ``"sync"``, ...: ``max_iter`` epochs at ``learning_rate``, mini-batches of
        ``batch_size`` on ``n_replicas`` replicas).
    solver_options
        Any other option of the solver, by its name.
    random_state
        Seeds the module's initialisation (``torch.manual_seed``; a module object keeps its own
        weights when it is None) and the batch order.

    Fitted attributes: ``model_`` (the :class:`~dasklbfgs.models.TorchModel`), ``params_``
    (its parameter vector), ``module_`` (an ``nn.Module`` with the fitted weights),
    ``n_iter_``, ``loss_curve_``, ``n_features_in_``.
    """

    _task = "regression"

    def _learning_rate(self) -> float:
        return self.learning_rate

    def _torch_model(self) -> TorchModel:
        if self.module is None:
            raise ConfigurationError(f"{type(self).__name__} needs module=: an nn.Module, a factory of one, or its "
                                     "import path 'package.module:factory'")
        model = TorchModel(self.module, loss=self.loss, input_shape=self.input_shape, l2=self.l2,
                           task=None if isinstance(self.loss, str) else self._task)
        if model.task != self._task:
            raise ConfigurationError(f"loss {self.loss!r} is for {model.task}; {type(self).__name__} fits "
                                     f"{self._task}")
        return model

    def _fit_model(self, model: TorchModel, data: Any) -> None:
        # random_state seeds a factory (None: seed 0); a module object starts from its own weights
        # unless random_state asks for a fresh initialisation
        result = self._solve(model, data, x0=model.init_params(self.random_state))
        self.model_, self.params_ = model, np.asarray(result.x, dtype=np.float64)
        self.module_ = model.to_module(self.params_)

    def _fitted(self, X: Any) -> tuple[TorchModel, np.ndarray, Any]:
        return self.model_, self.params_, self._checked(X)


class TorchClassifier(ScoredOnTheCluster, ModelClassifier, ClassifierMixin, _TorchEstimator):
    """A classifier of a torch module: its outputs are the classes' logits (``cross_entropy``,
    one output per class) or one logit (``bce_with_logits``, two classes). Any labels; the
    module sees them as 0..K-1 in sorted order (``classes_``).

    The parameters are :class:`_TorchEstimator`'s.

    Examples
    --------
    >>> from torch import nn
    >>> from sklearn.model_selection import GridSearchCV
    >>> net = lambda: nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    >>> search = GridSearchCV(TorchClassifier(net, max_iter=50), {"l2": [1e-4, 1e-2]}, cv=3)
    """

    _task = "classification"

    def __init__(self, module: Any = None, *, loss: Any = "cross_entropy", input_shape: Any = None, l2: float = 0.0,
                 max_iter: int = 100, tol: float = 1e-5, solver: str = "sandblaster", learning_rate: float = 0.05,
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None, one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS,
                 hash_features: int | None = None, shard_rows: int | None = None, tmp_store: Any = None,
                 random_state: int | None = None, early_stopping: bool = False, validation_fraction: float = 0.1,
                 n_iter_no_change: int = 10, client: Any = None) -> None:
        store_parameters(self, locals())

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> TorchClassifier:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``."""
        self._check_params()
        model = self._torch_model()  # the module and the loss, before any data is written
        with self._fit_data(X, y, classifier=True, sample_weight=sample_weight) as (data, classes):
            if model.n_classes != len(classes):
                raise ConfigurationError(f"the module has {model.n_outputs} output(s) for {model.n_classes} classes, "
                                         f"but y holds {len(classes)}: {classes.tolist()[:10]}")
            self._fit_model(model, data)
        self.classes_ = classes
        return self


class TorchRegressor(ScoredOnTheCluster, RegressorMixin, _TorchEstimator):
    """A regressor of a torch module with one output per row: ``mse`` (the prediction is the
    output) or ``poisson_nll`` (counts; the prediction is the exponential of the output).

    The parameters are :class:`_TorchEstimator`'s.
    """

    def __init__(self, module: Any = None, *, loss: Any = "mse", input_shape: Any = None, l2: float = 0.0,
                 max_iter: int = 100, tol: float = 1e-5, solver: str = "sandblaster", learning_rate: float = 0.05,
                 batch_size: int = REPLICAS.default("batch_size"), n_replicas: int = REPLICAS.default("n_replicas"),
                 solver_options: dict[str, Any] | None = None, one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS,
                 hash_features: int | None = None, shard_rows: int | None = None, tmp_store: Any = None,
                 random_state: int | None = None, early_stopping: bool = False, validation_fraction: float = 0.1,
                 n_iter_no_change: int = 10, client: Any = None) -> None:
        store_parameters(self, locals())

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> TorchRegressor:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``."""
        self._check_params()
        model = self._torch_model()
        with self._fit_data(X, y, classifier=False, sample_weight=sample_weight) as (data, _):
            self._fit_model(model, data)
        return self

    @on_the_cluster
    def predict(self, X: Any) -> np.ndarray:
        model, params, X = self._fitted(X)
        return model.predict(params, X)
