"""Read whole row chunks of a dense Zarr array by decoding each chunk file straight into
the result.

zarr 3 reads a chunk through its asynchronous codec pipeline: the file's bytes, a
decompressed copy in a new bytes object (fresh pages, faulted in one by one), a view as an
array, then a copy into the result. For a shard that is one whole chunk, the decompressor
can read the file where it lies, mapped read-only from the page cache, and write straight
into the result (one numpy allocation, which numpy asks the kernel to back with huge
pages): no copy, and no new memory but the result's. On 100 MB float64 chunks under Blosc
lz4 this reads at several times zarr's rate on one thread
(``python -m benchmarks.shard_load``, benchmarks/RESULTS-shard-load.md).

Only the codec chains the dataset writer produces are read this way: the ``bytes``
serializer in this machine's byte order followed by nothing, Blosc or Zstd. Any other
chain, or a range that cuts a chunk, goes through zarr. Several chunks of one range are
decoded on threads (file reads and Blosc's decoder release the GIL), so a multi-chunk read
keeps more than one chunk in flight; a worker caching a shard reads one chunk per task, and
the workers read their shards in parallel.

The decoders take a chunk's stored bytes wherever they come from: a local chunk file mapped
(:func:`file_filler`), or an object of a remote dataset, decoded into its rows of a
:class:`WholeChunks` as it arrives (:mod:`dasklbfgs.data._remote_shards`).
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numcodecs.blosc
import numpy as np
import zarr
import zarr.codecs
from numcodecs.zstd import Zstd

if TYPE_CHECKING:
    from typing_extensions import Buffer
    from zarr.core.metadata import ArrayV3Metadata

__all__ = ["chunk_decoder", "native_dtype", "chunk_keys", "WholeChunks", "read_whole_chunks", "file_filler"]

Decoder = Callable[[Any, np.ndarray], None]  # a chunk's stored bytes -> fills the array given
Filler = Callable[[str, np.ndarray], None]  # a chunk's key in its array -> fills the array given


def native_dtype(metadata: ArrayV3Metadata) -> np.dtype:
    """The numpy dtype of an array's elements."""
    return np.dtype(metadata.dtype.to_native_dtype())


def chunk_decoder(metadata: ArrayV3Metadata) -> Decoder | None:
    """How to decode one of the array's chunks (its stored bytes) into a C-contiguous numpy
    array of the chunk's shape and dtype, or None when the codec chain is not one decoded
    directly. ``metadata``: a Zarr format 3 array's (``array.metadata``; a dataset is opened
    as format 3)."""
    serializer, *compressors = metadata.codecs
    if not isinstance(serializer, zarr.codecs.BytesCodec) or len(compressors) > 1:
        return None
    if native_dtype(metadata).itemsize > 1 and serializer.endian is not None and \
            serializer.endian.value != sys.byteorder:
        return None
    if not compressors:
        return _copy_into
    codec = compressors[0]
    if isinstance(codec, zarr.codecs.BloscCodec):
        return _blosc_into
    if isinstance(codec, zarr.codecs.ZstdCodec):
        zstd = Zstd(level=codec.level, checksum=codec.checksum)
        return lambda raw, out: _check_size(zstd.decode(raw, out=_bytes_of(out)), out)
    return None


def file_filler(decoder: Decoder, folder: Path) -> Filler:
    """Chunks decoded from the chunk files in ``folder`` (a local array's), where they lie:
    a compressed file mapped, an uncompressed one read straight into its rows."""
    if decoder is _copy_into:
        return lambda key, out: _read_file(folder / key, into=out)

    def fill(key: str, out: np.ndarray) -> None:
        with _file_bytes(folder / key) as raw:
            decoder(raw, out)

    return fill


def _bytes_of(out: np.ndarray) -> memoryview:
    return memoryview(out).cast("B")  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on 3.12+ only


def _check_size(decoded: Buffer, out: np.ndarray) -> None:
    size = memoryview(decoded).nbytes
    if size != out.nbytes:
        raise ValueError(f"the chunk decodes to {size} bytes, expected {out.nbytes}")


def _copy_into(raw: Any, out: np.ndarray) -> None:
    """An uncompressed chunk's bytes copied into its rows."""
    _check_size(raw, out)
    _bytes_of(out)[:] = memoryview(raw).cast("B")


def _blosc_into(raw: Any, out: np.ndarray) -> None:
    if not isinstance(raw, memoryview):  # fetched bytes (a mapped file comes as a memoryview already)
        raw = memoryview(raw)
    # The Blosc header (16 bytes) holds the decompressed size at bytes 4-8 and the compressed
    # size at bytes 12-16, little-endian. Blosc trusts both: a truncated file would be read
    # past its end, and a short chunk would leave part of the result unwritten.
    if raw.nbytes < 16:
        raise ValueError(f"the chunk file holds {raw.nbytes} bytes, less than a Blosc header")
    size, stored = (int.from_bytes(raw[a:a + 4].tobytes(), "little") for a in (4, 12))
    if stored != raw.nbytes:
        raise ValueError(f"the chunk file holds {raw.nbytes} bytes but its Blosc header says {stored}")
    if size != out.nbytes:
        raise ValueError(f"the chunk decodes to {size} bytes, expected {out.nbytes}")
    numcodecs.blosc.decompress(raw, _bytes_of(out))


