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

from dasklbfgs.data._chunks import chunk_decoder, chunk_keys, native_dtype, read_whole_chunks
from dasklbfgs.data._fetch import fetch
from dasklbfgs.data._sparse import CSR_PARTS, csr_of_parts, vstack_csr
from dasklbfgs.data._writer import ATTRS_KEY
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
    """One read: the shards and parts asked for, their arrays' metadata, their objects."""

    def __init__(self, data: ShardedDataset, shards: list[int], parts: Sequence[str]) -> None:
        self.data, self.shards = data, shards
        self.sparse_x = data.is_sparse and "X" in parts
        arrays = [part for part in parts if part != "X" or not self.sparse_x]
        if self.sparse_x:
            arrays += [self._sparse_part(i, part) for i in shards for part in CSR_PARTS]
        self.metadata = self._metadata(arrays)
        shard_of = {key: shard for name in arrays for key, shard in self._chunk_keys(name)}
        found, missing = fetch(data.location, list(shard_of))
        if missing:
            raise missing_chunk(data, missing[0], shard_of[missing[0]])
        self.objects = found
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

    def _chunk_keys(self, name: str) -> list[tuple[str, int]]:
        """The chunk objects of array ``name`` the shards need, each with its shard (a sparse
        shard's part: its one chunk, none when it is empty)."""
        metadata = self.metadata[name]
        if name.startswith("X/"):  # X/<shard>/<part>
            shard = int(name.split("/")[1])
            return [(f"{name}/{key}", shard) for key in chunk_keys(metadata, 0, metadata.shape[0])]
        return [(f"{name}/{key}", i) for i in self.shards
                for key in chunk_keys(metadata, i, self.data.shard_bounds[i][1])]

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

    # -- decoding --------------------------------------------------------------------

    def rows(self, part: str, start: int, stop: int) -> Any:
        """Rows ``[start, stop)`` of ``part``, within the shards fetched."""
        rows = self.data.shard_rows
        first, last = start // rows, -(-stop // rows)
        if part == "X" and self.sparse_x:
            blocks = []
            for i in range(first, last):
                shard_start = self.data.shard_bounds[i][0]
                shard = self._sparse_shard(i)
                blocks.append(shard[max(start - shard_start, 0): stop - shard_start])
            return vstack_csr(blocks, self.data.n_features, self.data.dtype)
        end = self.data.shard_bounds[last - 1][1]
        out = self._dense(part, first, end)
        return out[start - first * rows: stop - first * rows]

    def _dense(self, name: str, first: int, stop: int) -> np.ndarray:
        """Rows ``[first * shard_rows, stop)`` of the dense array ``name``."""
        metadata = self.metadata[name]
        try:
            decoder = chunk_decoder(metadata)
            if decoder is None or tuple(metadata.chunks[1:]) != tuple(metadata.shape[1:]):
                return np.asarray(self._zarr_array(name)[first * self.data.shard_rows: stop])
            return read_whole_chunks(metadata, lambda key, out: decoder(self.objects[f"{name}/{key}"], out),
                                     first, stop)
        except Exception as exc:
            shards = list(range(first, -(-stop // self.data.shard_rows)))
            raise CorruptDatasetError(
                f"cannot decode {name} of the dataset at {self.data.url!r} in shard(s) {shards} (rows "
                f"[{first * self.data.shard_rows}, {stop})): {exc}; a chunk file is damaged, rewrite the dataset"
            ) from exc

    def _sparse_shard(self, shard: int) -> Any:
        first, last = self.data.shard_bounds[shard]
        try:
            data, indices, indptr = (self._part(self._sparse_part(shard, part)) for part in CSR_PARTS)
            return csr_of_parts(data, indices, indptr, last - first, self.data.n_features)
        except Exception as exc:
            raise CorruptDatasetError(
                f"cannot read sparse shard {shard} of X of the dataset at {self.data.url!r} (rows {first}-{last}): "
                f"{exc}; rewrite the dataset"
            ) from exc

    def _part(self, name: str) -> np.ndarray:
        """The whole 1-D array ``name`` (one chunk: a sparse shard's part)."""
        metadata = self.metadata[name]
        if not metadata.shape[0]:
            return np.empty(0, dtype=native_dtype(metadata))
        decoder = chunk_decoder(metadata)
        if decoder is None:
            return np.asarray(self._zarr_array(name)[:])
        return read_whole_chunks(metadata, lambda key, out: decoder(self.objects[f"{name}/{key}"], out), 0,
                                 metadata.shape[0])

    def _zarr_array(self, name: str) -> zarr.Array:
        """The array ``name`` through zarr (codecs the direct decode does not take)."""
        store = self.data.location.zarr_store(read_only=True)
        return cast(zarr.Array, zarr.open_array(store, path=name, mode="r", zarr_format=3))
