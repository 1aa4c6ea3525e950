"""``LocalAutoencoder``: an image autoencoder with locally connected layers (the paper's image
models: untied weights, each unit sees a window of the layer below).

The input is a ``side x side`` image (a row of the ``patches`` recipe with ``patch_size=side``).
Windows of ``window x window`` pixels start every ``stride`` pixels in both directions, on a
``grid x grid`` grid of hidden locations, ``grid = (side - window) / stride + 1``; each location
has ``maps`` sigmoid units with weights of their own (``W1[i, j]``: window*window x maps, bias
``b1[i, j]``). The decoder is the transposed connectivity with its own untied weights: location
(i, j) reconstructs its window through ``W2[i, j]`` (maps x window*window); contributions to
pixels where windows overlap add, then a bias per pixel and a sigmoid:

    f = (1/n) sum_i 0.5 ||r_i - x_i||^2 + (l2 / 2)(||W1||^2 + ||W2||^2)

(with sample weights, a weighted mean). There is no KL sparsity term: unlike
:class:`~dasklbfgs.models.autoencoder.SparseAutoencoder`'s it is not a sum over rows and would
need extra sufficient statistics from every partition; the local connectivity is what this
model is for.

The computations work on a horizontal *band* of hidden rows and the pixel rows their windows
cover, so that the partitioned model (:mod:`dasklbfgs.parallel.local`) runs the same code on
its band as the whole model runs on the whole image.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import schema
from dasklbfgs.models._kernels import block_rows
from dasklbfgs.models._layers import ACTIVATIONS, Layout, init_weights, seeded_zeros, weight_decay
from dasklbfgs.models.base import Model, check_l2

__all__ = ["LocalAutoencoder"]

_sigmoid = ACTIVATIONS["sigmoid"][0]


def _check_geometry(side: Any, window: Any, stride: Any) -> tuple[int, int, int]:
    side, window, stride = check_int(side, "side"), check_int(window, "window"), check_int(stride, "stride")
    if window > side:
        raise ConfigurationError(f"window={window} is larger than the image (side={side}); use window <= {side}")
    if (side - window) % stride:
        fits = [s for s in range(1, side - window + 1) if (side - window) % s == 0] or [1]
        raise ConfigurationError(
            f"windows of {window} pixels every stride={stride} pixels do not end at the image's edge "
            f"(side={side}: side - window = {side - window} must be a multiple of the stride); "
            f"strides that fit: {fits}"
        )
    return side, window, stride


class LocalAutoencoder(Model):
    """Locally connected sigmoid autoencoder of ``side x side`` images, untied weights.

    Parameters
    ----------
    side
        Image side: ``n_features = side * side`` (row-major pixels).
    window, stride
        Each hidden location sees ``window x window`` pixels; locations every ``stride`` pixels
        (``side - window`` must be a multiple of ``stride``).
    maps
        Hidden units (feature maps) per location.
    l2
        Weight decay on ``W1`` and ``W2``.
    """

    name = "local_autoencoder"
    shape_options = ("window", "stride", "maps")
    task = "reconstruction"
    accepts_weights = True
    n_features: int
    n_params: int

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> LocalAutoencoder:
        return cls(schema.image_side(data, cls.name), l2=l2, **shape)

    def __init__(self, side: int, window: int = 4, stride: int = 2, maps: int = 4, *, l2: float = 1e-4) -> None:
        self.side, self.window, self.stride = _check_geometry(side, window, stride)
        self.maps = check_int(maps, "maps")
        self.l2 = check_l2(l2)
        self.grid = (self.side - self.window) // self.stride + 1
        self.n_features = self.side * self.side
        g, p, m = self.grid, self.window * self.window, self.maps
        self.layout = Layout([("W1", (g, g, p, m)), ("b1", (g, g, m)), ("W2", (g, g, m, p)),
                              ("b2", (self.n_features,))])
        self.n_params = self.layout.size

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """Glorot weights per location, zero biases, from ``seed`` (``None`` means 0)."""
        rng, params, views = seeded_zeros(self.layout, seed)
        p, m = self.window * self.window, self.maps
        for i in range(self.grid):
            for j in range(self.grid):
                views["W1"][i, j] = init_weights(rng, p, m, "tanh")
                views["W2"][i, j] = init_weights(rng, m, p, "tanh")
        return params

    # -- a band of hidden rows and the pixel rows it covers --------------------------------

    def cover(self, start: int, stop: int) -> tuple[int, int]:
        """The pixel rows the windows of hidden rows ``start:stop`` read (and reconstruct)."""
        return self.stride * start, self.stride * (stop - 1) + self.window

    def unfold(self, image: np.ndarray) -> np.ndarray:
        """Windows of ``image`` (n, rows, side): (grid rows, grid, n, window*window)."""
        windows = sliding_window_view(image, (self.window, self.window), axis=(1, 2))[:, :: self.stride, :: self.stride]
        g_rows, g_cols = windows.shape[1:3]
        return windows.transpose(1, 2, 0, 3, 4).reshape(g_rows, g_cols, image.shape[0], -1)

    def fold(self, parts: np.ndarray) -> np.ndarray:
        """The transpose of :meth:`unfold`: window values (grid rows, grid, n, window*window) added
        into the pixels they cover, (n, rows, side)."""
        g_rows, g_cols, n = parts.shape[:3]
        s, win = self.stride, self.window
        image = np.zeros((n, s * (g_rows - 1) + win, self.side))
        parts = parts.reshape(g_rows, g_cols, n, win, win).transpose(2, 0, 1, 3, 4)
        for di in range(win):
            for dj in range(win):
                image[:, di : di + s * (g_rows - 1) + 1 : s, dj : dj + s * (g_cols - 1) + 1 : s] += parts[..., di, dj]
        return image

    def encode(self, W1: np.ndarray, b1: np.ndarray, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The band's windows and hidden activations (grid rows, grid, n, maps)."""
        windows = self.unfold(image)
        z = np.matmul(windows, W1)
        z += b1[:, :, None, :]
        return windows, _sigmoid(z)

    def decode(self, a: np.ndarray, W2: np.ndarray) -> np.ndarray:
        """The band's contributions to the output pre-activations of the pixels it covers."""
        return self.fold(np.matmul(a, W2))

    @staticmethod
    def output_error(pre: np.ndarray, x: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        """Loss sum of pixels with output pre-activations ``pre`` and targets ``x`` (n, ...), and
        d loss / d pre (weighted per row by ``w``)."""
        r = _sigmoid(pre)
        diff = r - x
        squares = np.einsum("ij,ij->i", diff.reshape(len(diff), -1), diff.reshape(len(diff), -1))
        loss = 0.5 * float(squares.sum() if w is None else w @ squares)
        error = diff * r * (1.0 - r)
        if w is not None:
            error *= w.reshape((-1,) + (1,) * (error.ndim - 1))
        return loss, error

    def backward(self, windows: np.ndarray, a: np.ndarray, W2: np.ndarray, error: np.ndarray,
                 grads: dict[str, np.ndarray]) -> None:
        """Add the band's ``W1``, ``b1``, ``W2`` gradient sums to ``grads``, from the output
        error of the pixels it covers (n, rows, side)."""
        error_windows = self.unfold(error)
        grads["W2"] += np.matmul(a.swapaxes(-1, -2), error_windows)
        hidden_error = np.matmul(error_windows, W2.swapaxes(-1, -2))
        hidden_error *= a * (1.0 - a)
        grads["W1"] += np.matmul(windows.swapaxes(-1, -2), hidden_error)
        grads["b1"] += hidden_error.sum(axis=2)

    # -- the Model contract ----------------------------------------------------------------

    def _images(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X, dtype=np.float64).reshape(-1, self.side, self.side)

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Reconstruction loss summed over the rows (weighted by ``w``) and its gradient; ``y``
        is ignored."""
        views = self.layout.views(params)
        grad = np.zeros(self.n_params)
        grads = self.layout.views(grad)
        loss = 0.0
        images = self._images(X)
        step = block_rows(4 * self.grid * self.grid * self.window * self.window, 8)
        for start in range(0, len(images), step):
            image = images[start : start + step]
            wb = None if w is None else np.asarray(w[start : start + step], dtype=np.float64)
            windows, a = self.encode(views["W1"], views["b1"], image)
            pre = self.decode(a, views["W2"])
            pre += views["b2"].reshape(self.side, self.side)
            block_loss, error = self.output_error(pre, image, wb)
            loss += block_loss
            grads["b2"] += error.sum(axis=0).ravel()
            self.backward(windows, a, views["W2"], error, grads)
        return loss, grad

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        return weight_decay(self.layout, params, self.l2, ("W1", "W2"))

    def transform(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Hidden activations, (n, grid * grid * maps) ordered by location then map."""
        views = self.layout.views(np.asarray(params, dtype=np.float64))
        _, a = self.encode(views["W1"], views["b1"], self._images(X))
        return a.transpose(2, 0, 1, 3).reshape(a.shape[2], -1)

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Reconstructions of ``X``, (n, side * side)."""
        views = self.layout.views(np.asarray(params, dtype=np.float64))
        _, a = self.encode(views["W1"], views["b1"], self._images(X))
        pre = self.decode(a, views["W2"])
        pre += views["b2"].reshape(self.side, self.side)
        return _sigmoid(pre).reshape(len(pre), -1)

    def _config(self) -> dict[str, Any]:
        return {"side": self.side, "window": self.window, "stride": self.stride, "maps": self.maps, "l2": self.l2}
