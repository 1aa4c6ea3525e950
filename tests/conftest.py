"""Shared fixtures: a real two-worker LocalCluster for the whole session."""

from __future__ import annotations

import pytest
from distributed import Client

from dasklbfgs import connect
from tests._datasets import datasets  # noqa: F401  (session fixture)


@pytest.fixture(scope="session")
def client() -> Client:
    """Two single-threaded worker processes on loopback, no dashboard."""
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None, memory_limit="2GiB") as c:
        c.wait_for_workers(2)
        yield c
