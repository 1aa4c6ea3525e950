"""Where the L-BFGS vectors live: the basis of curvature pairs and the gradient.

:class:`GramMatrix` is the bookkeeping every basis shares: the Gram matrix of
``[s_0..s_{k-1}, y_0..y_{k-1}, g]`` kept up to date from dot products. :class:`LocalBasis`
keeps the vectors as numpy arrays in this process and computes those dot products itself;
the sharded Sandblaster state (:mod:`dasklbfgs.solvers.sandblaster.sharded_space`) keeps slices of them on
parameter shards, each in a :class:`LocalBasis` of its own, and feeds the coordinator's Gram matrix
with the partial dot products those return, summed over the shards. The optimizer only reads the
Gram matrix and hands out coefficients.
"""

from __future__ import annotations

import numpy as np

from dasklbfgs.optim.vectors import BLOCK, add_scaled, products

__all__ = ["GramMatrix", "LocalBasis"]


def keep_pair(sy: float, descent: float) -> bool:
    """Whether the curvature pair ``(s, y)`` of a step is stored.

    L-BFGS-B's test (Byrd, Lu, Nocedal and Zhu 1995): keep it when ``s . y > eps * (-g . s)``,
    with ``g`` the gradient where the step began (``descent = -g . s > 0`` along a descent
    direction). Both sides scale like the objective, so multiplying ``f`` by a constant
    keeps or drops the same pairs; a test against ``eps * y . y`` (which scales like the
    square) drops every pair of a large objective and leaves steepest descent.
    """
    return bool(sy > np.finfo(float).eps * descent)


class GramMatrix:
    """The ``(2k+1)^2`` Gram matrix of up to ``m`` pairs (oldest first) and the gradient.

    A new pair costs ``4k + 2`` dot products and a new gradient ``2k + 1`` (about 6m per
    iteration, as in vector-free L-BFGS).
    """

    def __init__(self, m: int) -> None:
        self.m = m
        self.k = 0
        # Gram of [S (m), Y (m), g] in a fixed-size buffer; rows of absent pairs unused.
        self._G = np.zeros((2 * m + 1, 2 * m + 1))

    def make_room(self) -> bool:
        """Drop the oldest pair when ``m`` are stored (callers shift their vectors the same
        way); returns whether it did."""
        m, G = self.m, self._G
        if self.k < m:
            return False
        idx = np.r_[1:m, m + 1 : 2 * m, 2 * m]
        keep = np.r_[0 : m - 1, m : 2 * m - 1, 2 * m]
        G[np.ix_(keep, keep)] = G[np.ix_(idx, idx)]
        self.k = m - 1
        return True

    def add_pair(self, ss: np.ndarray, sy: np.ndarray, ys: np.ndarray, yy: np.ndarray) -> None:
        """Record pair ``k`` (after :meth:`make_room`) from its dot products with pairs
        ``0..k`` itself included: ``ss = S s``, ``sy = Y s``, ``ys = S y``, ``yy = Y y``."""
        m, k, G = self.m, self.k, self._G
        G[k, : k + 1] = G[: k + 1, k] = ss
        G[k, m : m + k + 1] = G[m : m + k + 1, k] = sy
        G[m + k, : k + 1] = G[: k + 1, m + k] = ys
        G[m + k, m : m + k + 1] = G[m : m + k + 1, m + k] = yy
        self.k = k + 1

    def set_gradient_dots(self, gS: np.ndarray, gY: np.ndarray, gg: float) -> None:
        """Record the new gradient from ``S g``, ``Y g`` (current pairs) and ``g . g``."""
        m, k, G = self.m, self.k, self._G
        G[2 * m, :k] = G[:k, 2 * m] = gS
        G[2 * m, m : m + k] = G[m : m + k, 2 * m] = gY
        G[2 * m, 2 * m] = gg

    def drop_pairs(self) -> None:
        """Forget all pairs (restart from steepest descent)."""
        self.k = 0

    def gram(self) -> np.ndarray:
        """The ``(2k+1)^2`` Gram matrix of ``[s_0..s_{k-1}, y_0..y_{k-1}, g]``."""
        m, k = self.m, self.k
        idx = np.r_[0:k, m : m + k, 2 * m]
        return self._G[np.ix_(idx, idx)]


