"""Pieces the neural objectives share: the named layout of the flat vector, activations,
initialisation."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dasklbfgs.errors import ConfigurationError


class Layout:
    """Named arrays packed one after another into the flat parameter vector (row-major)."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]]) -> None:
        self.shapes = dict(shapes)
        self.offsets: dict[str, tuple[int, int]] = {}
        start = 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            self.offsets[name] = (start, start + size)
            start += size
        self.size = start

    def views(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """Reshaped views into ``vector`` (writing to a view writes to the vector)."""
        return {name: vector[a:b].reshape(self.shapes[name]) for name, (a, b) in self.offsets.items()}


def weight_decay(layout: Layout, params: np.ndarray, l2: float, names: list[str] | tuple[str, ...]
                 ) -> tuple[float, np.ndarray]:
    """``(l2 / 2) sum ||W||^2`` over the named weight arrays, and its gradient."""
    grad = np.zeros(layout.size)
    if l2 == 0.0:
        return 0.0, grad
    views, gviews = layout.views(params), layout.views(grad)
    value = 0.0
    for name in names:
        matrix = views[name].reshape(-1, views[name].shape[-1])  # untied weights have more axes
        value += float(np.einsum("ij,ij->", matrix, matrix))
        gviews[name][...] = l2 * views[name]
    return 0.5 * l2 * value, grad


def affine(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x W + b``, the bias added in place."""
    z = x @ W
    z += b
    return z


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # 1 / (1 + e^-z) = (1 + tanh(z / 2)) / 2: no overflow for any z.
    z *= 0.5
    a = np.tanh(z, out=z)
    a += 1.0
    a *= 0.5
    return a


#: name -> (activation applied in place to pre-activations, derivative from the *output*)
ACTIVATIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "sigmoid": (_sigmoid, lambda a: a * (1.0 - a)),
    "relu": (lambda z: np.maximum(z, 0.0, out=z), lambda a: (a > 0).astype(a.dtype)),
    "tanh": (lambda z: np.tanh(z, out=z), lambda a: 1.0 - a * a),
}


def check_activation(activation: str) -> str:
    if activation not in ACTIVATIONS:
        raise ConfigurationError(f"activation must be one of {tuple(ACTIVATIONS)!r}, got {activation!r}")
    return activation


def init_weights(rng: np.random.Generator, fan_in: int, fan_out: int, activation: str) -> np.ndarray:
    """He normal for ReLU layers, Glorot uniform otherwise (4x wider for sigmoid)."""
    if activation == "relu":
        return rng.normal(scale=np.sqrt(2.0 / fan_in), size=(fan_in, fan_out))
    limit = np.sqrt(6.0 / (fan_in + fan_out)) * (4.0 if activation == "sigmoid" else 1.0)
    return rng.uniform(-limit, limit, size=(fan_in, fan_out))


def seeded_zeros(layout: Layout, seed: int | None) -> tuple[np.random.Generator, np.ndarray, dict]:
    """A generator from ``seed`` (``None`` means 0: neural models never start from zeros, a
    saddle where hidden units stay identical) and a zero parameter vector with its views."""
    params = np.zeros(layout.size)
    return np.random.default_rng(0 if seed is None else int(seed)), params, layout.views(params)
