"""Which models can be partitioned, and :func:`partition`.

:data:`PARTITIONERS` is the explicit list: a model class -> the class that splits it. A
partitioned model (:class:`~dasklbfgs.parallel.base.PartitionedModel`) knows who owns which
parameters, the partition-major layout of the parameter vector and each partition's program.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs.errors import PartitionError
from dasklbfgs.models.base import Model
from dasklbfgs.models.local_autoencoder import LocalAutoencoder
from dasklbfgs.models.mlp import MLP
from dasklbfgs.parallel.base import PartitionedModel
from dasklbfgs.parallel.local import PartitionedLocalAutoencoder
from dasklbfgs.parallel.mlp import PartitionedMLP

__all__ = ["PARTITIONERS", "partition"]

#: Model class -> its partitioner (``partitioner(model, k)``).
PARTITIONERS: dict[type[Model], type[PartitionedModel]] = {
    MLP: PartitionedMLP,
    LocalAutoencoder: PartitionedLocalAutoencoder,
}


def partitionable() -> list[str]:
    return [cls.__name__ for cls in PARTITIONERS]


def partition(model: Model, k: Any) -> PartitionedModel:
    """``model`` split into ``k`` partitions (each owning a contiguous block of every layer's
    units: of the MLP's units, of the local autoencoder's hidden-grid and pixel rows);
    :class:`~dasklbfgs.errors.PartitionError` when the model has no partition program,
    ``k`` is not an integer >= 1, or a layer has fewer units than ``k``."""
    partitioner = PARTITIONERS.get(type(model))
    if partitioner is None:
        raise PartitionError(f"{type(model).__name__} cannot be partitioned ({model!r}); the partitionable "
                             f"models are {partitionable()}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise PartitionError(f"the number of partitions must be an integer >= 1, got k={k!r}")
    return partitioner(model, int(k))
