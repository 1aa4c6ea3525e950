"""Arithmetic on parameter-length vectors without parameter-length temporaries.

At millions of parameters a temporary is not free: numpy allocates it fresh (large blocks
come from the system and are faulted in page by page) and it is written and read once more.
These work in cache-sized blocks (:data:`BLOCK` elements) with one block-sized scratch buffer,
and give the same bits as the whole-vector expressions they replace.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "add_scaled", "max_abs", "products"]

#: Elements of a block: a few arrays of it fit in a core's L2 cache.
BLOCK = 1 << 15


def add_scaled(into: np.ndarray, scale: float, vector: np.ndarray) -> None:
    """``into += scale * vector``, in place, block by block (the same bits)."""
    scratch = np.empty(min(BLOCK, vector.size))
    for start in range(0, vector.size, BLOCK):
        block = slice(start, start + BLOCK)
        step = scratch[: len(vector[block])]
        np.multiply(vector[block], scale, out=step)
        into[block] += step


def max_abs(vector: np.ndarray) -> float:
    """``max |vector|`` (0 for an empty one; NaN if any element is NaN) from two reads and
    no ``|vector|`` formed whole."""
    if not vector.size:
        return 0.0
    return float(np.maximum(vector.max(), -vector.min()))


def products(matrices: tuple[np.ndarray, ...], vectors: tuple[np.ndarray, ...]) -> np.ndarray:
    """``out[a, :, b] = matrices[a] @ vectors[b]`` for a few long vectors, reading each
    matrix from memory once for all of them rather than once per vector.

    The columns go by blocks of :data:`BLOCK`: a block of every vector is copied into a
    small panel and each matrix's block multiplies it (one ``gemm`` of a thin panel, in
    cache), the blocks' products added in order. Each product is a sum in another order
    than one ``gemv``'s (other bits, as deterministic). L-BFGS's basis update takes the new
    pair's and the new gradient's products with the stored pairs this way: at millions of
    parameters it reads the pairs once instead of three times."""
    n, k = vectors[0].size, len(vectors)
    out = np.zeros((len(matrices), matrices[0].shape[0], k))
    panel = np.empty((k, min(BLOCK, n)))
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        width = stop - start
        for row, vector in zip(panel, vectors):
            row[:width] = vector[start:stop]
        block = panel[:, :width].T
        for into, matrix in zip(out, matrices):
            into += matrix[:, start:stop] @ block
    return out
