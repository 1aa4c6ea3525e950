"""The Dask client a write by the workers uses: the one given, else the active one."""

from __future__ import annotations

from typing import Any

from dasklbfgs.errors import ConfigurationError

__all__ = ["active_client", "client_for"]


def active_client() -> Any:
    """The Dask client this process works with by default, or None."""
    from distributed import default_client

    try:
        return default_client()
    except ValueError:  # no client in this process
        return None


def client_for(client: Any, what: str) -> Any:
    """``client``, else the active client; with neither, a :class:`ConfigurationError`
    (a write by the workers needs a cluster, and starting one that ends with the write
    would be a surprise: ``dasklbfgs.connect()`` starts one to keep)."""
    if client is not None:
        return client
    active = active_client()
    if active is None:
        raise ConfigurationError(f"{what} is done by the workers of a Dask cluster, and there is no Dask client: "
                                 "pass client=, or create one first (dasklbfgs.connect() or distributed.Client())")
    return active
