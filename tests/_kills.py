"""Killing a worker (SIGKILL) in the middle of a run, from the solver's callback."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any


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
