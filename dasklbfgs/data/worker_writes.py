"""Datasets written by the workers: each shard assembled, checked and written by a task.

The input is a sequence of *pieces*, lazy row blocks (dask ``Delayed`` objects computing to
``(X, y, w)`` or ``(X, y, w, offset)``: a dask array's row chunks, a DataFrame's partitions, a file's byte ranges)
whose row counts are known. Shard ``s`` covers rows ``[s * shard_rows, (s + 1) * shard_rows)``;
its task takes the pieces that overlap it, cuts and joins their rows, checks them and writes
them (:class:`~dasklbfgs.data._shard_format.ShardFormat`, the format a single writer uses,
so the bytes are the same). The client creates the empty arrays, sends the graph, receives
per-shard summaries (label counts, weight sums, non-zeros) and commits the schema last:
no row passes through it.

A bad row anywhere fails the write: every task is waited for, then the error of the first
failing shard is raised and the partial dataset removed
(:func:`~dasklbfgs.data._writer.written_atomically`). An interrupted write (Ctrl-C) cancels
the tasks and waits for those already running to end before anything is removed
(:func:`results_once_all_ended`).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import zarr

from dasklbfgs.data._shard_format import ATTRS_KEY, ShardFormat, WrittenRows
from dasklbfgs.data._writer import block_arrays, commit_group, joined_rows, written_atomically
from dasklbfgs.data.location import Location
from dasklbfgs.data.shared_paths import workers_not_seeing
from dasklbfgs.errors import InvalidDataError, StoreError

__all__ = ["CANCEL_GRACE", "ended_on_workers", "results_once_all_ended", "write_on_workers", "shard_pieces",
           "piece_starts"]

logger = logging.getLogger(__name__)

#: seconds an interrupted write waits for its cancelled tasks still running on the workers to end
CANCEL_GRACE = 60.0
#: the states of a task on a worker that may still run it (or be running it, cancelled: a
#: thread cannot be stopped, so a cancelled task that has started runs to its end)
_MAY_RUN = frozenset({"waiting", "ready", "constrained", "executing", "long-running", "cancelled", "resumed"})


def piece_starts(piece_rows: Sequence[int]) -> list[int]:
    """The first row of each piece in the dataset, then the number of rows."""
    starts = [0]
    for rows in piece_rows:
        starts.append(starts[-1] + int(rows))
    return starts


def shard_pieces(piece_rows: Sequence[int], shard_rows: int) -> list[list[tuple[int, int, int]]]:
    """For each shard, the ``(piece, start, stop)`` row ranges (within pieces) it is made of,
    in order, given each piece's number of rows."""
    ends = piece_starts(piece_rows)
    n_rows = ends[-1]
    shards = []
    for first in range(0, n_rows, shard_rows):
        last = min(first + shard_rows, n_rows)
        parts = []
        piece = bisect.bisect_right(ends, first) - 1
        while piece < len(piece_rows) and ends[piece] < last:
            start, stop = max(first, ends[piece]) - ends[piece], min(last, ends[piece + 1]) - ends[piece]
            if stop > start:
                parts.append((piece, start, stop))
            piece += 1
        shards.append(parts)
    return shards


def write_on_workers(
    target: Location, pieces: Sequence[Any], piece_rows: Sequence[int], shard_format: ShardFormat, *,
    client: Any, feature_names: list[str] | None, attrs: dict[str, Any] | None, overwrite: bool,
    schema_extra: dict[str, Any] | None = None,
) -> None:
    """Write the dataset whose rows are ``pieces`` (``Delayed`` row blocks of
    ``piece_rows`` rows each, in order) at ``target``, a task per shard (``schema_extra``:
    more for the schema, such as how a table's columns became features)."""
    import dask

    starts = piece_starts(piece_rows)
    n_rows = starts[-1]
    if n_rows == 0 or shard_format.n_features == 0:
        raise InvalidDataError(f"the dataset is empty (shape {(n_rows, shard_format.n_features)}); give at least "
                               "one row and one feature")
    if feature_names is not None and len(feature_names) != shard_format.n_features:
        raise InvalidDataError(f"feature_names has {len(feature_names)} names but X has {shard_format.n_features} "
                               "features")
    with written_atomically(target, overwrite=overwrite) as open_target:
        where = open_target()
        group = zarr.create_group(store=where.zarr_store(read_only=False), zarr_format=3)
        shard_format.create_arrays(group, n_rows)
        blind = workers_not_seeing(client, where / "zarr.json")
        if blind:
            raise StoreError(
                f"worker {blind[0]} cannot see the folder this process writes {target.url!r} in ({where.url!r}): "
                "the workers write the shards themselves, so a local path must be on a filesystem they share "
                "with this process; on a cluster without one, write to an object store URL (s3://, gs://, ...)")
        tasks = [
            dask.delayed(_write_shard, pure=False)(
                where, shard_format, index * shard_format.shard_rows,
                [(pieces[p], starts[p], int(piece_rows[p]), start, stop) for p, start, stop in parts])
            for index, parts in enumerate(shard_pieces(piece_rows, shard_format.shard_rows))
        ]
        written = _gathered_in_order(client, client.compute(tasks))
        schema = {**shard_format.schema(written, feature_names), **(schema_extra or {})}
        commit_group(group, {ATTRS_KEY: schema, **(attrs or {})}, consolidate=not shard_format.sparse)


