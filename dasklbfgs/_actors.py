"""Calls from a long-running task to actors hosted by its own worker, without the network.

A Downpour replica calls every parameter shard, a peer replica its peers' mailboxes; some
usually live on the replica's own worker, where an actor call still goes over TCP to the
same process and serialises payload and reply. :func:`bind_local` swaps such handles for
:class:`OnWorkerLoop`, which schedules the same ``async`` method on the worker's event loop
(where the actor's other calls run: no new concurrency) and returns a future with
``.result()``. Replies are the actor's own return values, not copies (the shards return
fresh arrays from ``fetch`` and ``push``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

if TYPE_CHECKING:
    from tornado.platform.asyncio import BaseAsyncIOLoop

__all__ = ["ActorRef", "OnWorkerLoop", "bind_local", "remote_first", "wait_all"]


class ActorRef(NamedTuple):
    """What a task needs to call an actor, given instead of the handle: a task given a
    handle depends on the actor, and Dask fails it when that actor's worker is lost, even
    if the task runs on a live worker (a surviving replica would lose its state with a peer)."""

    cls: type
    address: str  # the worker the actor was placed on
    key: str

    def handle(self) -> Any:
        from distributed.actor import Actor

        return Actor(self.cls, self.address, self.key)


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


def wait_all(calls: list[Any]) -> list[Any]:
    """The replies of actor calls (or :class:`OnWorkerLoop` calls), all sent before the first wait."""
    return [c.result() for c in calls]


def remote_first(handles: list[Any], call: Callable[[int, Any], Any]) -> list[Any]:
    """``call(i, handle)`` for every handle, in the handles' order, started remote handles
    first: a call to an actor on this worker runs on the event loop that also writes the
    remote calls' requests, so those go out before its work begins and both overlap."""
    calls: dict[int, Any] = {}
    for i in sorted(range(len(handles)), key=lambda i: isinstance(handles[i], OnWorkerLoop)):
        calls[i] = call(i, handles[i])
    return [calls[i] for i in range(len(handles))]


def bind_local(handles: list[Any]) -> list[Any]:
    """``handles`` with those of actors on this worker replaced by :class:`OnWorkerLoop`;
    unchanged outside a Dask worker."""
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not in a Dask task
        return list(handles)
    # typed as a plain IOLoop, but every Tornado 6 IOLoop runs on asyncio (a BaseAsyncIOLoop)
    actors, loop = worker.state.actors, cast("BaseAsyncIOLoop", worker.loop).asyncio_loop
    return [OnWorkerLoop(actors[h.key], loop, h.key) if h.key in actors else h for h in handles]
