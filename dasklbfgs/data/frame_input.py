"""DataFrames (Dask or pandas) as the pieces of a worker-side write.

One pass over the partitions, on the workers, counts their rows and collects the levels of
the string and categorical columns (at most ``one_hot_max_levels + 1`` per column and
partition reach the client); that decides the :class:`FrameFeatures`. The write then turns
each partition into ``(X, y, w)`` where it is read (:mod:`dasklbfgs.data.worker_writes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dasklbfgs.data._shard_format import MAX_LABELS_COUNTED, ShardFormat
from dasklbfgs.data.frame_features import FrameFeatures
from dasklbfgs.data.worker_writes import piece_starts
from dasklbfgs.errors import ConfigurationError, InvalidDataError

__all__ = ["frame_pieces"]


def frame_pieces(
    frame: Any, *, label: str, features: Sequence[str] | None, weight: str | None, one_hot_max_levels: int,
    hash_features: int | None, crosses: Sequence[tuple[str, str]], shard_rows: int, dtype: Any, compressors: tuple,
    partition_rows: int, client: Any,
) -> tuple[list[Any], list[int], ShardFormat, FrameFeatures]:
    """``(pieces, rows per piece, format, features)`` of a Dask or pandas DataFrame."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    if isinstance(frame, pd.DataFrame):
        frame = dd.from_pandas(frame, chunksize=partition_rows, sort=False)
    if not isinstance(frame, dd.DataFrame):
        raise ConfigurationError(f"expected a Dask or pandas DataFrame, got {type(frame).__name__}")
    if hash_features is not None and (not isinstance(hash_features, int) or hash_features <= 0):
        raise ConfigurationError(f"hash_features must be a positive integer, got {hash_features!r}")
    if not isinstance(one_hot_max_levels, int) or one_hot_max_levels < 0:
        raise ConfigurationError(f"one_hot_max_levels must be a non-negative integer, got {one_hot_max_levels!r}")
    columns = [str(c) for c in frame.columns]
    named = [label, *([weight] if weight else []), *(features or []), *(c for pair in crosses for c in pair)]
    if missing := [c for c in named if c not in columns]:
        raise InvalidDataError(f"the table has no column(s) {missing}; its columns are {columns}")
    chosen = list(features) if features is not None else [c for c in columns if c not in (label, weight)]
    texts = [c for c in chosen if _is_text(frame.dtypes[c])]
    for c in chosen:
        if not _is_text(frame.dtypes[c]) and not pd.api.types.is_numeric_dtype(frame.dtypes[c]):
            raise InvalidDataError(f"column {c!r} holds {frame.dtypes[c]} values, neither numbers nor text; convert "
                                   "it or leave it out of features")
    string_label = _is_text(frame.dtypes[label])
    scanned = list(dict.fromkeys(texts + ([label] if string_label else [])))
    parts = frame.to_delayed()
    scans = client.gather(client.compute([dask.delayed(_scan)(p, scanned, one_hot_max_levels, label) for p in parts]))
    rows = [n for n, _ in scans]
    levels: dict[str, set[str] | None] = {c: set() for c in scanned}
    for _, found in scans:
        for c, values in found.items():
            merged = None if levels[c] is None or values is None else levels[c] | values
            # partitions under the cap each may be over it together
            levels[c] = None if merged is None or len(merged) > _level_cap(c, label, one_hot_max_levels) else merged
    features_ = _decide(chosen, texts, levels, label=label, weight=weight, string_label=string_label,
                        crosses=crosses, hash_features=hash_features, one_hot_max_levels=one_hot_max_levels)
    pieces = [dask.delayed(features_.transform, pure=True)(p, first_row=start)
              for p, start in zip(parts, piece_starts(rows))]
    probe = features_.transform(frame._meta, first_row=0)
    shard_format = ShardFormat.of_first_block(*probe, shard_rows=shard_rows, dtype=dtype, compressors=compressors)
    return pieces, rows, shard_format, features_


def _is_text(dtype: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)
                or isinstance(dtype, pd.CategoricalDtype))


def _scan(part: Any, columns: list[str], cap: int, label: str) -> tuple[int, dict[str, set[str] | None]]:
    """Task: a partition's rows and, per text column, its levels (None past ``cap``; the
    label's up to :data:`MAX_LABELS_COUNTED`)."""
    found: dict[str, set[str] | None] = {}
    for c in columns:
        values = part[c].dropna().unique()
        found[c] = None if len(values) > _level_cap(c, label, cap) else {str(v) for v in values}
    return len(part), found


def _level_cap(column: str, label: str, cap: int) -> int:
    """How many levels of ``column`` are counted before it counts as having too many."""
    return MAX_LABELS_COUNTED if column == label else cap


def _decide(chosen: list[str], texts: list[str], levels: dict[str, set[str] | None], *, label: str,
            weight: str | None, string_label: bool, crosses: Sequence[tuple[str, str]], hash_features: int | None,
            one_hot_max_levels: int) -> FrameFeatures:
    classes = None
    if string_label:
        found = levels[label]
        if found is None:
            raise InvalidDataError(f"label column {label!r} holds text with more than {MAX_LABELS_COUNTED} distinct "
                                   "values: a label is a number, or one of a few classes")
        classes = tuple(sorted(found))
    one_hot, hashed = [], []
    for c in texts:
        found = levels[c]
        if found is not None and len(found) <= one_hot_max_levels:
            one_hot.append((c, tuple(sorted(found))))
        elif hash_features is None:
            raise InvalidDataError(f"column {c!r} has more than {one_hot_max_levels} levels: hash it (hash_features, "
                                   "--hash-features 2**22), raise one_hot_max_levels, or leave it out")
        else:
            hashed.append(c)
    if crosses and hash_features is None:
        raise ConfigurationError(f"crosses {[list(p) for p in crosses]} are hashed: give hash_features too")
    return FrameFeatures(
        label=label, weight=weight, numeric=tuple(c for c in chosen if c not in texts), one_hot=tuple(one_hot),
        hashed=tuple(hashed), crosses=tuple((str(a), str(b)) for a, b in crosses), hash_features=hash_features or 0,
        classes=classes)
