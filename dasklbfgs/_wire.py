"""Arrays that arrive over the wire (task arguments, actor calls, shards copied between workers)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dasklbfgs.models.compact_rows import CompactColumns

__all__ = ["aligned"]


def aligned(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or an aligned copy when its buffer is not aligned to its item size.

    Arrays that reach a worker over the wire (the parameters, a shard copied for a backup
    task) can start at any byte of a message frame. numpy's matmul does not hand such
    arrays to BLAS but uses its own loop, which rounds differently (and runs slower), so
    the same portion would give other bits on a copied shard than on the original.
    """
    if sp.issparse(a) or isinstance(a, CompactColumns):  # scipy's sparse products are its own loops,
        return a                                          # whatever the alignment
    return a if a.flags.aligned else np.require(a, requirements="A")
