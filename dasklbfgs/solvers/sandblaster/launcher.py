"""The Dask tasks of one evaluation, and the workers they may run on.

Every copy of a portion is a task with a key of its own, ``sandblaster-<kind>-<token>-
<evaluation>-<portion>``: ``gradient`` for the primary (on cached shards pinned to a holder
of its shard; streaming, anywhere), ``backup`` for a copy on an idle worker, ``rescue`` for
a re-run from Zarr of a portion whose worker left. Tasks are not pure (a key names one
attempt, never a value to share) and never run on another worker than the one named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import Client, Future

from dasklbfgs._typing import Dataset
from dasklbfgs.solvers.sandblaster.portions import Portion
from dasklbfgs.solvers.sandblaster.shard_cache import ShardCache
from dasklbfgs.solvers.sandblaster.tasks import portion_loss_grad, portion_loss_grad_from_store

__all__ = ["ClusterWorkers", "TaskLauncher"]


class ClusterWorkers:
    """The scheduler's view of the workers, and the threads each had when last asked."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.threads: dict[str, int] = {}

    def live(self) -> dict[str, Any]:
        """The workers in the cluster now (waiting for one when there are none), with their info."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        if not workers:
            self.client.wait_for_workers(1)
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
        self.threads = {w: int(info.get("nthreads", 1)) for w, info in workers.items()}
        return workers


@dataclass(frozen=True)
class TaskLauncher:
    """Submits the tasks of evaluation number ``evaluation`` at parameters ``x`` (carried
    inline, or a future of them on the cluster)."""

    client: Client
    token: str
    evaluation: int
    model: Any  # what the tasks call portion_loss_grad_sum on: the model or its partitioned replicas
    data: Dataset
    x: Future | np.ndarray
    cached: ShardCache | None  # None: streaming

    def pinned(self, portions: Sequence[Portion], holders: Sequence[Mapping[str | None, Future]],
               workers: Sequence[str | None]) -> list[Future]:
        """The primary tasks of ``portions`` on cached shards, each on its worker of
        ``workers`` (None: wherever its shard is being reloaded) reading its shard there
        (``holders``: per shard, worker -> its copy); one message to the scheduler per worker."""
        futures: dict[int, Future] = {}
        for worker in dict.fromkeys(workers):
            mine = [p for p, w in zip(portions, workers) if w == worker]
            mapped = self.client.map(
                portion_loss_grad, [holders[p.shard][worker] for p in mine], [p.local for p in mine],
                model=self.model, x=self.x, key=[self._key("gradient", p) for p in mine],
                workers=None if worker is None else [worker], allow_other_workers=False, pure=False,
            )
            futures.update((p.index, f) for p, f in zip(mine, mapped))
        return [futures[p.index] for p in portions]

    def from_store(self, kind: str, portions: Sequence[Portion], worker: str | None = None) -> list[Future]:
        """Tasks of ``kind`` computing ``portions`` from rows read from Zarr (streamed
        primaries, rescues, streamed backups), on ``worker`` only, or anywhere when None."""
        return self.client.map(
            portion_loss_grad_from_store, [p.start for p in portions], [p.stop for p in portions],
            model=self.model, data=self.data, x=self.x, key=[self._key(kind, p) for p in portions],
            workers=None if worker is None else [worker], allow_other_workers=False, pure=False,
        )

    def backup(self, p: Portion, worker: str) -> Future:
        """A copy of portion ``p`` on ``worker``, reading its shard from the worker that holds
        it (cheaper than decoding the shard's Zarr chunk again; the helper keeps it, see
        :meth:`ShardCache.keep_copy`). Streaming: a second read from Zarr."""
        if self.cached is None:
            return self.from_store("backup", [p], worker)[0]
        return self.client.submit(
            portion_loss_grad, self.cached.shards[p.shard], p.local, model=self.model, x=self.x,
            key=self._key("backup", p), workers=[worker], allow_other_workers=False, pure=False,
        )

    def _key(self, kind: str, p: Portion) -> str:
        return f"sandblaster-{kind}-{self.token}-{self.evaluation}-{p.index}"
