"""DataFrames (Dask or pandas) as the pieces of a worker-side write, or as the rows of an
estimator's ``X``.

One pass over the partitions, on the workers, counts their rows and collects the levels of
the string and categorical columns (at most ``one_hot_max_levels + 1`` per column and
partition reach the client); that decides the :class:`FrameFeatures`
(:func:`decide_features`). The write then turns each partition into ``(X, y, w, offset)`` where it
is read (:mod:`dasklbfgs.data.worker_writes`); an estimator takes the ``X`` of each
partition as a chunk of a lazy dask array (:func:`feature_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dasklbfgs.data._shard_format import MAX_LABELS_COUNTED, ShardFormat
from dasklbfgs.data.frame_features import CLASS_TASKS, LABEL_TASKS, MAX_INTEGER_CLASSES, FrameFeatures
from dasklbfgs.data.rows import Rows
from dasklbfgs.data.worker_writes import piece_starts
from dasklbfgs.errors import ConfigurationError, InvalidDataError

__all__ = ["check_encoding", "check_task", "decide_features", "feature_rows", "frame_pieces", "is_table",
           "text_columns"]


def frame_pieces(
    frame: Any, *, label: str, features: Sequence[str] | None, weight: str | None, offset: str | None,
    one_hot_max_levels: int, hash_features: int | None, crosses: Sequence[tuple[str, str]], shard_rows: int,
    dtype: Any, compressors: tuple, partition_rows: int, client: Any, task: str | None = None,
) -> tuple[list[Any], list[int], ShardFormat, FrameFeatures]:
    """``(pieces, rows per piece, format, features)`` of a Dask or pandas DataFrame (``task``:
    what its labels are for, :func:`decide_features`)."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    if isinstance(frame, pd.DataFrame):
        frame = dd.from_pandas(frame, chunksize=partition_rows, sort=False)
    features_, rows = decide_features(frame, label=label, features=features, weight=weight, offset=offset,
                                      one_hot_max_levels=one_hot_max_levels, hash_features=hash_features,
                                      crosses=crosses, client=client, task=task)
    pieces = [dask.delayed(features_.transform, pure=True)(p, first_row=start)
              for p, start in zip(frame.to_delayed(), piece_starts(rows))]
    probe = features_.transform(frame._meta, first_row=0)
    shard_format = ShardFormat.of_first_block(Rows(*probe), shard_rows=shard_rows, dtype=dtype, compressors=compressors)
    return pieces, rows, shard_format, features_


def decide_features(
    frame: Any, *, label: str | None, features: Sequence[str] | None = None, weight: str | None = None,
    offset: str | None = None, one_hot_max_levels: int, hash_features: int | None,
    crosses: Sequence[tuple[str, str]] = (), client: Any, task: str | None = None,
) -> tuple[FrameFeatures, list[int]]:
    """How the columns of ``frame`` become features, and its rows per partition: a Dask
    DataFrame's partitions scanned by the workers of ``client``, a pandas DataFrame here (one
    partition; ``client`` unused, None). ``label`` None: the table holds features only (an
    estimator's ``X``).

    What the labels are for is decided here too, from the whole table (``label_attrs``):
    text labels are classes, sorted (``y`` is then the index of a row's class); integer and
    boolean labels that are class indices 0..K-1 (0 among them), K at most
    :data:`MAX_INTEGER_CLASSES`, are classes kept as they are; floats and many integers are
    numbers (regression); a few integers that are not class indices (-1 and 1) record no task. ``task`` (one of
    :data:`LABEL_TASKS`) overrides that choice: a classification task takes numbers that are
    class indices (any K up to :data:`~dasklbfgs.data._shard_format.MAX_LABELS_COUNTED`), a
    numeric one keeps them numbers (and refuses text)."""
    import dask
    import pandas as pd

    if not is_table(frame):
        raise ConfigurationError(f"expected a Dask or pandas DataFrame, got {type(frame).__name__}")
    check_encoding(one_hot_max_levels, hash_features)
    check_task(task)
    columns = [str(c) for c in frame.columns]
    named = [*([label] if label else []), *([weight] if weight else []), *([offset] if offset else []),
             *(features or []),
             *(c for pair in crosses for c in pair)]
    if missing := [c for c in named if c not in columns]:
        raise InvalidDataError(f"the table has no column(s) {missing}; its columns are {columns}")
    chosen = list(features) if features is not None else [c for c in columns if c not in (label, weight, offset)]
    texts = [c for c in chosen if _is_text(frame.dtypes[c])]
    for c in chosen:
        if not _is_text(frame.dtypes[c]) and not pd.api.types.is_numeric_dtype(frame.dtypes[c]):
            raise InvalidDataError(f"column {c!r} holds {frame.dtypes[c]} values, neither numbers nor text; convert "
                                   "it or leave it out of features")
    string_label = label is not None and _is_text(frame.dtypes[label])
    numeric_classes = label is not None and not string_label and _may_be_classes(frame.dtypes[label], task)
    scanned = list(dict.fromkeys(texts + ([label] if label is not None and (string_label or numeric_classes) else [])))
    by_value = label if numeric_classes else None  # its levels are numbers, not text
    if isinstance(frame, pd.DataFrame):
        scans = [_scan(frame, scanned, one_hot_max_levels, label, by_value)]
    else:
        scans = client.gather(client.compute([dask.delayed(_scan)(p, scanned, one_hot_max_levels, label, by_value)
                                              for p in frame.to_delayed()]))
    rows = [n for n, _ in scans]
    levels: dict[str, set[Any] | None] = {c: set() for c in scanned}
    for _, found in scans:
        for c, values in found.items():
            known = levels[c]
            merged = None if known is None or values is None else known | values
            # partitions under the cap each may be over it together
            levels[c] = None if merged is None or len(merged) > _level_cap(c, label, one_hot_max_levels) else merged
    return _decide(chosen, texts, levels, label=label, weight=weight, offset=offset, string_label=string_label,
                   crosses=crosses, hash_features=hash_features, one_hot_max_levels=one_hot_max_levels,
                   task=task), rows


def check_task(task: Any) -> None:
    """Refuse a ``task`` that is not one of :data:`LABEL_TASKS` (None: decided by the labels)."""
    if task is not None and task not in LABEL_TASKS:
        raise ConfigurationError(f"task must be one of {list(LABEL_TASKS)}, or None to decide by the labels, got "
                                 f"{task!r}")


def feature_rows(features: FrameFeatures, frame: Any, rows: Sequence[int]) -> Any:
    """The ``X`` of a Dask DataFrame as a lazy dask array, a chunk per partition (of ``rows``
    rows each), each made by a worker: dense float64, or CSR chunks when hashed."""
    import dask
    import dask.array as da
    import scipy.sparse as sp  # loaded with sparse data only

    width = features.n_features
    meta = sp.csr_array((0, width)) if features.sparse else np.empty((0, width))
    blocks = [da.from_delayed(dask.delayed(features.features, pure=True)(part, first_row=start),
                              shape=(int(n_rows), width), dtype=np.float64, meta=meta)
              for part, start, n_rows in zip(frame.to_delayed(), piece_starts(rows)[:-1], rows, strict=True)]
    return da.concatenate(blocks, axis=0)


def check_encoding(one_hot_max_levels: Any, hash_features: Any) -> None:
    """Refuse encoding options out of range (naming the value)."""
    if hash_features is not None and (not isinstance(hash_features, int) or hash_features <= 0):
        raise ConfigurationError(f"hash_features must be a positive integer, got {hash_features!r}")
    if not isinstance(one_hot_max_levels, int) or one_hot_max_levels < 0:
        raise ConfigurationError(f"one_hot_max_levels must be a non-negative integer, got {one_hot_max_levels!r}")


def is_table(value: Any) -> bool:
    """Whether ``value`` is a pandas or Dask DataFrame (loading neither for other values)."""
    if not type(value).__module__.startswith(("pandas", "dask")):
        return False
    import dask.dataframe as dd
    import pandas as pd

    return isinstance(value, (pd.DataFrame, dd.DataFrame))


def text_columns(frame: Any) -> list[str]:
    """The string and categorical columns of a Dask or pandas DataFrame."""
    return [str(c) for c, dtype in frame.dtypes.items() if _is_text(dtype)]


def _is_text(dtype: Any) -> bool:
    import pandas as pd

    return bool(pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype)
                or isinstance(dtype, pd.CategoricalDtype))


def _may_be_classes(dtype: Any, task: str | None) -> bool:
    """Whether a numeric label of ``dtype`` may be classes, its values to be scanned: with a
    classification ``task`` any numbers, without one integers and booleans."""
    import pandas as pd

    if task is not None:
        return task in CLASS_TASKS
    return bool(pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))


def _scan(part: Any, columns: list[str], cap: int, label: str | None, by_value: str | None = None
          ) -> tuple[int, dict[str, set[Any] | None]]:
    """Task: a partition's rows and, per text column, its levels (None past ``cap``; the
    label's up to :data:`MAX_LABELS_COUNTED`), as text; those of the column ``by_value`` (a
    numeric label) as numbers."""
    found: dict[str, set[Any] | None] = {}
    for c in columns:
        values = part[c].dropna().unique()
        if len(values) > _level_cap(c, label, cap):
            found[c] = None
        elif c == by_value:
            found[c] = {v.item() if hasattr(v, "item") else v for v in values}
        else:
            found[c] = {str(v) for v in values}
    return len(part), found


