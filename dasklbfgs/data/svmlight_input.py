"""svmlight / LibSVM files as the pieces of a worker-side write, parsed where they are read.

Each file (local, or at a URL; globs expand) is cut into byte ranges of about
:data:`DEFAULT_BLOCK_BYTES`, and each range is parsed by a task with scikit-learn's parser
(``load_svmlight_file`` with ``offset``/``length``: a line belongs to the range it starts
in), so the rows are those ``sklearn.datasets.load_svmlight_files`` reads from the same
files, in order. The parsed ranges stay on the workers while the client decides, from
their sizes and smallest and largest column index, whether indices are one-based (as
scikit-learn's ``zero_based="auto"``: one-based unless some file holds a column 0 or no
entry at all) and how many columns there are. Compressed files (``.gz``, ``.bz2``, ``.xz``)
are parsed whole, one task each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.data._shard_format import ShardFormat
from dasklbfgs.data.location import Location, has_scheme
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import ConfigurationError, InvalidDataError, StoreError

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["svmlight_pieces", "DEFAULT_BLOCK_BYTES"]

#: Bytes of text one task parses (a file's last range may be shorter).
DEFAULT_BLOCK_BYTES = 64 * 2**20
_COMPRESSED = (".gz", ".bz2", ".xz")
_ANY_WIDTH = 2**62  # the parser needs a width with byte ranges; the real one is decided after


@contextlib.contextmanager
def svmlight_pieces(
    sources: str | Sequence[str], *, storage_options: dict[str, Any] | None, n_features: int | None,
    zero_based: bool | str, block_bytes: int, shard_rows: int, dtype: Any, compressors: tuple, client: Any,
) -> Iterator[tuple[list[Any], list[int], ShardFormat]]:
    """``(pieces, rows per piece, format)`` of svmlight files; the parsed ranges are
    released on leaving."""
    import dask
    import scipy.sparse as sp  # loaded with sparse data only

    if zero_based not in (True, False, "auto"):
        raise ConfigurationError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    if not isinstance(block_bytes, int) or block_bytes <= 0:
        raise ConfigurationError(f"block_bytes must be a positive integer, got {block_bytes!r}")
    ranges = [(fs, path, start, length) for fs, path, size in _files(sources, storage_options)
              for start, length in _byte_ranges(path, size, block_bytes)]
    parsed = client.compute([dask.delayed(_parse, pure=False)(fs, path, start, length)
                             for fs, path, start, length in ranges])
    try:
        stats = client.gather(client.map(_stats, parsed, pure=False))
        shift, width = _indexing([(fs, path) for fs, path, _, _ in ranges], stats, n_features, zero_based)
        pieces = [dask.delayed(_as_block, pure=True)(block, shift, width) for block in parsed]
        probe = sp.csr_array((0, width), dtype=np.float64)
        shard_format = ShardFormat.of_first_block(Rows(probe, np.empty(0)), shard_rows=shard_rows, dtype=dtype,
                                                  compressors=compressors)
        yield pieces, [rows for rows, _, _, _ in stats], shard_format
    finally:
        client.cancel(parsed)


def _files(sources: str | Sequence[str], storage_options: dict[str, Any] | None) -> list[tuple[Any, str, int]]:
    """``(filesystem, path, size)`` of every file ``sources`` names, globs expanded, in order."""
    found: list[tuple[Any, str, int]] = []
    for source in [sources] if isinstance(sources, str) else list(sources):
        location = Location.of(source, storage_options if has_scheme(source) else None)
        fs, path = location.filesystem()
        try:
            paths = sorted(fs.glob(path)) if any(ch in path for ch in "*?[") else [path]
            sizes = [int(fs.size(p)) for p in paths]
        except FileNotFoundError as exc:
            raise InvalidDataError(f"no svmlight file at {source!r}") from exc
        except Exception as exc:
            raise StoreError(f"cannot list {source!r}: {type(exc).__name__}: {exc}") from exc
        if not paths:
            raise InvalidDataError(f"no svmlight file matches {source!r}")
        found.extend((fs, p, size) for p, size in zip(paths, sizes))
    return found


def _byte_ranges(path: str, size: int, block_bytes: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the ranges one file is parsed in (``-1``: to its end)."""
    if path.endswith(_COMPRESSED) or size <= block_bytes:
        return [(0, -1)]
    return [(start, block_bytes if start + block_bytes < size else -1) for start in range(0, size, block_bytes)]


def _parse(fs: Any, path: str, offset: int, length: int) -> tuple[sp.csr_array, np.ndarray]:
    """Task: the rows of one byte range, with the file's column indices as written."""
    import scipy.sparse as sp  # loaded with sparse data only
    from sklearn.datasets import load_svmlight_file

    where = f"{path!r}" + ("" if offset == 0 and length == -1 else f" (bytes from {offset})")
    try:
        with fs.open(path, "rb", compression="infer") as f:
            if offset == 0 and length == -1:
                X, y = load_svmlight_file(f, zero_based=True, n_features=_ANY_WIDTH)
            else:
                X, y = load_svmlight_file(f, zero_based=True, n_features=_ANY_WIDTH, offset=offset, length=length)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidDataError(f"{where} is not a valid svmlight file: {exc}") from exc
    return sp.csr_array(X), np.asarray(y)


def _stats(block: tuple[sp.csr_array, np.ndarray]) -> tuple[int, int, int, int]:
    """Rows, non-zeros, smallest and largest column index of a parsed range."""
    X, _ = block
    indices = X.indices
    return X.shape[0], int(X.nnz), int(indices.min()) if X.nnz else 0, int(indices.max()) if X.nnz else -1


def _indexing(files: list[tuple[Any, str]], stats: list[tuple[int, int, int, int]], n_features: int | None,
              zero_based: bool | str) -> tuple[int, int]:
    """How much to subtract from column indices, and the number of columns."""
    per_file: dict[str, tuple[int, int]] = {}  # path: (non-zeros, smallest index)
    for (_, path), (_, nnz, low, _) in zip(files, stats):
        before = per_file.get(path, (0, np.iinfo(np.int64).max))
        per_file[path] = (before[0] + nnz, min(before[1], low) if nnz else before[1])
    one_based = zero_based is False or (zero_based == "auto" and all(nnz and low > 0
                                                                      for nnz, low in per_file.values()))
    shift = int(one_based)
    zeros = [path for path, (nnz, low) in per_file.items() if nnz and low == 0]
    if one_based and zeros:
        raise InvalidDataError(f"zero_based=False but {zeros[0]!r} holds column index 0 (its columns count from 0: "
                               "pass zero_based=True, or 'auto')")
    width = max((high for _, _, _, high in stats), default=-1) - shift + 1
    width = max(width, 0)
    if n_features is not None:
        if n_features < width:
            raise InvalidDataError(f"n_features is {n_features} but the files hold {width} columns")
        width = n_features
    return shift, width


def _as_block(block: tuple[sp.csr_array, np.ndarray], shift: int, width: int) -> tuple[sp.csr_array, np.ndarray, None]:
    import scipy.sparse as sp  # loaded with sparse data only

    X, y = block
    indices = X.indices - shift if shift else X.indices
    return sp.csr_array((X.data, indices, X.indptr), shape=(X.shape[0], width)), y, None
