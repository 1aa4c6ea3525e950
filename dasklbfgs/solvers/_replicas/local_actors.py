"""Calls from a long-running task to actors hosted by its own worker, without the network.

A Downpour replica pushes to and fetches from every parameter shard, and a peer replica
sends to its peers' mailboxes; some of them usually live on the replica's own worker. Through the actor handle that call still goes over a
TCP connection to the same process, and both the payload and the reply are serialised
(a megabyte each way for a million float64 parameters). :func:`bind_local` swaps such
handles for :class:`OnWorkerLoop`, which schedules the same ``async`` method on the
worker's event loop (where the actor's other calls run, so there is no new concurrency)
and returns a future with ``.result()``, like an actor call's. Handles of actors on other
workers are returned unchanged. Replies are the actor's own return values, not copies:
the shards return fresh arrays from ``fetch`` and ``push``.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["OnWorkerLoop", "bind_local"]


class OnWorkerLoop:
    """An actor instance on this worker, called on the worker's event loop."""

    def __init__(self, instance: Any, loop: asyncio.AbstractEventLoop, key: str) -> None:
        self._instance, self._loop, self.key = instance, loop, key

    @property
    def instance(self) -> Any:
        """The actor object itself, for calls that must run in the caller's thread."""
        return self._instance

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._instance, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)

        return call


def bind_local(handles: list[Any]) -> list[Any]:
    """``handles`` with those of actors on this worker replaced by :class:`OnWorkerLoop`;
    unchanged outside a Dask worker."""
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not in a Dask task
        return list(handles)
    actors, loop = worker.state.actors, worker.loop.asyncio_loop
    return [OnWorkerLoop(actors[h.key], loop, h.key) if h.key in actors else h for h in handles]