def _level_cap(column: str, label: str | None, cap: int) -> int:
    """How many levels of ``column`` are counted before it counts as having too many."""
    return MAX_LABELS_COUNTED if column == label else cap


def _label_classes(label: str, levels: dict[str, set[Any] | None], *, text: bool, task: str | None
                   ) -> tuple[tuple[str, ...] | None, dict[str, Any]]:
    """A text label's classes (its levels, sorted: ``y`` is the index of a row's level), and
    what the dataset records of its labels (``FrameFeatures.label_attrs``; see :func:`decide_features`).

    Numbers are never re-encoded: a number names the same class in every table written, so a
    training table and a held-out one written apart agree. Numbers are classes when they are
    class indices, 0..K-1 (integers and booleans, K at most :data:`MAX_INTEGER_CLASSES`
    unless ``task`` asks for classes); integers of few levels that are not (-1 and 1, say) are
    left for the user to say (no task recorded); other numbers are fitted as they are."""
    if text and task is not None and task not in CLASS_TASKS:
        raise ConfigurationError(f"task={task!r} fits numbers, but label column {label!r} holds text: give numeric "
                                 "labels, or task='classification' to fit its values as classes", parameters=("task",))
    found = levels.get(label, set())  # not scanned: float labels without a classification task
    if found is None and (text or task in CLASS_TASKS):
        what = "text with" if text else "numbers of"
        raise InvalidDataError(f"label column {label!r} holds {what} more than {MAX_LABELS_COUNTED} distinct values: "
                               "too many classes; a label is a number, or one of a few classes")
    if text:
        assert found is not None
        classes = tuple(sorted(found))
        return classes, _class_attrs(label, [str(c) for c in classes], task)
    values = sorted(found or ())
    indices = bool(values) and all(float(v).is_integer() and 0 <= v for v in values)
    if task in CLASS_TASKS:
        if not indices:
            bad = next(v for v in values if not (float(v).is_integer() and 0 <= v))
            raise ConfigurationError(f"task={task!r} takes class indices 0..K-1 as labels, but label column {label!r} "
                                     f"holds {bad!r}: map its values to 0..K-1 first (e.g. (y > 0).astype(int))",
                                     parameters=("task",))
    elif task is not None:
        return None, {"task": task}
    elif not values or len(values) > MAX_INTEGER_CLASSES:
        return None, {"task": "regression"}  # floats, or many integers: numbers, such as counts or amounts
    elif not indices or min(values) != 0 or max(values) >= MAX_INTEGER_CLASSES:
        return None, {}  # -1 and 1, 1 to 5: classes or numbers, the user says which
    n_classes = max(int(max(values)) + 1, 2)
    names = ["False", "True"] if all(isinstance(v, bool) for v in values) else [str(k) for k in range(n_classes)]
    return None, _class_attrs(label, names, task)


def _class_attrs(label: str, names: list[str], task: str | None) -> dict[str, Any]:
    """``task``, ``n_classes`` and ``classes`` of labels that are classes (``names[k]``: class ``k``)."""
    if task == "binary" and len(names) > 2:
        shown = names[:10] + (["..."] if len(names) > 10 else [])
        raise ConfigurationError(f"task='binary' takes two classes, but label column {label!r} holds {len(names)}: "
                                 f"{shown}; use task='multiclass'", parameters=("task",))
    if task in (None, "classification"):
        task = "binary" if len(names) <= 2 else "multiclass"
    return {"task": task, "n_classes": max(len(names), 2), "classes": names}


def _decide(chosen: list[str], texts: list[str], levels: dict[str, set[Any] | None], *, label: str | None,
            weight: str | None, offset: str | None, string_label: bool, crosses: Sequence[tuple[str, str]],
            hash_features: int | None, one_hot_max_levels: int, task: str | None = None) -> FrameFeatures:
    classes, label_attrs = (None, {}) if label is None else \
        _label_classes(label, levels, text=string_label, task=task)
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
        label=label, weight=weight, offset=offset, numeric=tuple(c for c in chosen if c not in texts),
        one_hot=tuple(one_hot),
        hashed=tuple(hashed), crosses=tuple((str(a), str(b)) for a, b in crosses), hash_features=hash_features or 0,
        classes=classes, label_attrs=tuple(label_attrs.items()))
