"""What every partitioned model shares: who owns which parameters, and the partition-major
layout of the parameter vector.

Partition p's parameters, in the order its program reads them, form one contiguous slice
``param_slices[p]`` of the *partitioned vector*, so that parameter shards can align with the
partitions (a partition then fetches and pushes one slice). The partitioned vector is a
permutation of the model's flat parameter vector: ``to_partitioned`` and ``from_partitioned``
move between the two exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasklbfgs.models.base import Model
from dasklbfgs.parallel.exchanges import Step
from dasklbfgs.parallel.in_process import run_in_process

__all__ = ["PartitionedModel", "even_bounds"]


#: partitioned models rebuilt in this process from their pickles, by (class, model, k)
_REBUILT: dict[tuple[type, str, int], PartitionedModel] = {}
_KEEP_REBUILT = 4


def _rebuilt(cls: type[PartitionedModel], model: Model, k: int) -> PartitionedModel:
    """``cls(model, k)``, built once per process for the same model (its repr is its
    configuration) and kept for the next pickle to arrive (the last few only)."""
    key = (cls, repr(model), k)
    if key not in _REBUILT:
        while len(_REBUILT) >= _KEEP_REBUILT:
            _REBUILT.pop(next(iter(_REBUILT)))
        _REBUILT[key] = cls(model, k)
    return _REBUILT[key]


def even_bounds(width: int, k: int) -> tuple[int, ...]:
    """Boundaries of ``k`` contiguous blocks of ``width`` units, as even as possible: block p
    is ``bounds[p]:bounds[p + 1]`` (the larger blocks first)."""
    size, extra = divmod(width, k)
    return tuple(p * size + min(p, extra) for p in range(k + 1))


class PartitionedModel:
    """A model split into ``k`` partitions. Subclasses set ``indices`` (per partition, the
    model-layout positions of its parameters in partition order) and write :meth:`program`."""

    def __init__(self, model: Model, k: int, indices: Sequence[np.ndarray]) -> None:
        self.model = model
        self.k = k
        self.order = np.concatenate(indices).astype(np.intp, copy=False)  # partitioned position -> model position
        stops = np.cumsum([len(index) for index in indices])
        self.param_slices = [slice(int(stop - len(index)), int(stop)) for index, stop in zip(indices, stops)]
        self.indices = [self.order[s] for s in self.param_slices]  # views: the index arrays are stored once

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its class, model and ``k``: the index arrays are as long as the parameter
        vector (670 MB at 42M parameters), so every task or actor call carrying a partitioned
        model would carry them; each process rebuilds them once instead (:func:`_rebuilt`)."""
        return _rebuilt, (type(self), self.model, self.k)

    def to_partitioned(self, params: np.ndarray) -> np.ndarray:
        """The model's parameter vector in partition-major order."""
        return np.asarray(params)[self.order]

    def from_partitioned(self, vector: np.ndarray) -> np.ndarray:
        """Back from the partition-major order to the model's layout (exact)."""
        vector = np.asarray(vector)
        params = np.empty(self.model.n_params, dtype=vector.dtype)
        params[self.order] = vector
        return params

    def split(self, params: np.ndarray) -> list[np.ndarray]:
        """Each partition's parameters (its slice of the partitioned vector)."""
        params = np.asarray(params)
        return [params[index] for index in self.indices]

    def join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The model's parameter vector from the K partitions' vectors."""
        return self.from_partitioned(np.concatenate(parts))

    def program(self, p: int, params_p: np.ndarray, X: np.ndarray, y: np.ndarray,
                w: np.ndarray | None = None) -> Step:
        """Generator computing partition ``p``'s share of the row sums: returns
        ``(loss_sum, grad_p)``, the loss sum identical on every partition and ``grad_p`` the
        gradient sum for partition p's parameters in its partition order."""
        raise NotImplementedError

    def loss_grad_sum(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """:meth:`Model.loss_grad_sum <dasklbfgs.models.base.Model.loss_grad_sum>` computed by
        the K partition programs in this process, joined back into the model's layout."""
        run = run_in_process([self.program(p, part, X, y, w) for p, part in enumerate(self.split(params))])
        return run.results[0][0], self.join([grad for _, grad in run.results])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, k={self.k})"


def layout_indices(model: Any) -> dict[str, np.ndarray]:
    """The model layout's named arrays, each filled with its own flat positions: slicing one
    gives the positions of that slice of the parameters."""
    return model.layout.views(np.arange(model.layout.size))
