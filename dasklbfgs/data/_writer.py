"""Write a sharded dataset, atomically: one process appending row blocks, or many tasks.

Rows arrive in blocks of any size; :class:`ShardWriter` buffers them into whole shards and
appends each, checked (:mod:`dasklbfgs.data._shard_format`), to the Zarr arrays of the new
dataset. :func:`written_atomically` decides where that is: a local dataset is written
aside and renamed into place; one at a URL in place with its schema committed last, or,
when it replaces a dataset, beside it and copied over it once complete. So a failed write
never leaves a half-written store that opens as data, nor takes the old dataset away.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.errors import ZarrUserWarning

from dasklbfgs.data._shard_format import ATTRS_KEY, ShardFormat, WrittenRows, resolve_compressor
from dasklbfgs.data._sparse import is_sparse, vstack_csr
from dasklbfgs.data.location import COMMITS, WRITING_MARKER, Location
from dasklbfgs.data.rows import Rows, joined
from dasklbfgs.errors import DaskLBFGSError, DatasetExistsError, InvalidDataError, StoreError


class ShardWriter:
    """Buffer row blocks of any size into whole shards and append each, checked, to the
    arrays of a new Zarr group (:class:`~dasklbfgs.data._shard_format.ShardFormat`)."""

    def __init__(self, group: zarr.Group, shard_format: ShardFormat) -> None:
        self.group, self.format = group, shard_format
        shard_format.create_arrays(group)
        self.written = WrittenRows()
        self._pending: list[Rows] = []
        self._pending_rows = 0

    def append(self, block: Rows) -> None:
        block = self.format.check_block(block, first_row=self.written.n_rows + self._pending_rows)
        if block.n_rows == 0:
            return
        self._pending.append(block)
        self._pending_rows += block.n_rows
        while self._pending_rows >= self.format.shard_rows:
            self._write_shard(self.format.shard_rows)

    def finish(self) -> None:
        if self._pending_rows:
            self._write_shard(self._pending_rows)

    def _write_shard(self, rows: int) -> None:
        pending = joined_rows(self._pending, self.format)
        self._pending = [pending.cut(rows, pending.n_rows)] if pending.n_rows > rows else []
        self._pending_rows = pending.n_rows - rows
        self.written.merge(self.format.write(self.group, pending.cut(0, rows), first_row=self.written.n_rows,
                                             grow=True))


def joined_rows(blocks: list[Rows], shard_format: ShardFormat) -> Rows:
    """The row blocks stacked into one, in order."""
    if len(blocks) == 1:
        return blocks[0]
    Xs = [block.X for block in blocks]
    X = vstack_csr(Xs, shard_format.n_features, shard_format.x_dtype) if shard_format.sparse else np.concatenate(Xs)
    return Rows(X, np.concatenate([block.y for block in blocks]), joined([block.w for block in blocks]),
                joined([block.offset for block in blocks]))


def block_arrays(block: Any) -> Rows:
    """The rows of a block given as ``(X, y)``, ``(X, y, sample_weight)`` or
    ``(X, y, sample_weight, offset)`` (either of the last two may be None)."""
    if not isinstance(block, (tuple, list)) or len(block) not in (2, 3, 4):
        raise InvalidDataError(f"a block must be (X, y), (X, y, sample_weight) or (X, y, sample_weight, offset), "
                               f"got {type(block).__name__}"
                               + (f" of length {len(block)}" if isinstance(block, (tuple, list)) else ""))
    X, y, *extras = block
    w, offset = (None if value is None else np.asarray(value) for value in (*extras, None, None)[:2])
    return Rows(X if is_sparse(X) else np.asarray(X), np.asarray(y), w, offset)


def is_replaceable(path: Path) -> bool:
    """Whether ``overwrite=True`` may replace ``path``: a Zarr store or a folder of files a
    write committed (:data:`~dasklbfgs.data.location.COMMITS`), or a folder of Zarr stores."""
    if any((path / key).is_file() for key in COMMITS):
        return True
    if not path.is_dir():
        return False
    entries = list(path.iterdir())
    return bool(entries) and all((e / "zarr.json").is_file() for e in entries)


#: why an existing location that is not ours is not replaced
NOT_OURS = "it is not a Zarr store or a folder of them, nor a folder of Parquet predictions"


def check_target(target: Path, overwrite: bool, exists_error: type[DaskLBFGSError] = DatasetExistsError) -> None:
    """Refuse an existing target without ``overwrite``, and anything but our own stores with
    it, with ``exists_error``."""
    if not target.exists():
        return
    if not overwrite:
        raise exists_error(f"{str(target)!r} already exists; pass overwrite=True to replace it",
                           parameters=("overwrite",))
    if not is_replaceable(target):
        raise exists_error(f"refusing to overwrite {str(target)!r}: {NOT_OURS}")


def write_dataset(
    target: Location, blocks: Iterable[tuple[Any, ...]], *, shard_rows: int,
    feature_names: list[str] | None, attrs: dict[str, Any] | None, overwrite: bool,
    compressor: Any, dtype: Any,
) -> None:
    """Write ``blocks`` of (X, y), (X, y, sample_weight) or (X, y, sample_weight, offset) rows to a
    new dataset at ``target`` (:func:`written_atomically`: the schema is the last thing written)."""
    compressors = resolve_compressor(compressor)
    with written_atomically(target, overwrite=overwrite) as open_target:
        writer = None
        for block in blocks:
            rows = block_arrays(block)
            if writer is None:
                shard_format = ShardFormat.of_first_block(rows, shard_rows=shard_rows, dtype=dtype,
                                                          compressors=compressors)
                # the first block is good: only now is anything at the target replaced
                group = zarr.create_group(store=open_target().zarr_store(read_only=False), zarr_format=3)
                writer = ShardWriter(group, shard_format)
            writer.append(rows)
        if writer is None:
            raise InvalidDataError("the dataset is empty (shape (0, 0)); give at least one row and one feature")
        writer.finish()
        schema = writer.format.schema(writer.written, feature_names)
        commit_group(group, {ATTRS_KEY: schema, **(attrs or {})}, consolidate=not writer.format.sparse)


def commit_group(group: zarr.Group, attributes: dict[str, Any], *, consolidate: bool = True) -> None:
    """Put ``attributes`` in the root ``group``'s ``zarr.json``, one put (``attrs.update``
    writes once per key): a write's commit, on an object store. With ``consolidate``, the
    metadata of every array below is first consolidated into that document (zarr's
    consolidated metadata, which ``xarray.open_zarr`` looks for, and warns without), so the
    put that commits carries it too and nothing is written after it. A sparse dataset is
    not consolidated: its thousands of shard arrays would make every read of the root
    document (each one on an object store) that much longer, and xarray reads no CSR."""
    if consolidate:
        with warnings.catch_warnings():
            # zarr's: consolidated metadata is not in the format 3 spec (yet); the marker of a write
            # under way at a URL is not a Zarr node (it goes once the write has committed)
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part",
                                    category=ZarrUserWarning)
            warnings.filterwarnings("ignore", message=f"Object at {re.escape(WRITING_MARKER)} is not recognized",
                                    category=ZarrUserWarning)
            group = zarr.consolidate_metadata(group.store)
    group.update_attributes(attributes)


@contextlib.contextmanager
def written_atomically(target: Location, *, overwrite: bool, commit: str = "zarr.json",
                       exists_error: type[DaskLBFGSError] = DatasetExistsError) -> Iterator[Callable[[], Location]]:
    """Yield what gives the location to write a dataset into (called once its first block
    has passed its checks), such that readers of ``target`` find the old dataset, none, or
    the complete new one, and a write that fails leaves the old dataset as it was. A local
    folder is written aside and renamed into place (:func:`written_aside`). An object store
    has no rename: a new dataset is written where it will stay and counts as one only once
    ``commit`` is there (the root group's ``zarr.json`` with the schema; for a folder of
    files, its description :data:`~dasklbfgs.data.location.FILES_COMMIT`), one object the
    writer puts last (:func:`written_in_place`); one that replaces a dataset is written
    beside it and copied over it, store-side, once complete (:func:`written_beside`). An
    existing ``target`` without ``overwrite``, or one that is not ours, is refused with
    ``exists_error``."""
    if target.is_local:
        with written_aside(target.path, overwrite=overwrite, exists_error=exists_error) as temp:
            yield lambda: Location(str(temp))
        return
    check_remote_target(target, overwrite, exists_error)
    if target.exists() and not target.exists(WRITING_MARKER) and not target.is_bucket:  # something to keep
        with written_beside(target, commit) as open_target:
            yield open_target
    else:
        with written_in_place(target, commit) as open_target:
            yield open_target


def check_remote_target(target: Location, overwrite: bool,
                        exists_error: type[DaskLBFGSError] = DatasetExistsError) -> None:
    """Refuse an existing ``target`` (an object store) without ``overwrite``, and anything but
    our own stores (or what a killed write left) with it, with ``exists_error``."""
    if target.exists():
        if not overwrite:
            raise exists_error(f"{target.url!r} already exists; pass overwrite=True to replace it",
                               parameters=("overwrite",))
        if not target.is_replaceable():
            raise exists_error(f"refusing to overwrite {target.url!r}: {NOT_OURS}")


@contextlib.contextmanager
def written_in_place(target: Location, commit: str = "zarr.json") -> Iterator[Callable[[], Location]]:
    """Yield what readies ``target`` (an object store, checked by :func:`check_remote_target`)
    to be written into, and returns it. Opening puts a :data:`WRITING_MARKER` first, then
    clears what is there (what a killed write left, or a dataset at a bucket's root: its
    ``zarr.json`` first, so readers stop finding it). The marker goes once the write has
    committed (put ``commit`` last); a failed write is removed, ``commit`` first, and what
    a killed one leaves (files and the marker, no schema) is refused by
    :class:`~dasklbfgs.data.sharded.ShardedDataset` and replaced by ``overwrite=True``."""
    opened = False

    def open_target() -> Location:
        nonlocal opened
        if not opened:
            _cleared_for_writing(target)
            opened = True
        return target

    try:
        yield open_target
    except BaseException:
        if opened:
            with contextlib.suppress(Exception):  # the write's own error is the one to hear
                target.remove(commit)
                target.remove()
        raise
    if opened:
        target.remove(WRITING_MARKER)


@contextlib.contextmanager
def written_beside(target: Location, commit: str = "zarr.json") -> Iterator[Callable[[], Location]]:
    """Yield what gives a fresh location beside ``target`` (an object store holding a
    dataset) to write the new dataset into. Once it has committed, it replaces the old one:
    a :data:`WRITING_MARKER` is put, the old commit (``zarr.json``) deleted (readers then
    find no dataset, never a mix), the old objects removed, the new ones copied store-side
    (no byte passes through this process) with ``commit`` last, and the marker removed. A
    write that fails leaves the old dataset untouched; what a process killed while copying
    leaves is refused by ``open`` and replaced by ``overwrite=True``. The price is a copy
    of the new dataset, store-side, when one is replaced."""
    beside = target.parent / f".{target.url.rsplit('/', 1)[-1]}.writing-{uuid.uuid4().hex[:8]}"
    try:
        yield lambda: beside
    except BaseException:
        with contextlib.suppress(Exception):  # the write's own error is the one to hear
            beside.remove()
        raise
    _cleared_for_writing(target)
    try:
        beside.copy_to(target, last=commit)
    except BaseException as exc:  # the old dataset is gone: the new one beside is the only copy, kept
        raise StoreError(f"replacing {target.url!r} failed while copying the new dataset over it ({exc}); the "
                         f"complete new dataset is kept at {beside.url!r}: open it there, or write again") from exc
    target.remove(WRITING_MARKER)
    with contextlib.suppress(Exception):
        beside.remove()


def _cleared_for_writing(target: Location) -> None:
    """Mark ``target`` (remote) as being written, then delete what it holds: what committed
    it (:data:`~dasklbfgs.data.location.COMMITS`: a Zarr store's root ``zarr.json``, a
    folder's description) first, so readers stop finding a dataset there at once."""
    target.put(WRITING_MARKER, uuid.uuid4().hex.encode())
    for key in COMMITS:
        target.remove(key)
    target.remove_all_but(WRITING_MARKER)


@contextlib.contextmanager
def written_aside(target: Path, *, overwrite: bool,
                  exists_error: type[DaskLBFGSError] = DatasetExistsError) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` to write into; on success it replaces
    ``target`` (see :func:`replace_path`), on any failure it is removed. So readers find the
    old store or the complete new one, never a half-written one. An existing ``target`` is
    refused as :func:`check_target` says."""
    check_target(target, overwrite, exists_error)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.writing-{uuid.uuid4().hex[:8]}"
    try:
        yield temp
        replace_path(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def replace_path(temp: Path, target: Path) -> None:
    """Move ``temp`` to ``target``; an existing target is removed only after the move."""
    if not target.exists():
        os.rename(temp, target)
        return
    old = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    try:
        os.rename(temp, target)
    except BaseException:
        os.rename(old, target)  # put the previous store back
        raise
    if old.is_dir():
        shutil.rmtree(old)
    else:
        old.unlink()
