"""Where replicas find the current parameter-shard actors, after a shard is re-created.

The coordinator publishes each shard's actor future in a Dask ``Variable`` and bumps a
generation number whenever it replaces a shard lost with its worker. A replica whose call
to a shard fails (the actor's worker died) waits for a newer generation and continues with
the new handles; a replica restarted by Dask on another worker looks them up on start.
"""

from __future__ import annotations

import time
from typing import Any

from distributed import Future, Variable

from dasklbfgs.errors import WorkerLostError

__all__ = ["ShardDirectory"]

LOOKUP_SECONDS = 2.0  # a published actor's future answers at once; one that does not may have been released


class ShardDirectory:
    """Named Dask Variables: ``NAME-generation`` and ``NAME-shard-i`` (actor futures)."""

    def __init__(self, name: str, n_shards: int, client: Any = None) -> None:
        self.name, self.n_shards, self.client = name, n_shards, client

    def __reduce__(self) -> tuple[Any, ...]:
        return (ShardDirectory, (self.name, self.n_shards))  # on a worker: the worker's client

    def _variable(self, suffix: str) -> Variable:
        return Variable(f"{self.name}-{suffix}", client=self.client)

    def publish(self, futures: list[Future], generation: int) -> None:
        """Coordinator: make these actors current (shards first, then the generation)."""
        for i, future in enumerate(futures):
            self._variable(f"shard-{i}").set(future)
        self._variable("generation").set(generation)

    def current(self, newer_than: int = -1, timeout: float = 120.0) -> tuple[int, list[Any]]:
        """Replica: wait for a generation above ``newer_than``; its number and actor handles.

        A generation whose actors are gone (a shard's worker died after it was published, or
        the coordinator has already released it for a newer one) is skipped: the replacement
        comes next. Published actors exist already, so their futures answer at once."""
        deadline = time.monotonic() + timeout
        generation = self._variable("generation")
        while True:
            current = int(generation.get(timeout=timeout))
            if current > newer_than:
                try:
                    return current, [self._variable(f"shard-{i}").get(timeout=timeout).result(timeout=LOOKUP_SECONDS)
                                     for i in range(self.n_shards)]
                except RuntimeError:  # "Worker holding Actor was lost"
                    newer_than = current
                except TimeoutError:  # a key released for a newer generation (or a slow answer): look again
                    pass
            if time.monotonic() > deadline:
                raise WorkerLostError(
                    f"parameter shards of {self.name!r} were lost and not re-created within {timeout:.0f} s"
                )
            time.sleep(0.05)

    def delete(self) -> None:
        for suffix in ["generation", *(f"shard-{i}" for i in range(self.n_shards))]:
            self._variable(suffix).delete()
