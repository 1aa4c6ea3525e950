"""Arrays that arrive over the wire (task arguments, actor calls, shards copied between workers)."""

from __future__ import annotations

import gc

import numpy as np

from dasklbfgs._typing import is_sparse
from dasklbfgs.models.compact_rows import CompactColumns

__all__ = ["INLINE_PARAMS_BYTES", "aligned", "free_answered_calls"]

#: Parameters up to this size travel inside each task instead of being scattered first (a
#: round trip saved; 8 tasks' copies of a 64 KiB vector are 0.5 MiB through the scheduler).
INLINE_PARAMS_BYTES = 64 * 1024


def aligned(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or an aligned copy when its buffer is not aligned to its item size.

    Arrays that reach a worker over the wire (the parameters, a shard copied for a backup
    task) can start at any byte of a message frame. numpy's matmul does not hand such
    arrays to BLAS but uses its own loop, which rounds differently (and runs slower), so
    the same portion would give other bits on a copied shard than on the original.
    """
    if is_sparse(a) or isinstance(a, CompactColumns):  # scipy's sparse products are its own loops,
        return a                                          # whatever the alignment
    return a if a.flags.aligned else np.require(a, requirements="A")


def free_answered_calls() -> None:
    """Free the arguments of actor calls that have been answered.

    distributed's remote actor call (``run_actor_function_on_worker`` in ``Actor.__getattr__``)
    refers to itself through its closure, so each call's arguments (a pushed gradient, a
    partition's activations, a portion's rows) stay in a reference cycle until Python's cyclic
    collector runs, and that runs by counts of objects, not bytes: a 19M-parameter replica
    held several gradients so, 11-13 parameter vectors at its peak instead of 6 (measured with
    tracemalloc), and kept them after its run. The cycles are young when the reply arrives: a
    collection of the two young generations (~0.03 ms) frees them. Call it after waiting for
    calls that carried large arrays."""
    gc.collect(1)
