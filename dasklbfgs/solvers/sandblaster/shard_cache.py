"""The data shards Sandblaster keeps in worker memory, and where they are.

Each shard is loaded from Zarr once into one worker's memory as a Dask key (data affinity:
sequential shards on the same worker). Two things then change where shards live:

- **Backup copies.** A helper that ran a backup of a straggler's portion fetched the
  shard; it keeps it as a copy of its own (a key per copy, never reused), and the next
  evaluations split that shard's portions between the holders (dynamic load balancing).
- **Moves to balance the cluster.** Whenever the live workers' shard counts differ by more
  than one (a worker arrived, or a departed worker's shards were reloaded on the
  survivors), shards are copied from the most loaded workers to the least loaded ones; once
  a copy is in memory it *becomes* the shard and the old holder drops it. A moved shard's
  task may run anywhere if its worker leaves, so Dask reloads it from Zarr like an
  original.

Which worker holds what changes which worker computes which portion, never the sums: they
are added in portion order (docs/algorithms.md §1).

A dataset at a URL is loaded a batch of shards at a time: one task reads a worker's next
shards (up to :data:`BATCH_BYTES` of them in memory) with one concurrent fetch of all their
objects, several times the rate of one shard after another from an object store
(``python -m benchmarks.remote``), and each shard is then a key of its own picked from the
batch (the same arrays), released by the batch once picked. A lost shard is rebuilt by
loading its batch again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any

from dask.typing import Key
from distributed import Client, Future, wait

from dasklbfgs._format import human_bytes
from dasklbfgs._typing import Dataset
from dasklbfgs.data.location import has_scheme
from dasklbfgs.data.rows import aligned_rows
from dasklbfgs.errors import WorkerLostError
from dasklbfgs.solvers.sandblaster.portions import shards_fit
from dasklbfgs.solvers.sandblaster.tasks import (
    compact_positions,
    load_cached_shard,
    load_cached_shards,
    shard_of,
)

__all__ = ["ShardCache", "MAX_ATTEMPTS", "BATCH_BYTES", "choose_cache", "worker_memory_limits"]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
#: the in-memory bytes of the shards one load task reads at once from an object store: enough
#: objects in flight to keep the store busy, while a worker holds the fetched (compressed)
#: objects of one batch at most beside its shards
BATCH_BYTES = 256 * 2**20


class ShardCache:
    """The cached shards of one run: their futures, backup copies, moves under way."""

    def __init__(self, client: Client, data: Dataset | None, token: str, workers: list[str],
                 shards: list[Future] | None = None) -> None:
        self.client, self.token = client, token
        if shards is None:
            assert data is not None, "a cache loads its dataset's shards unless it is given them"
            n = data.n_shards
            homes = [workers[i * len(workers) // n] for i in range(n)]  # runs of sequential shards
            shards = self._batched(data, homes) if has_scheme(data.url) else [
                client.submit(load_cached_shard, data, i, key=f"sandblaster-shard-{token}-{i}",
                              workers=[homes[i]], allow_other_workers=True, pure=False)
                for i in range(n)
            ]
        self.shards: list[Future] = shards
        self.copies: dict[int, dict[str, Future]] = {}  # shard -> helper -> its copy there
        self.moving: dict[int, Future] = {}  # shard -> its copy on the worker it moves to
        self.moves = 0  # shards moved so far
        self._copies_made = 0  # numbers every copy's key: a key is never reused
        self._positions: dict[Any, list[Any]] = {}  # model layout -> per shard, compact_positions
        self._facts: dict[str, Any] = {}  # what remembered() computed once of these rows
        try:
            wait(self.shards)
            for f in self.shards:
                if f.status == "error":
                    f.result()  # re-raise the worker's exception here
        except BaseException:
            # the error's traceback holds this cache: without the release, its shards would
            # stay in worker memory for as long as the caller keeps the error
            self.close()
            raise

    @classmethod
    def of_futures(cls, client: Client, shards: list[Future], token: str) -> ShardCache:
        """A cache of shards computed by other tasks (a cross-validation fold's view of
        cached shards), one future per shard in order, waited for here."""
        return cls(client, None, token, [], shards=shards)

    def _batched(self, data: Dataset, homes: list[str]) -> list[Future]:
        """The shards' futures, each picked from a batch of its worker's shards loaded at once."""
        per_shard = max(data.nbytes_in_memory // max(data.n_shards, 1), 1)
        batches: list[list[int]] = []
        for i, home in enumerate(homes):
            batch = batches[-1] if batches else []
            if batch and homes[batch[0]] == home and (len(batch) + 1) * per_shard <= BATCH_BYTES:
                batch.append(i)
            else:
                batches.append([i])
        shards: list[Future] = []
        for number, batch in enumerate(batches):
            loaded = self.client.submit(load_cached_shards, data, batch, key=f"sandblaster-load-{self.token}-{number}",
                                        workers=[homes[batch[0]]], allow_other_workers=True, pure=False)
            shards += [self.client.submit(shard_of, loaded, j, key=f"sandblaster-shard-{self.token}-{i}",
                                          workers=[homes[i]], allow_other_workers=True, pure=False)
                       for j, i in enumerate(batch)]
        return shards  # the batches' futures dropped: each batch's data goes once its shards are picked

    def remembered(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per cache: a fact of the cached rows alone (their column
        moments), which every run on them (a path's fits, a fold's) then shares."""
        if name not in self._facts:
            self._facts[name] = compute()
        return self._facts[name]

    def compact_positions(self, model: Any) -> list[Any]:
        """Per shard, the parameters its portions read (:func:`.tasks.compact_positions`),
        each asked of the shard where it lives; they depend on the data and the model's
        parameter layout alone (asked once per layout: the fits of a path share them), so a
        shard reloaded or moved later reads the same ones."""
        layout = (type(model), model.n_params, getattr(model, "n_outputs", None))
        if layout not in self._positions:
            self._positions[layout] = self.client.gather([
                self.client.submit(compact_positions, shard, model=model, pure=False) for shard in self.shards])
        return self._positions[layout]

    def live_workers(self) -> dict[str, str]:
        """The workers the scheduler knows, with their status ("running", "closing_gracefully", ...)."""
        return {w: info["status"] for w, info in self.client.scheduler_info(n_workers=-1)["workers"].items()}

    def holders(self) -> list[dict[str | None, Future]]:
        """Per shard: worker -> the future holding that shard there (the shard itself, and
        the copies backups left on helpers that hold them by now). Finishes the moves whose
        copies have arrived and starts the moves the cluster's balance asks for."""
        for _attempt in range(MAX_ATTEMPTS):
            if gone := [i for i, f in enumerate(self.shards) if f.cancelled()]:
                raise WorkerLostError(f"the cached shards {gone} were cancelled (the client lost its scheduler, "
                                      "or the cluster was restarted); start the run again")
            live = self.live_workers()
            self._drop_lost_copies(set(live))
            keys = self.shards + list(self.moving.values()) + [f for c in self.copies.values() for f in c.values()]
            try:
                where = self.client.who_has(keys)
                break
            except CancelledError:  # a copy was given up since the check: drop it and ask again
                continue
        else:
            raise WorkerLostError(f"the shard copies kept being cancelled {MAX_ATTEMPTS} times in a row")
        self._finish_moves(where)
        self._start_moves(where, sorted(w for w, status in live.items() if status == "running"))
        out: list[dict[str | None, Future]] = []
        for i, shard in enumerate(self.shards):
            holders: dict[str | None, Future] = {w: shard for w in where.get(shard.key, ())}
            for w, copy in self.copies.get(i, {}).items():
                if w in where.get(copy.key, ()):  # a copy still being made is used from the next time on
                    holders.setdefault(w, copy)
            out.append(holders or {None: shard})
        return out

    def keep_copy(self, shard: int, worker: str) -> None:
        """Keep the shard a backup fetched on ``worker`` as a key of its own, aligned (a plain
        replica would be dropped by Dask's memory manager)."""
        if worker not in self.copies.setdefault(shard, {}):
            self.copies[shard][worker] = self._copy(shard, worker, stays=True)

    def _copy(self, shard: int, worker: str, *, stays: bool) -> Future:
        """A copy of ``shard`` made on ``worker`` from its holder. A copy that ``stays`` there
        (a helper's) is given up with its worker; a moved shard may be rebuilt elsewhere."""
        self._copies_made += 1
        return self.client.submit(
            aligned_rows, self.shards[shard], key=f"sandblaster-shard-{self.token}-{shard}-copy-{self._copies_made}",
            workers=[worker], allow_other_workers=not stays, pure=False,
        )

    def _drop_lost_copies(self, live: set[str]) -> None:
        """Forget the copies on workers that left and the ones Dask gave up on."""
        for copies in self.copies.values():
            for w, copy in list(copies.items()):
                if w not in live or copy.status in ("cancelled", "error", "lost"):
                    self.client.cancel([copy])
                    del copies[w]
        for i, copy in list(self.moving.items()):
            if copy.status in ("cancelled", "error", "lost"):
                self.client.cancel([copy])
                del self.moving[i]

    def _finish_moves(self, where: dict[Key, Any]) -> None:
        """A moved shard's copy in memory becomes the shard; the old holder drops its data
        (its task is kept by Dask as the copy's dependency, to rebuild it if need be)."""
        for i, copy in list(self.moving.items()):
            if where.get(copy.key):
                self.shards[i] = copy
                del self.moving[i]
                self.moves += 1

    def _start_moves(self, where: dict[Key, Any], live: list[str]) -> None:
        """Copy shards from the workers holding the most to those holding the fewest until
        the counts differ by at most one (none while earlier moves are under way)."""
        if self.moving or len(live) < 2:
            return
        held: dict[str, list[int]] = {w: [] for w in live}
        for i, shard in enumerate(self.shards):
            holder = min(where.get(shard.key, ()), default=None)
            if holder in held:
                held[holder].append(i)
        counts = Counter({w: len(shards) for w, shards in held.items()})
        while True:
            most = max(live, key=lambda w: (counts[w], w))
            fewest = min(live, key=lambda w: (counts[w], w))
            if counts[most] - counts[fewest] <= 1:
                return
            i = held[most].pop()  # its last shard: runs of sequential shards stay together
            self.moving[i] = self._copy(i, fewest, stays=False)
            counts[most] -= 1
            counts[fewest] += 1

    def close(self) -> None:
        """Release the cached shards and their copies from worker memory."""
        copies = [f for c in self.copies.values() for f in c.values()]
        self.client.cancel(self.shards + list(self.moving.values()) + copies)
        self.shards, self.copies, self.moving = [], {}, {}


def worker_memory_limits(client: Client) -> list[int]:
    """Each worker's memory limit in bytes (0: none), what :func:`.portions.shards_fit` weighs."""
    return [w.get("memory_limit") or 0 for w in client.scheduler_info(n_workers=-1)["workers"].values()]


def choose_cache(client: Client, option: bool | str, data: Dataset, given: Any) -> bool:
    """Whether a run caches ``data``'s shards in the workers' memory: its ``cache`` option when
    True or False; with ``"auto"``, yes when shards are ``given`` cached already
    (:func:`dasklbfgs.cached`) or fit in half the workers' memory limits, else streaming."""
    if isinstance(option, bool):  # else "auto" (the option's kind allows no other value)
        return option
    if given is not None:  # cached already: nothing to decide
        return True
    limits = worker_memory_limits(client)
    cache = shards_fit(data.nbytes_in_memory, limits)
    logger.info("%s the dataset (%s in memory; worker memory limits %s)", "caching" if cache else "streaming",
                human_bytes(data.nbytes_in_memory), ", ".join(human_bytes(n) if n else "none" for n in limits))
    return cache
