"""Names a package exports but imports on first use (PEP 562 module ``__getattr__``).

``import dasklbfgs`` is what a script, the ``dasklbfgs`` command and every worker that runs
one of our tasks pay before anything else happens: the packages' ``__init__`` modules name
their public API here instead of importing it, so that Dask, zarr, scipy.optimize and the
dashboard's bokeh load where they are used (``from dasklbfgs import minimize`` imports the
solvers then). Each package also imports its names under ``typing.TYPE_CHECKING``, so type
checkers and editors see them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names in ``where`` (name ->
    the module that defines it).

    The first access imports the module and stores the name in the package, so later ones
    are plain attribute reads.
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