def _gathered_in_order(client: Any, futures: list[Any]) -> WrittenRows:
    """The shards' summaries merged in shard order (see :func:`results_once_all_ended`)."""
    written = WrittenRows()
    for shard in results_once_all_ended(client, futures):
        written.merge(shard)
    return written


def results_once_all_ended(client: Any, futures: list[Any], on_ended: Callable[[int], Any] | None = None, *,
                           grace: float = CANCEL_GRACE) -> list[Any]:
    """The results of the tasks that write into a store, once every one has ended; else the
    first failing one's error (in task order), raised only then, so that no task writes
    into what the failed write removes. ``on_ended(i)`` is called as the task of
    ``futures[i]`` ends (a progress line). Interrupted while waiting (Ctrl-C, or
    ``on_ended`` raising): the tasks are cancelled, and the interruption raised once those
    already running have ended too (:func:`ended_on_workers`, at most ``grace`` seconds),
    so that what they write is there for the caller's clean-up to remove."""
    from distributed import as_completed

    index_of = {future.key: index for index, future in enumerate(futures)}
    try:
        for future in as_completed(futures):
            if on_ended is not None:
                on_ended(index_of[future.key])
    except BaseException:
        client.cancel(futures)
        if not ended_on_workers(client, list(index_of), grace):
            logger.warning("%d cancelled write tasks had not ended %.0f s after they were cancelled; what they write "
                           "from now on is left where they write it", len(futures), grace)
        raise
    for future in futures:
        if future.status != "finished":
            future.result()  # raises the task's own error, with its message naming shard and row
    return list(client.gather(futures))


def ended_on_workers(client: Any, keys: list[Hashable], timeout: float, poll: float = 0.05) -> bool:
    """Wait until no worker of ``client`` may run the tasks ``keys`` (cancelled: the
    scheduler has forgotten them, and no worker holds one in a state that runs it), for at
    most ``timeout`` seconds; whether they ended. Twice in a row, ``poll`` seconds apart: a
    task the scheduler sent just before the cancel may reach its worker after a first look.
    Errors asking (a worker gone, the client closing) count as not knowing, never raised:
    the interruption is the error the caller hears."""
    deadline = time.monotonic() + timeout
    quiet = 0
    while True:
        with contextlib.suppress(Exception):
            busy = client.run_on_scheduler(_known_to_scheduler, keys) or any(
                client.run(_may_run_here, keys, on_error="ignore").values())
            quiet = 0 if busy else quiet + 1
            if quiet == 2:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def _known_to_scheduler(keys: list[Hashable], dask_scheduler: Any = None) -> int:
    """(On the scheduler) how many of ``keys`` it still knows."""
    return sum(key in dask_scheduler.tasks for key in keys)


def _may_run_here(keys: list[Hashable], dask_worker: Any = None) -> int:
    """(On a worker) how many of ``keys`` it may still run, or is running."""
    tasks = dask_worker.state.tasks
    return sum(key in tasks and tasks[key].state in _MAY_RUN for key in keys)


def _write_shard(where: Location, shard_format: ShardFormat, first_row: int,
                 parts: list[tuple[Any, int, int, int, int]]) -> WrittenRows:
    """Task: join the rows ``[start, stop)`` of each piece (``(block, its first row, its
    rows, start, stop)``), check them and write them as the shard starting at ``first_row``."""
    cut = []
    for block, block_row, rows, start, stop in parts:
        given = block_arrays(block)
        if given.n_rows != rows:
            raise InvalidDataError(f"the block of rows starting at row {block_row} has {given.n_rows} rows, but "
                                   f"{rows} were counted before the write (did the source change while it was read?)")
        checked = shard_format.check_block(given, first_row=block_row)  # whole: a sparse cut hides bad columns
        cut.append(checked.cut(start, stop))
    group = zarr.open_group(store=where.zarr_store(read_only=False), mode="r+", zarr_format=3)
    return shard_format.write(group, joined_rows(cut, shard_format), first_row=first_row, grow=False)
