"""The L-BFGS two-loop recursion on the Gram matrix of the basis (vector-free L-BFGS).

With the basis ``b = [s_0 .. s_{k-1}, y_0 .. y_{k-1}, g]`` (oldest pair first) and its
Gram matrix ``B_ij = b_i . b_j``, the search direction ``p = -H g`` is a linear
combination ``p = sum_l delta_l b_l`` whose coefficients follow from ``B`` alone
(Chen, Wang and Zhou 2014, "Large-scale L-BFGS using MapReduce"; docs/algorithms.md §2). So
whoever holds the vectors -- one process, or parameter shards each holding a slice --
only has to supply dot products and apply the coefficients.
"""

from __future__ import annotations

import numpy as np

__all__ = ["two_loop_coefficients"]


def two_loop_coefficients(gram: np.ndarray, n_pairs: int) -> np.ndarray:
    """Coefficients ``delta`` (length ``2k + 1``) of ``p = -H g`` in the basis.

    Parameters
    ----------
    gram
        ``(2k+1, 2k+1)`` Gram matrix of ``[s_0..s_{k-1}, y_0..y_{k-1}, g]``.
    n_pairs
        ``k``, the number of stored curvature pairs (0 gives steepest descent).

    Notes
    -----
    The standard recursion (Nocedal & Wright, Alg. 7.4) with ``q`` and ``r`` carried as
    coefficient vectors::

        delta = 0; delta[2k] = -1
        for j = k-1 .. 0:  alpha_j = (delta . B[:, j]) / B[j, k+j];  delta[k+j] -= alpha_j
        delta *= B[k-1, 2k-1] / B[2k-1, 2k-1]      # gamma = s'y / y'y of the newest pair
        for j = 0 .. k-1:  beta_j = (delta . B[k+j, :]) / B[j, k+j]; delta[j] += alpha_j - beta_j
    """
    k = int(n_pairs)
    if gram.shape != (2 * k + 1, 2 * k + 1):
        raise ValueError(f"gram must be ({2 * k + 1}, {2 * k + 1}) for {k} pairs, got {gram.shape}")
    delta = np.zeros(2 * k + 1)
    delta[2 * k] = -1.0
    if k == 0:
        return delta
    alpha = np.zeros(k)
    for j in range(k - 1, -1, -1):
        alpha[j] = (delta @ gram[:, j]) / gram[j, k + j]
        delta[k + j] -= alpha[j]
    delta *= gram[k - 1, 2 * k - 1] / gram[2 * k - 1, 2 * k - 1]
    for j in range(k):
        beta = (delta @ gram[k + j, :]) / gram[j, k + j]
        delta[j] += alpha[j] - beta
    return delta
