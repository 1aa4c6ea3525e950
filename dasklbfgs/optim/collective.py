"""Who talks to whom, and how parameters mix: the pure math of the peer methods.

Synchronous SGD reduces gradients up a binary tree of replicas and broadcasts the result
down it; neighbour exchange sends gradients along a ring or a 2-D torus; gossip mixes with
a random peer; EASGD moves a replica and the center toward each other (docs/algorithms.md §6,
§7). Nothing here touches Dask, so every rule is unit-tested on plain arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError

__all__ = [
    "TOPOLOGIES", "tree_children", "tree_parent", "torus_shape", "neighbours", "exchange_weights", "gossip_peer",
    "elastic_difference", "gossip_pull", "push_sum_split",
]

TOPOLOGIES = ("ring", "torus")


def tree_children(replica: int, n_replicas: int) -> list[int]:
    """Children of ``replica`` in the binary reduction tree rooted at replica 0."""
    return [c for c in (2 * replica + 1, 2 * replica + 2) if c < n_replicas]


def tree_parent(replica: int) -> int | None:
    return None if replica == 0 else (replica - 1) // 2


def torus_shape(n_replicas: int, shape: Any = None) -> tuple[int, int]:
    """The (rows, cols) grid of a torus of ``n_replicas``: ``shape`` if given, else the most
    nearly square factorisation with at least 2 rows and 2 columns."""
    if shape is not None:
        try:
            rows, cols = (int(v) for v in shape)
        except (TypeError, ValueError):
            raise ConfigurationError(f"torus_shape must be two integers (rows, cols), got {shape!r}") from None
        if rows < 2 or cols < 2 or rows * cols != n_replicas:
            raise ConfigurationError(
                f"torus_shape {shape!r} does not lay out {n_replicas} replicas on a grid of at least 2 x 2"
            )
        return rows, cols
    for rows in range(math.isqrt(n_replicas), 1, -1):
        if n_replicas % rows == 0:
            return rows, n_replicas // rows
    raise ConfigurationError(
        f"a torus needs a rectangular replica count (rows x cols, both >= 2); {n_replicas} replicas "
        "is not one: use topology='ring' or a count such as 4, 6, 8 or 9"
    )


def neighbours(replica: int, n_replicas: int, topology: str, shape: Any = None) -> list[int]:
    """The distinct replicas ``replica`` exchanges gradients with (none with one replica)."""
    if topology not in TOPOLOGIES:
        raise ConfigurationError(f"topology must be one of {TOPOLOGIES!r}, got {topology!r}")
    if topology == "ring":
        candidates = [(replica - 1) % n_replicas, (replica + 1) % n_replicas]
    else:
        rows, cols = torus_shape(n_replicas, shape)
        r, c = divmod(replica, cols)
        candidates = [((r - 1) % rows) * cols + c, ((r + 1) % rows) * cols + c,
                      r * cols + (c - 1) % cols, r * cols + (c + 1) % cols]
    return sorted({k for k in candidates if k != replica})


def exchange_weights(replica: int, n_replicas: int, topology: str, shape: Any = None) -> tuple[float, dict[int, float]]:
    """Weights of a replica's own gradient and of each neighbour's in neighbour exchange.

    Lazy Metropolis weights, ``W = (I + M) / 2`` with ``M_ik = 1 / (1 + max(deg_i, deg_k))``:
    symmetric, rows summing to 1, and positive semi-definite. Applying neighbours' raw
    gradients instead (``I + A``) is unstable: on a ring of 4 the mode where neighbours
    err in opposite directions has eigenvalue -1, so each step *adds* ``lr H e`` to that
    error and replicas drift apart exponentially (measured: Softmax diverges at a rate one
    replica trains fine with). With ``W`` every mode contracts, and the replicas' mean
    takes plain SGD steps.
    """
    near = neighbours(replica, n_replicas, topology, shape)
    degree = len(near)
    weights = {k: 0.5 / (1 + max(degree, len(neighbours(k, n_replicas, topology, shape)))) for k in near}
    return 1.0 - sum(weights.values()), weights


def gossip_peer(rng: np.random.Generator, replica: int, n_replicas: int) -> int:
    """A peer drawn uniformly from the other replicas."""
    k = int(rng.integers(n_replicas - 1))
    return k + (k >= replica)


def elastic_difference(x: np.ndarray, center: np.ndarray, alpha: float) -> np.ndarray:
    """EASGD's ``d = alpha (x_i - x~)``: the replica subtracts it, the center adds it."""
    return alpha * (x - center)


def gossip_pull(x: np.ndarray, peer: np.ndarray) -> np.ndarray:
    """Pull gossip's mixing step: the average of a replica and the peer it pulled."""
    return 0.5 * (x + peer)


def push_sum_split(numerator: np.ndarray, weight: float) -> tuple[np.ndarray, float]:
    """Push-sum: halve the numerator and weight in place; the other half goes to a peer.

    Sums of numerators and of weights over all replicas never change, so the weighted
    average ``sum(numerator) / sum(weight)`` stays the unbiased consensus value.
    """
    numerator *= 0.5
    return numerator.copy(), weight * 0.5
