"""``SparseAutoencoder``: the paper's unsupervised image model (sigmoid layers, KL sparsity).

With hidden activations ``a_i = sigmoid(x_i W1 + b1)`` and reconstructions
``r_i = sigmoid(a_i W2 + b2)``, the objective over n rows is

    f = (1/n) sum_i 0.5 ||r_i - x_i||^2 + (l2 / 2)(||W1||^2 + ||W2||^2)
        + beta sum_j KL(rho || rho_hat_j),      rho_hat = (1/n) sum_i a_i

The sparsity term is not a mean over rows: it depends on the mean activation of the whole
batch, which for Sandblaster is the whole mega-batch spread over many portions. It still
decomposes exactly. Its gradient is

    d/dW1[:, j] = beta KL'(rho_hat_j) (1/n) sum_i a_ij (1 - a_ij) x_i

(and the same without ``x_i`` for ``b1``), so besides the reconstruction loss and its
gradient each portion returns three more *sums over its rows*: ``sum_i a_i`` (h),
``sum_i x_i a_i(1 - a_i)^T`` (d x h) and ``sum_i a_i (1 - a_i)`` (h). Sums add exactly over
any split of the rows; :meth:`SparseAutoencoder.objective_from_sums` forms ``rho_hat``
from the added sums and only then applies the non-linear KL, so a mega-batch evaluated in
100 portions gives the same objective and gradient as one pass over all rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs._checks import check_int
from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models._kernels import block_rows
from dasklbfgs.models._layers import (
    ACTIVATIONS,
    Layout,
    affine,
    init_weights,
    seeded_zeros,
    weight_decay,
)
from dasklbfgs.models.base import Model, check_l2

__all__ = ["SparseAutoencoder"]

_sigmoid = ACTIVATIONS["sigmoid"][0]
_RHO_FLOOR = 1e-12  # keeps log(rho_hat) finite when a unit never fires in float64


class SparseAutoencoder(Model):
    """One sigmoid hidden layer reconstructing inputs in (0, 1), with a sparsity target.

    Parameters
    ----------
    n_features, n_hidden
        Input width (e.g. 64 for 8x8 patches) and hidden units.
    sparsity
        Target mean activation ``rho`` of each hidden unit, in (0, 1).
    beta
        Weight of the KL sparsity penalty (>= 0).
    l2
        Weight decay on ``W1`` and ``W2``.
    """

    name = "sparse_autoencoder"
    shape_options = ("n_hidden", "sparsity", "beta")
    task = "reconstruction"
    n_features: int
    n_params: int

    @classmethod
    def for_dataset(cls, data: Dataset, *, l2: float, l1: float, fit_intercept: bool, class_weight: str | None,
                    **shape: Any) -> SparseAutoencoder:
        return cls(data.n_features, l2=l2, **shape)

    def __init__(self, n_features: int, n_hidden: int = 25, *, sparsity: float = 0.05, beta: float = 3.0,
                 l2: float = 1e-4) -> None:
        self.n_features = check_int(n_features, "n_features")
        self.n_hidden = check_int(n_hidden, "n_hidden")
        if not isinstance(sparsity, (int, float)) or not 0.0 < float(sparsity) < 1.0:
            raise ConfigurationError(f"sparsity must be in (0, 1), got {sparsity!r}")
        self.sparsity = float(sparsity)
        self.beta = check_l2(beta, "beta")
        self.l2 = check_l2(l2)
        d, h = self.n_features, self.n_hidden
        self.layout = Layout([("W1", (d, h)), ("b1", (h,)), ("W2", (h, d)), ("b2", (d,))])
        self.n_params = self.layout.size
        # After the gradient: sum a (h), sum x a(1-a)^T (d x h), sum a(1-a) (h).
        self.stats_layout = Layout([("grad", (self.n_params,)), ("a", (h,)), ("xa", (d, h)), ("da", (h,))])

    @property
    def n_sums(self) -> int:
        return self.stats_layout.size

    def init_params(self, seed: int | None = None) -> np.ndarray:
        rng, params, views = seeded_zeros(self.layout, seed)
        views["W1"][...] = init_weights(rng, self.n_features, self.n_hidden, "tanh")
        views["W2"][...] = init_weights(rng, self.n_hidden, self.n_features, "tanh")
        return params

    def _hidden(self, views: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
        return _sigmoid(affine(X, views["W1"], views["b1"]))

    def _reconstruct(self, views: dict[str, np.ndarray], a: np.ndarray) -> np.ndarray:
        return _sigmoid(affine(a, views["W2"], views["b2"]))

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """Reconstruction loss sum, its gradient and the sparsity statistics; ``y`` is ignored.
        Unweighted: the sparsity penalty is of the mean activation over all rows."""
        if w is not None:
            raise ModelDataMismatchError("SparseAutoencoder does not take sample weights")
        X = X.astype(np.float64, copy=False)
        views = self.layout.views(params)
        sums = np.zeros(self.n_sums)
        out = self.stats_layout.views(sums)
        grads = self.layout.views(out["grad"])
        loss = 0.0
        step = block_rows(2 * (self.n_features + self.n_hidden), 8)
        for start in range(0, X.shape[0], step):
            Xb = X[start : start + step]
            a = self._hidden(views, Xb)
            r = self._reconstruct(views, a)
            diff = r - Xb
            loss += 0.5 * float(np.einsum("ij,ij->", diff, diff))
            delta = diff * r * (1.0 - r)  # through the output sigmoid
            grads["W2"] += a.T @ delta
            grads["b2"] += delta.sum(axis=0)
            da = a * (1.0 - a)
            delta = (delta @ views["W2"].T) * da
            grads["W1"] += Xb.T @ delta
            grads["b1"] += delta.sum(axis=0)
            out["a"] += a.sum(axis=0)
            out["xa"] += Xb.T @ da
            out["da"] += da.sum(axis=0)
        return loss, sums

    def penalty(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        return weight_decay(self.layout, params, self.l2, ("W1", "W2"))

    def objective_from_sums(self, params: np.ndarray, loss_sum: float, sums: np.ndarray, n: float
                            ) -> tuple[float, np.ndarray]:
        """Mean reconstruction loss + weight decay + the KL penalty at ``rho_hat`` of all n rows."""
        f, g = super().objective_from_sums(params, loss_sum, sums, n)
        if self.beta == 0.0:
            return f, g
        stats = self.stats_layout.views(sums)
        rho = self.sparsity
        rho_hat = np.clip(stats["a"] / n, _RHO_FLOOR, 1.0 - _RHO_FLOOR)
        kl = rho * np.log(rho / rho_hat) + (1.0 - rho) * np.log((1.0 - rho) / (1.0 - rho_hat))
        slope = self.beta * (-rho / rho_hat + (1.0 - rho) / (1.0 - rho_hat)) / n
        gviews = self.layout.views(g)
        gviews["W1"] += stats["xa"] * slope
        gviews["b1"] += stats["da"] * slope
        return f + self.beta * float(kl.sum()), g

    def transform(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Hidden activations: the learned features, (n, n_hidden)."""
        return self._hidden(self.layout.views(np.asarray(params, dtype=np.float64)), np.asarray(X, dtype=np.float64))

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Reconstructions of ``X``, (n, n_features)."""
        views = self.layout.views(np.asarray(params, dtype=np.float64))
        return self._reconstruct(views, self._hidden(views, np.asarray(X, dtype=np.float64)))

    def _config(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "n_hidden": self.n_hidden, "sparsity": self.sparsity,
                "beta": self.beta, "l2": self.l2}
