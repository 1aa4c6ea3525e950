"""Reading rows of a dataset at a URL: every object of the shards asked for in one concurrent
fetch, decoded by the local fast path's decoders.

A read of rows ``[start, stop)`` (or of whole shards, X, y and the weights at once) asks the
store for three batches, each one concurrent request per object (:func:`~dasklbfgs.data._fetch.fetch`,
retried within the retry budget): the metadata documents (the root group's, which carries
the write id, and the arrays'; a sparse shard's three arrays each have their own), then
every chunk object of the shards, then the root group's document again, the commit check
(a dataset written again since it was opened is refused, checked after the chunks so that
a chunk of the new write cannot pass for the old one's). The chunks are decoded by
:mod:`dasklbfgs.data._chunks`' decoders (Blosc, Zstd or none; the writer's codecs), the
same code that decodes a local chunk file; an array stored with another codec is read
through zarr. A missing object is a damaged dataset (:class:`CorruptDatasetError` naming the
object and its shard): a dataset records that its chunks are complete, and only datasets
that do (every dataset this version writes) are read this way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import zarr
from zarr.core.metadata import ArrayV3Metadata

from dasklbfgs.data._chunks import Decoder, WholeChunks, chunk_decoder, chunk_keys
from dasklbfgs.data._fetch import fetch
from dasklbfgs.data._shard_format import ATTRS_KEY
from dasklbfgs.data._sparse import CSR_PARTS, csr_of_parts, vstack_csr
from dasklbfgs.errors import CorruptDatasetError, NotADatasetError

if TYPE_CHECKING:
    from dasklbfgs.data.sharded import ShardedDataset

__all__ = ["applies", "read_rows", "read_shards", "missing_chunk"]

ROOT = "zarr.json"


def applies(data: ShardedDataset, start: int, stop: int) -> bool:
    """Whether rows ``[start, stop)`` of ``data`` are read here: a dataset at a URL whose
    schema records complete chunks (a missing chunk would otherwise be zarr's fill value)."""
    return stop > start and not data.location.is_local and bool(data.schema.get("chunks_complete", False))


def missing_chunk(data: ShardedDataset, key: str, shard: int) -> CorruptDatasetError:
    """The error of a chunk object (``key``, below the dataset) that shard ``shard`` lacks."""
    first, last = data.shard_bounds[shard]
    return CorruptDatasetError(f"the dataset at {data.url!r} is missing the chunk file {key} (shard {shard}, "
                               f"rows {first}-{last}); rewrite the dataset")


def read_rows(data: ShardedDataset, start: int, stop: int, parts: Sequence[str]) -> dict[str, Any]:
    """Rows ``[start, stop)`` of each of ``parts`` (``"X"``, ``"y"``, ``"w"``) of ``data``:
    numpy arrays, X a ``scipy.sparse.csr_array`` when the dataset is sparse."""
    rows = data.shard_rows
    read = _Read(data, list(range(start // rows, -(-stop // rows))), parts)
    return {part: read.rows(part, start, stop) for part in parts}


def read_shards(data: ShardedDataset, indices: Sequence[int], parts: Sequence[str]) -> list[dict[str, Any]]:
    """Per shard of ``indices``, its ``parts`` as :func:`read_rows` gives them; the objects of
    all of them fetched in one concurrent batch."""
    read = _Read(data, sorted(set(indices)), parts)
    return [{part: read.rows(part, *data.shard_bounds[i]) for part in parts} for i in indices]


class _Read:
    """One read: the shards and parts asked for, their arrays' metadata, and the rows each
    chunk object is decoded into as it arrives."""

    def __init__(self, data: ShardedDataset, shards: list[int], parts: Sequence[str]) -> None:
        self.data, self.shards = data, shards
        self.sparse_x = data.is_sparse and "X" in parts
        dense = [part for part in parts if part != "X" or not self.sparse_x]
        sparse = [self._sparse_part(i, part) for i in shards for part in CSR_PARTS] if self.sparse_x else []
        self.metadata = self._metadata(dense + sparse)
        #: per dense part, the runs of consecutive shards read, with the rows they fill
        self.runs: dict[str, list[tuple[int, int, WholeChunks | None]]] = {}
        #: per sparse shard's part (``X/<i>/<part>``), the array it fills
        self.arrays: dict[str, WholeChunks | None] = {}
        #: each object -> (its array, the rows it fills, its key in the array, its decoder); None:
        #: its array is read through zarr
        self.targets: dict[str, tuple[str, WholeChunks, str, Decoder] | None] = {}
        self.shard_of: dict[str, int] = {}  # each chunk object's shard
        for name in dense:
            self.runs[name] = [self._plan(name, first, last) for first, last in _runs(shards)]
        for name in sparse:
            self.arrays[name] = self._plan(name, 0, 1)[2]
        _, missing = fetch(data.location, list(self.targets), on_object=self._decode)
        if missing:
            raise missing_chunk(data, missing[0], self.shard_of[missing[0]])
        self._check_write(self._root_after())

    # -- what to fetch ---------------------------------------------------------------

    @staticmethod
    def _sparse_part(shard: int, part: str) -> str:
        return f"X/{shard}/{part}"

    def _metadata(self, arrays: list[str]) -> dict[str, ArrayV3Metadata]:
        """The arrays' metadata (and the write id checked), fetched at once."""
        keys = [ROOT] + [f"{name}/zarr.json" for name in arrays]
        found, missing = fetch(self.data.location, keys)
        self._check_write(found.get(ROOT))
        if missing:
            raise CorruptDatasetError(f"cannot open the dataset at {self.data.url!r}: its metadata document "
                                      f"{missing[0]} is missing; rewrite the dataset")
        out = {}
        for name in arrays:
            try:
                out[name] = ArrayV3Metadata.from_dict(json.loads(found[f"{name}/zarr.json"]))
            except Exception as exc:  # zarr's and json's several types for a malformed document
                raise CorruptDatasetError(f"cannot open the dataset at {self.data.url!r}: the metadata document "
                                          f"{name}/zarr.json is not a Zarr array's ({exc}); rewrite the "
                                          "dataset") from exc
        return out

    def _plan(self, name: str, first: int, last: int) -> tuple[int, int, WholeChunks | None]:
        """Shards ``[first, last)`` of the array ``name`` (a sparse shard's part: its whole
        array), their chunk objects entered in :attr:`targets`: ``(first, last, the rows they
        fill)``, the rows None when the array is read through zarr."""
        metadata = self.metadata[name]
        sparse = name.startswith("X/")
        stop = metadata.shape[0] if sparse else self.data.shard_bounds[last - 1][1]
        decoder = chunk_decoder(metadata)
        whole_rows = tuple(metadata.chunks[1:]) == tuple(metadata.shape[1:])
        rows = WholeChunks(metadata, first, stop) if decoder is not None and whole_rows else None
        for n, key in enumerate(chunk_keys(metadata, first, stop)):
            self.targets[f"{name}/{key}"] = None if rows is None or decoder is None else (name, rows, key, decoder)
            # a sparse part: one chunk, of the shard in its name; a dense array: a chunk a shard
            self.shard_of[f"{name}/{key}"] = int(name.split("/")[1]) if sparse else first + n
        return first, last, rows

    def _decode(self, key: str, raw: Any) -> None:
        """On arrival: the object ``key`` decoded into its rows (those read through zarr are
        fetched for the missing-object check only)."""
        target = self.targets[key]
        if target is None:
            return
        name, rows, chunk, decoder = target
        try:
            rows.fill(chunk, lambda out: decoder(raw, out))
        except Exception as exc:
            shard = self.shard_of[key]
            if name.startswith("X/"):
                raise self._bad_sparse(shard, exc) from exc
            first, last = self.data.shard_bounds[shard]
            raise CorruptDatasetError(
                f"cannot decode {name} of the dataset at {self.data.url!r} in shard(s) [{shard}] (rows [{first}, "
                f"{last})): {exc}; a chunk file is damaged, rewrite the dataset") from exc

    def _bad_sparse(self, shard: int, exc: Exception) -> CorruptDatasetError:
        first, last = self.data.shard_bounds[shard]
        return CorruptDatasetError(f"cannot read sparse shard {shard} of X of the dataset at {self.data.url!r} "
                                   f"(rows {first}-{last}): {exc}; rewrite the dataset")

    # -- the commit check ------------------------------------------------------------

    def _root_after(self) -> Any:
        found, _ = fetch(self.data.location, [ROOT])
        return found.get(ROOT)

    def _check_write(self, root: Any) -> None:
        """Refuse a dataset written again since ``data`` was opened (``root``: the root
        group's metadata document now, None when there is none)."""
        try:
            schema = json.loads(root)["attributes"][ATTRS_KEY] if root is not None else None
        except (ValueError, KeyError, TypeError):
            schema = None
        if isinstance(schema, Mapping) and schema.get("write_id") == self.data.schema.get("write_id"):
            return
        self.data._check_same_write()  # says which: removed, being written again, or written again
        raise NotADatasetError(f"the dataset at {self.data.url!r} was written again while it was read; open it "
                               "again")

    # -- the rows --------------------------------------------------------------------

    def rows(self, part: str, start: int, stop: int) -> Any:
        """Rows ``[start, stop)`` of ``part``, within one run of the shards read."""
        rows = self.data.shard_rows
        first, last = start // rows, -(-stop // rows)
        if part == "X" and self.sparse_x:
            blocks = []
            for i in range(first, last):
                shard_start = self.data.shard_bounds[i][0]
                blocks.append(self._sparse_shard(i)[max(start - shard_start, 0): stop - shard_start])
            return vstack_csr(blocks, self.data.n_features, self.data.dtype)
        run_first, run_last, filled = next(run for run in self.runs[part] if run[0] <= first and last <= run[1])
        if filled is None:
            return self._through_zarr(part, start, stop)
        return filled.out[start - run_first * rows: stop - run_first * rows]

    def _sparse_shard(self, shard: int) -> Any:
        first, last = self.data.shard_bounds[shard]
        try:
            data, indices, indptr = (self._part(self._sparse_part(shard, part)) for part in CSR_PARTS)
            return csr_of_parts(data, indices, indptr, last - first, self.data.n_features)
        except Exception as exc:
            raise self._bad_sparse(shard, exc) from exc

    def _part(self, name: str) -> np.ndarray:
        """The whole 1-D array ``name`` (a sparse shard's part)."""
        filled = self.arrays[name]
        return np.asarray(self._zarr_array(name)[:]) if filled is None else filled.out

    def _through_zarr(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows of the dense array ``name`` through zarr (codecs the direct decode does not take)."""
        try:
            return np.asarray(self._zarr_array(name)[start:stop])
        except Exception as exc:
            raise CorruptDatasetError(
                f"cannot decode {name} of the dataset at {self.data.url!r} (rows [{start}, {stop})): {exc}; a chunk "
                "file is damaged, rewrite the dataset") from exc

    def _zarr_array(self, name: str) -> zarr.Array:
        store = self.data.location.zarr_store(read_only=True)
        return cast(zarr.Array, zarr.open_array(store, path=name, mode="r", zarr_format=3))


def _runs(shards: list[int]) -> list[tuple[int, int]]:
    """``shards`` (sorted) as runs of consecutive shards, ``[first, last)`` each."""
    runs: list[tuple[int, int]] = []
    for i in shards:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs
