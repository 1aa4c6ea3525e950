"""Type aliases used across dasklbfgs."""

from __future__ import annotations

import os
from typing import Union

import numpy as np
import numpy.typing as npt

PathLike = Union[str, "os.PathLike[str]"]
FloatArray = npt.NDArray[np.floating]
Array = npt.NDArray
