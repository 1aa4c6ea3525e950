"""What every partitioned model shares: who owns which parameters, and the partition-major
layout of the parameter vector.

Partition p's parameters, in the order its program reads them, form one contiguous slice
``param_slices[p]`` of the *partitioned vector*, so that parameter shards can align with the
partitions (a partition then fetches and pushes one slice). The partitioned vector is a
permutation of the model's flat parameter vector: ``to_partitioned`` and ``from_partitioned``
move between the two exactly.

A partition needs only its own block shapes (:meth:`PartitionedModel.own_shapes`): the index
arrays of the permutation are as long as the parameter vector and are built only where the
whole vector is converted (the client, the in-process reference), never on a worker that
trains one partition of a model too big for it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dasklbfgs.errors import PartitionError
from dasklbfgs.models._layers import Layout
from dasklbfgs.models.base import Model
from dasklbfgs.parallel.exchanges import Step
from dasklbfgs.parallel.in_process import run_in_process

__all__ = ["PartitionedModel", "even_bounds", "layout_of"]

Shapes = dict[str, tuple[int, ...]]


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


def layout_of(model: Model) -> Layout:
    """The layout of ``model``'s named arrays (every partitionable model has one)."""
    layout = getattr(model, "layout", None)
    if not isinstance(layout, Layout):
        raise PartitionError(f"{model!r} has no layout of named arrays: it cannot be partitioned")
    return layout


def even_bounds(width: int, k: int) -> tuple[int, ...]:
    """Boundaries of ``k`` contiguous blocks of ``width`` units, as even as possible: block p
    is ``bounds[p]:bounds[p + 1]`` (the larger blocks first)."""
    size, extra = divmod(width, k)
    return tuple(p * size + min(p, extra) for p in range(k + 1))


class PartitionedModel:
    """A model split into ``k`` partitions. Subclasses write :meth:`own_shapes` (partition
    p's blocks of the model's named arrays, in the order its vector holds them),
    :meth:`block_indices` (the model-layout positions of those blocks) and :meth:`program`."""

    def __init__(self, model: Model, k: int) -> None:
        self.model = model
        self.k = k
        sizes = [sum(math.prod(shape) for shape in self.own_shapes(p).values()) for p in range(k)]
        stops = np.cumsum(sizes)
        self.param_slices = [slice(int(stop - size), int(stop)) for size, stop in zip(sizes, stops)]

    def own_shapes(self, p: int) -> Shapes:
        """Partition p's block of each named array of the model's layout (a name absent: no
        block), in the order of its vector."""
        raise NotImplementedError

    def block_indices(self, p: int, positions: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Partition p's blocks, in :meth:`own_shapes`' order, cut out of ``positions`` (the
        model layout's named arrays holding their own flat positions)."""
        raise NotImplementedError

    def own_arrays(self, p: int, vector: np.ndarray) -> dict[str, np.ndarray]:
        """Views of partition p's blocks in its ``vector`` (its parameters or gradient), by name."""
        views, start = {}, 0
        for name, shape in self.own_shapes(p).items():
            stop = start + math.prod(shape)
            views[name] = vector[start:stop].reshape(shape)
            start = stop
        return views

    def own_coefficients(self, p: int, by_array: dict[str, float]) -> np.ndarray:
        """Partition p's vector holding ``by_array[name]`` in each named block (0 in the blocks
        of arrays not named): e.g. its weight decay, without the whole model's vector."""
        own = self.param_slices[p]
        vector = np.zeros(own.stop - own.start)
        for name, view in self.own_arrays(p, vector).items():
            view[...] = by_array.get(name, 0.0)
        return vector

    @functools.cached_property
    def order(self) -> np.ndarray:
        """Partitioned position -> model position (as long as the parameter vector: built on
        first use)."""
        positions = layout_of(self.model).views(np.arange(self.model.n_params))
        order = np.concatenate([block.ravel() for p in range(self.k) for block in self.block_indices(p, positions)])
        return order.astype(np.intp, copy=False)

    @property
    def indices(self) -> list[np.ndarray]:
        """Per partition, the model-layout positions of its parameters (views of :attr:`order`)."""
        return [self.order[s] for s in self.param_slices]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its class, model and ``k``: the index arrays are as long as the parameter
        vector (670 MB at 42M parameters), so every task or actor call carrying a partitioned
        model would carry them; each process rebuilds the model once instead (:func:`_rebuilt`),
        and its index arrays only if it converts whole vectors."""
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
                w: np.ndarray | None = None) -> Step[tuple[float, np.ndarray]]:
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
