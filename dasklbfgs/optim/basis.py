"""Where the L-BFGS vectors live: the basis of curvature pairs and the gradient.

:class:`LocalBasis` keeps them as numpy arrays in this process. The optimizer talks to it
only through dot products and linear combinations (``push_pair``, ``set_gradient``,
``gram``, ``combine``), so a basis whose slices live on parameter shards can stand in.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LocalBasis"]


class LocalBasis:
    """Up to ``m`` pairs ``(s, y)`` (oldest first) and the current gradient ``g``.

    The Gram matrix is updated incrementally: a new pair costs ``4k + 2`` dot products
    and a new gradient ``2k + 1`` (about 6m per iteration, as in vector-free L-BFGS).
    """

    def __init__(self, n: int, m: int) -> None:
        self.m = m
        self.S = np.zeros((m, n))
        self.Y = np.zeros((m, n))
        self.k = 0
        self.g = np.zeros(n)
        # Gram of [S (m), Y (m), g] in a fixed-size buffer; rows of absent pairs unused.
        self._G = np.zeros((2 * m + 1, 2 * m + 1))

    def _pairs_view(self) -> tuple[np.ndarray, np.ndarray]:
        return self.S[: self.k], self.Y[: self.k]

    def push_pair(self, s: np.ndarray, y: np.ndarray) -> None:
        """Append a curvature pair, dropping the oldest when ``m`` are stored."""
        m, G = self.m, self._G
        if self.k == m:
            self.S[:-1] = self.S[1:]
            self.Y[:-1] = self.Y[1:]
            # Shift the S and Y blocks of the Gram matrix by one (drop the oldest).
            idx = np.r_[1:m, m + 1 : 2 * m, 2 * m]
            keep = np.r_[0 : m - 1, m : 2 * m - 1, 2 * m]
            G[np.ix_(keep, keep)] = G[np.ix_(idx, idx)]
            self.k = m - 1
        k = self.k
        self.S[k], self.Y[k] = s, y
        self.k = k + 1
        S, Y = self._pairs_view()
        ss, sy = S @ s, Y @ s  # s . s_i, s . y_i (including itself)
        ys, yy = S @ y, Y @ y
        G[k, :k + 1] = G[:k + 1, k] = ss
        G[k, m : m + k + 1] = G[m : m + k + 1, k] = sy
        G[m + k, :k + 1] = G[:k + 1, m + k] = ys
        G[m + k, m : m + k + 1] = G[m : m + k + 1, m + k] = yy

    def drop_pairs(self) -> None:
        """Forget all pairs (restart from steepest descent)."""
        self.k = 0

    def set_gradient(self, g: np.ndarray) -> None:
        m, k, G = self.m, self.k, self._G
        self.g = g
        S, Y = self._pairs_view()
        G[2 * m, :k] = G[:k, 2 * m] = S @ g
        G[2 * m, m : m + k] = G[m : m + k, 2 * m] = Y @ g
        G[2 * m, 2 * m] = g @ g

    def gram(self) -> np.ndarray:
        """The ``(2k+1)^2`` Gram matrix of ``[s_0..s_{k-1}, y_0..y_{k-1}, g]``."""
        m, k = self.m, self.k
        idx = np.r_[0:k, m : m + k, 2 * m]
        return self._G[np.ix_(idx, idx)]

    def combine(self, delta: np.ndarray) -> np.ndarray:
        """The vector ``sum_l delta_l b_l``."""
        k = self.k
        S, Y = self._pairs_view()
        return delta[:k] @ S + delta[k : 2 * k] @ Y + delta[2 * k] * self.g
