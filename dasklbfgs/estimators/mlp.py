"""scikit-learn's ``MLPClassifier`` over Sandblaster L-BFGS and Downpour SGD."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin

from dasklbfgs._post_fit import ScoredOnTheCluster
from dasklbfgs.data.frame_features import DEFAULT_ONE_HOT_MAX_LEVELS
from dasklbfgs.estimators.base import (
    REPLICAS,
    ModelClassifier,
    ShardedEstimator,
    check_number,
    store_parameters,
)
from dasklbfgs.models import MLP


class MLPClassifier(ScoredOnTheCluster, ModelClassifier, ClassifierMixin, ShardedEstimator):
    """A multi-layer perceptron classifier (:class:`~dasklbfgs.models.MLP`) trained on Dask.

    Names follow scikit-learn's ``MLPClassifier``: it minimises the mean cross-entropy plus
    ``alpha / (2 n) sum ||W||^2``, with a softmax output for any number of classes (two
    included). ``solver="sandblaster"`` runs full-batch L-BFGS over the data shards
    (scikit-learn's ``solver="lbfgs"``, distributed); ``"downpour"`` runs asynchronous
    Adagrad with ``learning_rate_init`` at the parameter shards, ``max_iter`` epochs.

    ``early_stopping=True`` holds out ``validation_fraction`` of the rows (the solvers'
    option of that name: a seeded draw per shard, no copy of the data), scores them every
    iteration (Sandblaster) or about every epoch (the replica methods), and stops once their
    objective has not improved by more than ``tol`` for ``n_iter_no_change`` scorings,
    keeping the best parameters, as scikit-learn's.

    Fitted attributes: ``coefs_``, ``intercepts_`` (lists per layer, as scikit-learn's),
    ``classes_``, ``n_iter_``, ``loss_curve_``, ``n_layers_``, ``n_outputs_``; with early
    stopping ``validation_scores_`` (the held-out accuracy at each scoring) and
    ``best_validation_score_``, else None.
    """

    def __init__(self, hidden_layer_sizes: tuple[int, ...] = (100,), *, activation: str = "relu",
                 alpha: float = 1e-4, max_iter: int = 200, tol: float = 1e-4, solver: str = "sandblaster",
                 learning_rate_init: float = 0.05, batch_size: int = REPLICAS.default("batch_size"),
                 n_replicas: int = REPLICAS.default("n_replicas"), solver_options: dict[str, Any] | None = None,
                 one_hot_max_levels: int = DEFAULT_ONE_HOT_MAX_LEVELS, hash_features: int | None = None,
                 shard_rows: int | None = None, tmp_store: Any = None, random_state: int | None = None,
                 early_stopping: bool = False, validation_fraction: float = 0.1, n_iter_no_change: int = 10,
                 client: Any = None) -> None:
        store_parameters(self, locals())

    def _learning_rate(self) -> float:
        return self.learning_rate_init

    def _model(self, n_features: int, n_classes: int, l2: float = 0.0) -> MLP:
        return MLP(n_features, tuple(self.hidden_layer_sizes), n_classes, activation=self.activation, l2=l2)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> MLPClassifier:
        """Fit on ``X, y`` (or a ShardedDataset ``X``), each row weighted by ``sample_weight``."""
        self._check_params()
        check_number(self.alpha, "alpha")
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
        scored = [h["eval_accuracy"] for h in result.history if "eval_accuracy" in h] if self.early_stopping else None
        self.validation_scores_ = scored
        self.best_validation_score_ = max(scored) if scored else None
        return self

    def _fitted(self, X: Any) -> tuple[MLP, np.ndarray, np.ndarray]:
        X = self._checked(X)
        model = self._model(self.n_features_in_, len(self.classes_))
        flat = np.concatenate([a.ravel() for pair in zip(self.coefs_, self.intercepts_) for a in pair])
        return model, flat, X
