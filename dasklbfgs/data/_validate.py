"""Checks applied to every block of rows before it is written to a sharded dataset."""

from __future__ import annotations

import numpy as np

from dasklbfgs.errors import ConfigurationError, InvalidDataError


def check_shard_rows(shard_rows: object) -> int:
    """Return ``shard_rows`` as an int, or raise if it is not a positive integer."""
    if not isinstance(shard_rows, (int, np.integer)) or isinstance(shard_rows, bool) or shard_rows <= 0:
        raise ConfigurationError(f"shard_rows must be a positive integer, got {shard_rows!r}")
    return int(shard_rows)


def check_fraction(value: float, name: str) -> None:
    """Raise unless ``value`` is in [0, 1)."""
    if not (0.0 <= value < 1.0):
        raise ConfigurationError(f"{name} must be in [0, 1), got {value!r}")


def check_numeric(array: np.ndarray, name: str) -> None:
    """Reject dtypes that are not real numbers (strings, objects, complex, datetimes)."""
    if array.dtype.kind not in "biuf":
        raise InvalidDataError(
            f"{name} must hold real numbers, got dtype {array.dtype!s} "
            "(convert or encode the column before writing)"
        )


def check_block_shapes(X: np.ndarray, y: np.ndarray, *, where: str) -> None:
    """Check X is 2-D, y is 1-D or 2-D and both have the same number of rows."""
    if y.ndim == 0:
        raise InvalidDataError(f"y must be 1-D or 2-D, got a scalar {where}")
    if X.ndim != 2:
        raise InvalidDataError(
            f"X must be 2-D (samples x features), got {X.ndim}-D shape {X.shape} {where}; "
            "reshape a single feature with X.reshape(-1, 1)"
        )
    if y.ndim not in (1, 2):
        raise InvalidDataError(f"y must be 1-D or 2-D, got {y.ndim}-D shape {y.shape} {where}")
    if X.shape[0] != y.shape[0]:
        raise InvalidDataError(
            f"X and y have different lengths {where}: X has {X.shape[0]} rows, "
            f"y has {y.shape[0]}"
        )


def _first_bad(bad: np.ndarray, first_row: int) -> tuple[tuple[int, ...], str]:
    """Index of the first True of ``bad`` and where it is in the dataset, ``"row 7, column 2"``."""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    column = f", column {index[1]}" if bad.ndim == 2 else ""
    return index, f"row {first_row + index[0]}{column}"


def check_finite(array: np.ndarray, name: str, *, first_row: int, shard: int) -> None:
    """Raise naming the shard, row and column of the first NaN or infinity."""
    if array.dtype.kind != "f":
        return
    bad = ~np.isfinite(array)
    if not bad.any():
        return
    index, where = _first_bad(bad, first_row)
    raise InvalidDataError(
        f"{name} holds a non-finite value ({array[index]}) in shard {shard} at {where}; "
        "drop or impute such rows before writing"
    )


def check_cast(given: np.ndarray, stored: np.ndarray, name: str, *, first_row: int, shard: int) -> None:
    """Raise when casting to the stored dtype changed a value (overflow, truncation)."""
    if given.dtype == stored.dtype:
        return
    changed = ~np.isfinite(stored) if stored.dtype.kind == "f" else stored != given
    if not changed.any():
        return
    index, where = _first_bad(changed, first_row)
    raise InvalidDataError(
        f"{name} value {given[index].item()!r} in shard {shard} at {where} does not fit the "
        f"stored dtype {stored.dtype} (fixed by the first block or the dtype argument)"
    )


def check_per_row_shape(values: np.ndarray, n_rows: int, *, where: str, name: str = "sample_weight") -> None:
    """Check a per-row array (sample weights, offsets: ``name``) is one number per row of X."""
    check_numeric(values, name)
    if values.ndim != 1 or values.shape[0] != n_rows:
        raise InvalidDataError(
            f"{name} must be 1-D with one number per row of X {where}: X has {n_rows} rows, "
            f"{name} has shape {values.shape}"
        )


def check_weight_values(w: np.ndarray, *, first_row: int, shard: int) -> None:
    """Raise naming the shard and row of the first NaN, infinite or negative weight."""
    check_finite(w, "sample_weight", first_row=first_row, shard=shard)
    negative = w < 0
    if negative.any():
        index, where = _first_bad(negative, first_row)
        raise InvalidDataError(
            f"sample_weight holds a negative weight ({w[index]}) in shard {shard} at {where}; "
            "weights must be >= 0 (0 leaves a row out)"
        )
