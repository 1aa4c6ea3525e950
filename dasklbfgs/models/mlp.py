"""``MLP``: fully connected layers and a softmax output (the paper's acoustic model).

Parameter layout: for each layer l, ``W_l`` (fan_in x fan_out, row-major) then ``b_l``;
the last layer maps to the class logits. The objective is

    f(theta) = (1/n) sum_i -log softmax(MLP(x_i))_{y_i} + (l2 / 2) sum_l ||W_l||^2

(biases not penalised), a mean over rows, so partial sums add up exactly. Forward and
backward passes run per block of rows as matrix products, in the data's dtype (float32
data gets float32 products); gradient sums accumulate in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import schema
from dasklbfgs.models._kernels import block_rows, softmax_link
from dasklbfgs.models._layers import (
    ACTIVATIONS,
    Layout,
    affine,
    check_activation,
    init_weights,
    seeded_zeros,
    weight_decay,
)
from dasklbfgs.models.base import Model, SoftmaxOutput, check_l2

__all__ = ["MLP"]


def _check_hidden(hidden: Any) -> tuple[int, ...]:
    if isinstance(hidden, (int, np.integer)) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if not isinstance(hidden, Sequence) or isinstance(hidden, str):
        raise ConfigurationError(f"hidden must be a sequence of layer widths, got {hidden!r}")
    return tuple(check_int(h, f"hidden[{i}]") for i, h in enumerate(hidden))


class MLP(SoftmaxOutput, Model):
    """A multi-layer perceptron classifier, labels 0..K-1.

    Parameters
    ----------
    n_features, n_classes
        Input width and number of classes (>= 2).
    hidden
        Widths of the hidden layers, e.g. ``(256, 256)``; ``()`` is softmax regression.
    activation
        ``"sigmoid"`` (the paper's), ``"relu"`` or ``"tanh"``.
    l2
        Weight decay on the weight matrices.
    """

    accepts_weights = True

    name = "mlp"
    shape_options = ("hidden", "activation")
    n_features: int
    n_classes: int
    n_params: int

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> MLP:
        return cls(data.n_features, n_classes=schema.n_classes(data), l2=l2, **shape)

    def __init__(self, n_features: int, hidden: Sequence[int] = (64,), n_classes: int = 2, *,
                 activation: str = "sigmoid", l2: float = 0.0) -> None:
        self.n_features = check_int(n_features, "n_features")
        self.hidden = _check_hidden(hidden)
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)
        self.activation = check_activation(activation)
        self.l2 = check_l2(l2)
        self.widths = widths = (self.n_features, *self.hidden, self.n_classes)
        self.layout = Layout([
            item for l, (a, b) in enumerate(zip(widths[:-1], widths[1:]))
            for item in ((f"W{l}", (a, b)), (f"b{l}", (b,)))
        ])
        self.n_params = self.layout.size

    @property
    def n_layers(self) -> int:
        return len(self.widths) - 1

    def _weights(self, params: np.ndarray, dtype: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        views = self.layout.views(params)
        return [(views[f"W{l}"].astype(dtype, copy=False), views[f"b{l}"].astype(dtype, copy=False))
                for l in range(self.n_layers)]

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """Glorot (He for ReLU) weights and zero biases from ``seed`` (``None`` means 0)."""
        rng, params, views = seeded_zeros(self.layout, seed)
        for l, (a, b) in enumerate(zip(self.widths[:-1], self.widths[1:])):
            last = l == self.n_layers - 1
            views[f"W{l}"][...] = init_weights(rng, a, b, "tanh" if last else self.activation)
        return params

    def _forward(self, layers, X: np.ndarray) -> list[np.ndarray]:
        """Activations of the input and every hidden layer (the logits are not included)."""
        act = ACTIVATIONS[self.activation][0]
        outputs = [X]
        for W, b in layers[:-1]:
            outputs.append(act(affine(outputs[-1], W, b)))
        return outputs

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Cross-entropy summed over the rows (weighted by ``w``) and its gradient
        (backpropagation per block)."""
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        X = X.astype(dtype, copy=False)
        layers = self._weights(params, dtype)
        grad = np.zeros(self.n_params)
        views = self.layout.views(grad)
        act_grad = ACTIVATIONS[self.activation][1]
        loss = 0.0
        step = block_rows(2 * max(self.widths), np.dtype(dtype).itemsize)
        for start in range(0, X.shape[0], step):
            outputs = self._forward(layers, X[start : start + step])
            logits = affine(outputs[-1], *layers[-1])
            block_loss, delta = softmax_link(logits, y[start : start + step],
                                             None if w is None else w[start : start + step])
            loss += block_loss
            for l in range(self.n_layers - 1, -1, -1):
                views[f"W{l}"] += outputs[l].T @ delta
                views[f"b{l}"] += delta.sum(axis=0, dtype=np.float64)
                if l:
                    delta = delta @ layers[l][0].T
                    delta *= act_grad(outputs[l])
        return loss, grad

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        return weight_decay(self.layout, params, self.l2, [f"W{l}" for l in range(self.n_layers)])

    def decision_function(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class logits, (n, K)."""
        X = np.asarray(X, dtype=np.float64)
        layers = self._weights(np.asarray(params, dtype=np.float64), np.float64)
        return affine(self._forward(layers, X)[-1], *layers[-1])

    def _config(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "hidden": list(self.hidden), "n_classes": self.n_classes,
                "activation": self.activation, "l2": self.l2}
