"""``Xa^T diag(c) Xa`` of a block of rows, ``Xa`` being ``X`` with a column of ones appended
for the intercept: a linear model's Hessian sum (``c`` the rows' curvatures, weighted) and a
GLM's Fisher information (``c`` its working weights). Pure numpy and scipy.sparse."""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs._typing import is_sparse

__all__ = ["BLOCK_BYTES", "weighted_gram"]

#: rows of a dense block multiplied at once (float64 copies of them)
BLOCK_BYTES = 32 * 2**20


def weighted_gram(X: Any, weights: np.ndarray, intercept: bool) -> np.ndarray:
    """``Xa^T diag(weights) Xa``, ``Xa`` being ``X`` with a column of ones appended when
    ``intercept`` (last, as in the linear models' parameters), in float64: a sparse ``X`` by
    sparse products (the ``d x d`` result densified), a dense one a block of rows at a time;
    exactly symmetric (its upper triangle mirrored)."""
    d = X.shape[1]
    weights = np.asarray(weights, dtype=np.float64)
    if is_sparse(X):
        X = X.tocsr()
        gram = np.asarray((X.T @ X.multiply(weights[:, None]).tocsr()).toarray(), dtype=np.float64)
        column = np.asarray(X.T @ weights, dtype=np.float64).ravel()
    else:
        gram, column = np.zeros((d, d)), np.zeros(d)
        step = max(1, BLOCK_BYTES // (8 * max(d, 1)))
        root = np.sqrt(weights) if weights.size and weights.min() >= 0 else None
        for start in range(0, X.shape[0], step):
            block = np.asarray(X[start : start + step], dtype=np.float64)
            if root is None:  # some weights negative (a curvature): the product of the block and its scaling
                scaled = block * weights[start : start + step, None]
                gram += block.T @ scaled
            else:  # B^T B of the block scaled by the weights' roots: BLAS's syrk, half the work
                half = block * root[start : start + step, None]
                gram += half.T @ half
                scaled = half * root[start : start + step, None]
            column += scaled.sum(axis=0)
    gram = np.triu(gram) + np.triu(gram, 1).T  # exactly symmetric (a product's blocks round apart)
    if not intercept:
        return gram
    full = np.empty((d + 1, d + 1))
    full[:d, :d], full[:d, d], full[d, :d], full[d, d] = gram, column, column, weights.sum()
    return full
