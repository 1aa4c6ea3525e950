"""Optimising in standardised feature coordinates without changing the objective.

With column means ``mu`` and scales ``sigma`` (``sqrt(variance + l2)``, or of the second
moment about zero without an intercept; see
:meth:`Standardizer.from_moments`), the coordinator optimises
``theta = (C, c)`` where the model's parameters are

    W = C / sigma            (row j of C divided by sigma_j)
    b = c - mu . W           (only with an intercept; otherwise mu = 0)

This is an exact change of variables: the objective, its l2 penalty on W and its minimiser
are unchanged, only the coordinates the optimizer sees are better scaled (as Spark MLlib
does by default). Gradients map back by the chain rule:

    dF/dC = (dF/dW - mu dF/db^T) / sigma,     dF/dc = dF/db.

Parameters after the intercepts (a model's ``n_extra``: Huber's jointly estimated scale) have
no column: they are the same in both coordinates, and so are their gradients, L1 weights and
bounds (every map passes them through, by the vectors' length).
"""

from __future__ import annotations

import numpy as np

__all__ = ["Standardizer", "combine_moments"]


def combine_moments(parts: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[int, np.ndarray, np.ndarray]:
    """Merge per-shard ``(n, mean, M2)`` in the given order (Chan et al.'s pairwise update);
    ``n`` may be a total weight, and parts of weight 0 add nothing."""
    n, mean, m2 = parts[0]
    mean, m2 = mean.astype(np.float64), m2.astype(np.float64)
    for nb, mb, m2b in parts[1:]:
        if nb == 0:
            continue
        total = n + nb
        delta = mb - mean
        mean = mean + delta * (nb / total)
        m2 = m2 + m2b + delta * delta * (n * nb / total)
        n = total
    return n, mean, m2


class Standardizer:
    """The affine map between standardised coordinates ``theta`` and model parameters."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, *, n_outputs: int, fit_intercept: bool) -> None:
        self.mean = np.asarray(mean, dtype=np.float64) if fit_intercept else np.zeros(len(mean))
        std = np.asarray(std, dtype=np.float64)
        self.std = np.where(std > 0, std, 1.0)  # constant columns stay unscaled
        self.n_outputs = n_outputs
        self.fit_intercept = fit_intercept

    @classmethod
    def from_moments(cls, n: int, mean: np.ndarray, m2: np.ndarray, *, n_outputs: int,
                     fit_intercept: bool, l2: float = 0.0):
        """Scales ``sqrt(var_j + l2)``: the diagonal of the Hessian in ``theta`` is then
        about one whether the data term (``var_j``) or the penalty (``l2``) dominates a
        coordinate; a plain ``std_j`` would leave the penalty scaled by ``1/var_j``."""
        variance = m2 / n if fit_intercept else (m2 / n + mean**2)
        # A constant column leaves rounding noise (~1e-26) in M2, not zero: treat variance
        # below (1e-8 of the column's magnitude)^2 as none.
        noise = (1e-8 * np.maximum(1.0, np.abs(mean))) ** 2
        variance = np.where(variance > noise, variance, 0.0)
        return cls(mean, np.sqrt(variance + l2), n_outputs=n_outputs, fit_intercept=fit_intercept)

    def on_columns(self, columns: np.ndarray) -> Standardizer:
        """The map of the features ``columns`` alone (:meth:`LinearModel.on_columns`)."""
        return Standardizer(self.mean[columns], self.std[columns], n_outputs=self.n_outputs,
                            fit_intercept=self.fit_intercept)

    def _split(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(W, b, rest)``: the coefficients (d, K), the intercepts (zeros without) and what
        follows them (the parameters without a column, passed through; usually nothing)."""
        d, k = self.mean.size, self.n_outputs
        W = v[: d * k].reshape(d, k)
        end = d * k + (k if self.fit_intercept else 0)
        b = v[d * k : end] if self.fit_intercept else np.zeros(k)
        return W, b, v[end:]

    def _join(self, W: np.ndarray, b: np.ndarray, rest: np.ndarray) -> np.ndarray:
        if rest.size:
            return np.concatenate([W.ravel(), b, rest] if self.fit_intercept else [W.ravel(), rest])
        return np.concatenate([W.ravel(), b]) if self.fit_intercept else W.ravel().copy()

    def to_params(self, theta: np.ndarray) -> np.ndarray:
        C, c, rest = self._split(theta)
        W = C / self.std[:, None]
        return self._join(W, c - self.mean @ W, rest)

    def to_theta(self, params: np.ndarray) -> np.ndarray:
        W, b, rest = self._split(params)
        return self._join(W * self.std[:, None], b + self.mean @ W, rest)

    def gradient_to_theta(self, grad: np.ndarray) -> np.ndarray:
        gW, gb, rest = self._split(grad)
        gC = (gW - self.mean[:, None] * gb[None, :]) / self.std[:, None]
        return self._join(gC, gb, rest)

    def l1_weights_to_theta(self, weights: np.ndarray) -> np.ndarray:
        """The L1 weights in ``theta``: ``w |W_jk| = (w / sigma_j) |C_jk|``, so the L1 term,
        and with it the objective and its exact zeros, is unchanged (intercepts carry none)."""
        wW, wb, rest = self._split(weights)
        return self._join(wW / self.std[:, None], wb, rest)

    def bounds_to_theta(self, bound: np.ndarray) -> np.ndarray:
        """A coefficient bound in ``theta``: ``W_jk >= l`` is ``C_jk >= l sigma_j`` (sigma > 0,
        so upper stays upper); the intercepts, which centering mixes with every coefficient,
        carry none (their entries pass through: -inf or inf), and the parameters after them
        keep theirs."""
        bW, bb, rest = self._split(bound)
        return self._join(bW * self.std[:, None], bb, rest)

    def gradient_to_params(self, grad_theta: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`gradient_to_theta`: dF/dW = sigma dF/dC + mu dF/db^T."""
        gC, gc, rest = self._split(grad_theta)
        return self._join(gC * self.std[:, None] + self.mean[:, None] * gc[None, :], gc, rest)
