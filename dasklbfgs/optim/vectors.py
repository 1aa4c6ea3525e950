"""Arithmetic on parameter-length vectors without parameter-length temporaries.

At millions of parameters a temporary is not free: numpy allocates it fresh (large blocks
come from the system and are faulted in page by page) and it is written and read once more.
These work in cache-sized blocks (:data:`BLOCK` elements) with one block-sized scratch buffer,
and give the same bits as the whole-vector expressions they replace.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "add_scaled", "max_abs"]

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
