"""Killing a worker (SIGKILL) in the middle of a run, from the solver's callback."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any


def _keys(dask_scheduler) -> list[str]:
    return sorted(map(str, dask_scheduler.tasks))


def _actors(dask_worker) -> list[str]:
    return sorted(map(str, dask_worker.state.actors))


def nothing_left(client: Any, seconds: float = 10.0) -> bool:
    """No key on the scheduler and no actor on a worker (releases are asynchronous)."""
    deadline = time.monotonic() + seconds
    while client.run_on_scheduler(_keys) or any(client.run(_actors).values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def workers_restored(client: Any, n: int, timeout: float = 120) -> Any:
    """``client`` once its LocalCluster has ``n`` workers again after a test killed some: a
    nanny that gave up is replaced by a new one. On a timeout, the nannies' states, to say why."""
    local = client.cluster
    for name in set(local.worker_spec) - set(local.workers):  # a nanny that gave up, not just a worker
        del local.worker_spec[name]
    local.scale(n)  # its place taken by a new one (a killed worker's nanny is seen to close under load)
    try:
        client.wait_for_workers(n, timeout=timeout)
    except TimeoutError:
        nannies = {name: (nanny.status.name, getattr(nanny.process, "status", None) if nanny.process else None)
                   for name, nanny in local.workers.items()}
        raise TimeoutError(f"a killed worker was not started again; the nannies (status, worker process): "
                           f"{nannies}") from None
    return client


def kill_at_iteration(client: Any, iteration: int, victim: int) -> tuple[Callable[[Any], None], dict[str, int]]:
    """A callback that SIGKILLs the ``victim``-th worker (in sorted address order) once the run
    reaches ``iteration``, and the dict that records the killed process id and worker address."""
    killed: dict[str, Any] = {}

    def callback(intermediate: Any) -> None:
        if intermediate.step == iteration and not killed:
            address = sorted(client.scheduler_info()["workers"])[victim]
            killed["pid"], killed["worker"] = client.run(os.getpid, workers=[address])[address], address
            os.kill(killed["pid"], signal.SIGKILL)

    return callback, killed