@contextmanager
def _file_bytes(path: Path) -> Iterator[Any]:
    """A compressed chunk file's bytes for the decoder (:func:`_read_file`), unmapped on the
    way out, also when decoding fails: an error kept with its traceback (Dask keeps a failed
    task's) must not keep the file mapped."""
    raw = _read_file(path)
    try:
        yield raw
    finally:
        if isinstance(raw, memoryview):
            mapping = cast(mmap.mmap, raw.obj)  # the one memoryview _read_file returns: of a mapped file
            raw.release()
            with suppress(BufferError):  # a view the decoder still holds: unmapped when it goes
                mapping.close()


def _read_file(path: Path, into: np.ndarray | None = None) -> Any:
    """The file's bytes for a decoder: the file mapped read-only (its pages are the page
    cache's: nothing copied, no new memory), or read into a buffer: where ``mmap`` takes no
    flags (Windows), the file system cannot map it, or ``into`` is given (an uncompressed
    chunk, read straight into its rows). A mapped file must not be truncated in place while
    it is decoded (the process would get SIGBUS); zarr and the dataset writer replace files
    by renaming, never in place."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if into is None and size and _MAPPED_FILE is not None:
            try:
                return memoryview(mmap.mmap(f.fileno(), size, flags=_MAPPED_FILE, prot=mmap.PROT_READ))
            except OSError:  # a file system that cannot map files: read it
                pass
        if into is None:
            into = np.empty(size, dtype=np.uint8)
        elif size != into.nbytes:
            raise ValueError(f"the uncompressed chunk holds {size} bytes, expected {into.nbytes}")
        if f.readinto(_bytes_of(into)) != size:
            raise ValueError(f"{path.name} changed size while it was read")
    return into


#: Flags of a file's read-only mapping, every page mapped in the one call where the OS can
#: (Linux's MAP_POPULATE); None where ``mmap`` takes no flags (Windows).
_MAPPED_FILE = (mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)) if hasattr(mmap, "MAP_SHARED") else None


def _usable_cores() -> int:
    """Cores this process may run on (its affinity where the OS tells it: Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def chunk_keys(metadata: ArrayV3Metadata, first: int, stop: int) -> list[str]:
    """The keys (in the array) of the chunks holding rows ``[first * chunk_rows, stop)``."""
    tail = (0,) * (len(metadata.shape) - 1)
    return [metadata.encode_chunk_key((i, *tail)) for i in range(first, -(-stop // metadata.chunks[0]))]


class WholeChunks:
    """Rows ``[first * chunk_rows, stop)`` of the array ``metadata`` describes (``stop`` ends
    a chunk or the array), filled chunk by chunk in any order: :attr:`out`, whose rows each
    chunk's decode writes straight into. The array's chunks span every dimension but the first."""

    def __init__(self, metadata: ArrayV3Metadata, first: int, stop: int) -> None:
        self.chunk_rows, self.tail, self.dtype = metadata.chunks[0], tuple(metadata.shape[1:]), native_dtype(metadata)
        self.start, self.stop = first * self.chunk_rows, stop
        self.out = np.empty((stop - self.start, *self.tail), dtype=self.dtype)
        #: each chunk's key in the array -> its index along the rows
        self.keys = {key: first + n for n, key in enumerate(chunk_keys(metadata, first, stop))}

    def fill(self, key: str, decode: Callable[[np.ndarray], None]) -> None:
        """Chunk ``key``'s rows of :attr:`out`, written by ``decode`` (given the chunk's array)."""
        i = self.keys[key]
        rows = slice(i * self.chunk_rows - self.start, min((i + 1) * self.chunk_rows, self.stop) - self.start)
        if rows.stop - rows.start == self.chunk_rows:
            decode(self.out[rows])
        else:  # the array's last chunk is stored whole (padded): decode it aside, keep its rows
            whole = np.empty((self.chunk_rows, *self.tail), dtype=self.dtype)
            decode(whole)
            self.out[rows] = whole[: rows.stop - rows.start]


def read_whole_chunks(metadata: ArrayV3Metadata, fill: Filler, first: int, stop: int) -> np.ndarray:
    """Rows ``[first * chunk_rows, stop)`` of the array ``metadata`` describes, where
    ``stop`` ends a chunk or the array: each chunk decoded by ``fill`` into its rows of the
    result (:class:`WholeChunks`), several on threads."""
    rows = WholeChunks(metadata, first, stop)

    def decode(key: str) -> None:
        rows.fill(key, lambda out: fill(key, out))

    threads = min(len(rows.keys), _usable_cores())
    if threads <= 1:
        for key in rows.keys:
            decode(key)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(decode, rows.keys))
    return rows.out
