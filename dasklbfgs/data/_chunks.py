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

__all__ = ["chunk_decoder", "read_whole_chunks"]

Decoder = Callable[[Path, np.ndarray], None]  # a chunk file -> fills the array given


def chunk_decoder(array: zarr.Array) -> Decoder | None:
    """How to read one of ``array``'s chunk files into a C-contiguous numpy array of the
    chunk's shape and dtype, or None when the codec chain is not one read directly."""
    # a dataset's arrays are Zarr format 3 (the dataset is opened as such)
    serializer, *compressors = cast("ArrayV3Metadata", array.metadata).codecs
    if not isinstance(serializer, zarr.codecs.BytesCodec) or len(compressors) > 1:
        return None
    if array.dtype.itemsize > 1 and serializer.endian is not None and serializer.endian.value != sys.byteorder:
        return None
    if not compressors:
        return lambda path, out: _read_file(path, into=out)
    codec = compressors[0]
    if isinstance(codec, zarr.codecs.BloscCodec):
        return _blosc_into
    if isinstance(codec, zarr.codecs.ZstdCodec):
        zstd = Zstd(level=codec.level, checksum=codec.checksum)
        return lambda path, out: _zstd_into(zstd, path, out)
    return None


def _bytes_of(out: np.ndarray) -> memoryview:
    return memoryview(out).cast("B")  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on 3.12+ only


def _check_size(decoded: Buffer, out: np.ndarray) -> None:
    size = memoryview(decoded).nbytes
    if size != out.nbytes:
        raise ValueError(f"the chunk decodes to {size} bytes, expected {out.nbytes}")


def _zstd_into(zstd: Zstd, path: Path, out: np.ndarray) -> None:
    with _file_bytes(path) as raw:
        _check_size(zstd.decode(raw, out=_bytes_of(out)), out)


def _blosc_into(path: Path, out: np.ndarray) -> None:
    with _file_bytes(path) as raw:
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


def read_whole_chunks(array: zarr.Array, folder: Path, decoder: Decoder, first: int, stop: int) -> np.ndarray:
    """Rows ``[first * chunk_rows, stop)`` of ``array`` (stored in ``folder``), where
    ``stop`` ends a chunk or the array: each chunk file decoded into its rows of the result.
    The array's chunks span every dimension but the first."""
    chunk_rows, tail = array.chunks[0], tuple(array.shape[1:])
    start = first * chunk_rows
    out = np.empty((stop - start, *tail), dtype=array.dtype)
    indices = range(first, -(-stop // chunk_rows))

    def decode(i: int) -> None:
        key = array.metadata.encode_chunk_key((i,) + (0,) * len(tail))
        path = folder / key
        rows = slice(i * chunk_rows - start, min((i + 1) * chunk_rows, stop) - start)
        if rows.stop - rows.start == chunk_rows:
            decoder(path, out[rows])
        else:  # the array's last chunk is stored whole (padded): decode it aside, keep its rows
            whole = np.empty((chunk_rows, *tail), dtype=array.dtype)
            decoder(path, whole)
            out[rows] = whole[: rows.stop - rows.start]

    threads = min(len(indices), _usable_cores())
    if threads <= 1:
        for i in indices:
            decode(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(decode, indices))
    return out
