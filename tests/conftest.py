"""Shared fixtures: a real two-worker LocalCluster for the whole session, and a data home
of the session's own (recipe datasets built by pipelines never land in the user's cache)."""

from __future__ import annotations

import pytest
from distributed import Client

from dasklbfgs import connect
from tests._datasets import datasets  # noqa: F401  (session fixture)
from tests._s3 import s3, s3_server  # noqa: F401  (session fixture; a module-scoped server of its own)


@pytest.fixture(scope="session")
def client() -> Client:
    """Two single-threaded worker processes on loopback, no dashboard."""
    with connect(n_workers=2, threads_per_worker=1, dashboard_address=None, memory_limit="2GiB") as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture(scope="session", autouse=True)
def data_home(tmp_path_factory):
    """``$DASKLBFGS_DATA`` for this session (inherited by the commands tests start)."""
    from dasklbfgs.data.cache import DATA_HOME_VARIABLE

    with pytest.MonkeyPatch.context() as patch:
        home = tmp_path_factory.mktemp("data-home")
        patch.setenv(DATA_HOME_VARIABLE, str(home))
        yield home