class LocalBasis(GramMatrix):
    """Up to ``m`` pairs ``(s, y)`` and the current gradient ``g``, in memory.

    Pair ``l`` (oldest first) lives in row ``slots[l]`` of ``S`` and ``Y``: a new pair takes
    the oldest one's rows once ``m`` are stored, so nothing shifts (moving ``m - 1`` rows of
    both at every iteration cost more than all the dot products at millions of parameters).
    The rows in use are always ``S[:k]``; products are taken over them in their physical
    order and put in pair order through ``slots``.

    ``S`` and ``Y`` are the even and odd rows of one matrix (``s`` of a slot, then its ``y``),
    so the pairs in use are its first ``2k`` rows and the direction is one product with them
    (:meth:`combine`) rather than a product with each of ``S`` and ``Y`` and their sum
    (``benchmarks.coordinator`` measures both).
    """

    def __init__(self, n: int, m: int) -> None:
        super().__init__(m)
        self._rows = np.zeros((2 * m, n))  # s then y of slot 0, of slot 1, ...
        self.g = np.zeros(n)
        self.slots: list[int] = []

    @property
    def S(self) -> np.ndarray:
        """The ``s`` rows, ``(m, n)`` (a view: assigning to it, or to its rows, stores pairs)."""
        return self._rows[0::2]

    @S.setter
    def S(self, rows: np.ndarray) -> None:
        self._rows[0::2] = self._as_rows(rows)

    @property
    def Y(self) -> np.ndarray:
        """The ``y`` rows, ``(m, n)``, as :attr:`S`."""
        return self._rows[1::2]

    @Y.setter
    def Y(self, rows: np.ndarray) -> None:
        self._rows[1::2] = self._as_rows(rows)

    def _as_rows(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` if it has the shape of ``S`` (no broadcasting one row into all of them)."""
        if np.shape(rows) != self.S.shape:
            raise ValueError(f"the pairs' rows are {self.S.shape}, got an array of shape {np.shape(rows)}")
        return rows

    def push_pair(self, s: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Append a curvature pair, dropping the oldest when ``m`` are stored; returns its
        dot products with the pairs, itself included: ``[S s, Y s, S y, Y y]``."""
        self._store(s, y)
        order, used = self.slots, len(self.slots)
        S, Y = self.S[:used], self.Y[:used]
        return self._record_pair(((S @ s)[order], (Y @ s)[order], (S @ y)[order], (Y @ y)[order]))

    def set_gradient(self, g: np.ndarray) -> np.ndarray:
        """Take ``g`` as the gradient; returns its dot products ``[S g, Y g, g . g]``."""
        order, used = self.slots, len(self.slots)
        return self._record_gradient(g, (self.S[:used] @ g)[order], (self.Y[:used] @ g)[order])

    def advance(self, pair: tuple[np.ndarray, np.ndarray] | None, g: np.ndarray) -> tuple[np.ndarray | None,
                                                                                       np.ndarray]:
        """:meth:`push_pair` ``(s, y)`` (when a ``pair`` is given) then :meth:`set_gradient`
        ``g``, the products of both taken in one pass over the stored pairs
        (:func:`~dasklbfgs.optim.vectors.products`) once the vectors are longer than a cache
        block (shorter ones are in cache either way: taken one by one, as before); returns
        what each returns (None for no pair)."""
        if pair is None or len(g) <= BLOCK:
            return None if pair is None else self.push_pair(*pair), self.set_gradient(g)
        s, y = pair
        self._store(s, y)
        order, used = self.slots, len(self.slots)
        on_S, on_Y = products((self.S[:used], self.Y[:used]), (s, y, g))[:, order]
        return (self._record_pair((on_S[:, 0], on_Y[:, 0], on_S[:, 1], on_Y[:, 1])),
                self._record_gradient(g, on_S[:, 2], on_Y[:, 2]))

    def _store(self, s: np.ndarray, y: np.ndarray) -> None:
        """Put pair ``(s, y)`` in a free row, or the oldest pair's once ``m`` are stored."""
        slot = self.slots.pop(0) if self.make_room() else len(self.slots)
        self.S[slot], self.Y[slot] = s, y
        self.slots.append(slot)

    def _record_pair(self, dots: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """The stored pair's products ``(S s, Y s, S y, Y y)`` (pair order) into the Gram matrix."""
        self.add_pair(*dots)
        return np.concatenate(dots)

    def _record_gradient(self, g: np.ndarray, gS: np.ndarray, gY: np.ndarray) -> np.ndarray:
        """Take ``g`` as the gradient, given its products with the pairs (pair order)."""
        self.g = g
        gg = float(g @ g)
        self.set_gradient_dots(gS, gY, gg)
        return np.concatenate([gS, gY, [gg]])

    def combine(self, delta: np.ndarray) -> np.ndarray:
        """The vector ``sum_l delta_l b_l`` over ``[s_0..s_{k-1}, y_0..y_{k-1}, g]``."""
        k = self.k
        rows = 2 * np.asarray(self.slots, dtype=np.intp)  # pair order -> the rows of its s (and y after)
        on_rows = np.empty(2 * k)
        on_rows[rows], on_rows[rows + 1] = delta[:k], delta[k : 2 * k]
        p = on_rows @ self._rows[: 2 * k]
        add_scaled(p, delta[2 * k], self.g)
        return p

    def drop_pairs(self) -> None:
        super().drop_pairs()
        self.slots = []

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The stored pairs' rows as they lie (``S[:k]``, ``Y[:k]``; see :attr:`slots`)."""
        return self.S[: self.k], self.Y[: self.k]

    def restore_pairs(self, S: np.ndarray, Y: np.ndarray, slots: list[int] | None = None) -> None:
        """Take pairs saved by :meth:`pairs` and their ``slots`` (None: in pair order, as
        checkpoints written before rows were reused hold them)."""
        k = S.shape[0]
        self.S[:k], self.Y[:k], self.k = S, Y, k
        self.slots = list(range(k)) if slots is None else [int(i) for i in slots]
