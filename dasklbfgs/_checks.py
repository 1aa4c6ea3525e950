"""Argument checks shared across the package."""

from __future__ import annotations

from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError


def check_int(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an int, or :class:`ConfigurationError` if it is not an integer
    ``>= minimum`` (booleans are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
