"""What a model reads of a dataset's schema to size itself (:meth:`Model.for_dataset`)."""

from __future__ import annotations

import math

from dasklbfgs._typing import Dataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError

__all__ = ["balanced_class_weight", "image_side", "n_classes"]


def n_classes(data: Dataset) -> int:
    """The classes ``data`` recorded, else one more than its largest label."""
    recorded = data.attrs.get("n_classes")
    return int(data.label_range[1]) + 1 if recorded is None else int(recorded)


def image_side(data: Dataset, name: str) -> int:
    """The side of the square images ``data``'s rows are (``patches`` with ``patch_size``)."""
    side = math.isqrt(data.n_features)
    if side * side != data.n_features:
        raise ModelDataMismatchError(f"{name} reads each row as a square image, but the dataset at "
                                     f"{data.url!r} has {data.n_features} features, not a square number")
    return side


def balanced_class_weight(data: Dataset, n_classes: int) -> list[float]:
    """scikit-learn's ``class_weight="balanced"`` from the totals ``data`` recorded when written:
    ``N / (K N_k)`` with ``N_k`` the total (sample) weight of class ``k``'s rows."""
    totals = data.label_weights if data.is_weighted else data.label_counts
    if totals is None:
        raise ConfigurationError(f"class_weight='balanced' needs the class totals, and the dataset at "
                                 f"{data.url!r} recorded none (its labels are not a few integers)")
    missing = [k for k in range(n_classes) if not totals.get(k)]
    if missing:
        raise ConfigurationError(f"class_weight='balanced' weighs each class by its share, and class(es) {missing} "
                                 f"have no rows (or no weight) in the dataset at {data.url!r}")
    total = sum(totals[k] for k in range(n_classes))
    return [total / (n_classes * totals[k]) for k in range(n_classes)]
