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
    sparse products (the ``d x d`` result densified); a dense one a block of rows at a time,
    by BLAS's ``syrk`` (``B^T B`` of the block, its ones column included, scaled by the roots
    of the weights: half a general product's work) where no weight is negative. Exactly
    symmetric (its upper triangle mirrored)."""
    d = X.shape[1]
    weights = np.asarray(weights, dtype=np.float64)
    if is_sparse(X):
        X = X.tocsr()
        gram = np.asarray((X.T @ X.multiply(weights[:, None]).tocsr()).toarray(), dtype=np.float64)
        column = np.asarray(X.T @ weights, dtype=np.float64).ravel()
        return _with_intercept(gram, column, float(weights.sum()), intercept)
    if weights.size and weights.min() >= 0:
        return _dense_syrk(X, np.sqrt(weights), intercept)
    gram, column = np.zeros((d, d)), np.zeros(d)
    step = max(1, BLOCK_BYTES // (8 * max(d, 1)))
    for start in range(0, X.shape[0], step):  # some weights negative (a curvature): block times its scaling
        block = np.asarray(X[start : start + step], dtype=np.float64)
        scaled = block * weights[start : start + step, None]
        gram += block.T @ scaled
        column += scaled.sum(axis=0)
    return _with_intercept(gram, column, float(weights.sum()), intercept)


def _dense_syrk(X: Any, root: np.ndarray, intercept: bool) -> np.ndarray:
    """``B^T B`` summed over blocks of rows, ``B`` a block of ``X`` (and a ones column when
    ``intercept``) with each row scaled by ``root``, formed in one buffer reused by every block."""
    n, d = X.shape
    width = d + (1 if intercept else 0)
    step = max(1, BLOCK_BYTES // (8 * max(width, 1)))
    from scipy.linalg.blas import dsyrk

    buffer = np.empty((min(step, max(n, 1)), width))
    total = np.zeros((width, width), order="F")  # its upper triangle accumulated in place
    for start in range(0, n, step):
        rows = min(step, n - start)
        block = buffer[:rows]
        np.multiply(X[start : start + rows], root[start : start + rows, None], out=block[:, :d])
        if intercept:
            block[:, d] = root[start : start + rows]
        # block^T block: the block's transpose is a Fortran-ordered width x rows matrix, no copy
        total = dsyrk(1.0, block.T, beta=1.0, c=total, trans=0, lower=0, overwrite_c=1)
    return np.triu(total) + np.triu(total, 1).T


def _with_intercept(gram: np.ndarray, column: np.ndarray, weight: float, intercept: bool) -> np.ndarray:
    """``gram`` made exactly symmetric, bordered by the intercept's column and total weight."""
    gram = np.triu(gram) + np.triu(gram, 1).T  # (a product's blocks round apart)
    if not intercept:
        return gram
    d = gram.shape[0]
    full = np.empty((d + 1, d + 1))
    full[:d, :d], full[:d, d], full[d, :d], full[d, d] = gram, column, column, weight
    return full
