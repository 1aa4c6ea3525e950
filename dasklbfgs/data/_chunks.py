"""Read whole row chunks of a dense Zarr array by decoding each chunk file straight into
the result.

zarr 3 reads a chunk through its asynchronous codec pipeline: the file's bytes, a
decompressed copy in a new bytes object (fresh pages, faulted in one by one), a view as an
array, then a copy into the result. For a shard that is one whole chunk, the result can be
the decompressor's destination instead: one numpy allocation (numpy asks the kernel for
huge pages) and one pass of the decompressor over it. On 100 MB float64 chunks under Blosc
lz4 this reads at 3.6x zarr's rate on one thread, and Sandblaster caches shards 2.8x faster
(``python -m benchmarks.shard_load``, benchmarks/RESULTS-shard-load.md).

Only the codec chains the dataset writer produces are read this way: the ``bytes``
serializer in this machine's byte order followed by nothing, Blosc or Zstd. Any other
chain, or a range that cuts a chunk, goes through zarr. Several chunks of one range are
decoded on threads (file reads and Blosc's decoder release the GIL), so a multi-chunk read
keeps more than one chunk in flight; a worker caching a shard reads one chunk per task, and
the workers read their shards in parallel.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs.blosc
import numpy as np
import zarr
from numcodecs.zstd import Zstd

__all__ = ["chunk_decoder", "read_whole_chunks"]

Decoder = Callable[[Path, np.ndarray], None]  # a chunk file -> fills the array given


def chunk_decoder(array: zarr.Array) -> Decoder | None:
    """How to read one of ``array``'s chunk files into a C-contiguous numpy array of the
    chunk's shape and dtype, or None when the codec chain is not one read directly."""
    serializer, *compressors = array.metadata.codecs
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
        return lambda path, out: _check_size(zstd.decode(_read_file(path), out=_bytes_of(out)), out)
    return None


def _bytes_of(out: np.ndarray) -> memoryview:
    return memoryview(out).cast("B")


def _check_size(decoded: object, out: np.ndarray) -> None:
    size = memoryview(decoded).nbytes
    if size != out.nbytes:
        raise ValueError(f"the chunk decodes to {size} bytes, expected {out.nbytes}")


def _blosc_into(path: Path, out: np.ndarray) -> None:
    raw = _read_file(path)
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


def _read_file(path: Path, into: np.ndarray | None = None) -> np.ndarray:
    """The file's bytes, read into ``into`` (an uncompressed chunk: no copy after the read)
    or a new numpy buffer: numpy allocates large arrays on huge pages, which halves the time
    of ``read_bytes`` (whose fresh pages fault in one by one)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if into is not None and size != into.nbytes:
            raise ValueError(f"the uncompressed chunk holds {size} bytes, expected {into.nbytes}")
        buffer = np.empty(size, dtype=np.uint8) if into is None else into
        if f.readinto(_bytes_of(buffer)) != size:
            raise ValueError(f"{path.name} changed size while it was read")
    return buffer


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

    threads = min(len(indices), len(os.sched_getaffinity(0)))
    if threads <= 1:
        for i in indices:
            decode(i)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(decode, indices))
    return out
