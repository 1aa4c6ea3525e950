"""How a table's columns become ``X``, ``y`` and weights: recorded in the dataset's schema.

A :class:`FrameFeatures` is decided once from a whole table (:mod:`dasklbfgs.data.frame_input`)
and then applied to every partition, on the workers, and later to new data to be scored (the
estimators apply the one their fit recorded to the tables given to ``predict``):

- numeric and boolean columns are features as they are;
- a string or categorical column with few levels is one-hot encoded (one column per level,
  levels in sorted order, named ``column=level``; a missing or unseen value sets none of
  them, as scikit-learn's ``OneHotEncoder(handle_unknown="ignore")``);
- one with many levels, and every *cross* of two columns, is hashed into ``hash_features``
  columns with a sign, as scikit-learn's ``FeatureHasher`` (and Vowpal Wabbit) do: the
  string ``column=value`` (``a=x^b=y`` for a cross) is hashed by 32-bit MurmurHash3, its
  absolute value modulo ``hash_features`` is the column and its sign the value's sign;
  colliding features add up. Hashing makes ``X`` sparse.

Columns are laid out numeric first, then the one-hot blocks, then the hashed block.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasklbfgs.errors import ConfigurationError, InvalidDataError

__all__ = ["CLASS_TASKS", "DEFAULT_ONE_HOT_MAX_LEVELS", "FrameFeatures", "LABEL_TASKS", "MAX_INTEGER_CLASSES"]

#: A text column with at most this many levels is one-hot encoded; one with more is hashed.
DEFAULT_ONE_HOT_MAX_LEVELS = 32

CROSS_SEPARATOR = "^"

#: what a table's labels may be written for (``task``): classes (``binary`` two, ``multiclass``
#: more, ``classification`` either, by the classes found), or numbers to fit (``regression``,
#: ``counts``: Poisson, ``amounts``: Gamma): the tasks the recipes record, which
#: :func:`~dasklbfgs.models.registry.default_model` reads
LABEL_TASKS = ("classification", "binary", "multiclass", "regression", "counts", "amounts")
CLASS_TASKS = ("classification", "binary", "multiclass")
#: integer (and boolean) labels whose values are class indices 0..K-1 with K at most this many
#: are classes unless a ``task`` says otherwise; other numbers are fitted as they are (regression)
MAX_INTEGER_CLASSES = 20


@dataclass(frozen=True)
class FrameFeatures:
    """The columns of a table as features; see the module docstring. ``label`` is None for a
    table of features alone (an estimator's ``X``, its labels given apart)."""

    label: str | None
    weight: str | None = None
    offset: str | None = None
    numeric: tuple[str, ...] = ()
    one_hot: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (column, its levels in order)
    hashed: tuple[str, ...] = ()
    crosses: tuple[tuple[str, str], ...] = ()
    hash_features: int = 0
    classes: tuple[str, ...] | None = None  # a text label's levels: y is the index of its level
    #: what the dataset records of its labels (``task``, ``n_classes``, ``classes``: the attributes
    #: ``dasklbfgs train`` chooses its model by), decided from the whole table when it was written;
    #: not part of how a row is read, so not in the schema
    label_attrs: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    @property
    def n_features(self) -> int:
        return len(self.numeric) + sum(len(levels) for _, levels in self.one_hot) + self.hash_features

    @property
    def sparse(self) -> bool:
        return self.hash_features > 0

    @property
    def feature_names(self) -> list[str] | None:
        """One name per column of ``X``; None when hashed (its columns have no names)."""
        if self.sparse:
            return None
        return [*self.numeric, *(f"{column}={level}" for column, levels in self.one_hot for level in levels)]

    @property
    def columns(self) -> list[str]:
        """Every column the features read (not the label, weight or offset)."""
        crossed = [c for pair in self.crosses for c in pair]
        return list(dict.fromkeys([*self.numeric, *(c for c, _ in self.one_hot), *self.hashed, *crossed]))

    def missing(self, columns: Iterable[Any]) -> list[str]:
        """The columns the features read that ``columns`` (a table's) lack, in order."""
        return _absent(self.columns, columns)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "weight": self.weight, "offset": self.offset, "numeric": list(self.numeric),
                "one_hot": {column: list(levels) for column, levels in self.one_hot},
                "hashed": list(self.hashed), "crosses": [list(pair) for pair in self.crosses],
                "hash_features": self.hash_features, "classes": None if self.classes is None else list(self.classes)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FrameFeatures:
        return cls(label=doc["label"], weight=doc["weight"], offset=doc.get("offset"), numeric=tuple(doc["numeric"]),
                   one_hot=tuple((c, tuple(levels)) for c, levels in doc["one_hot"].items()),
                   hashed=tuple(doc["hashed"]), crosses=tuple((a, b) for a, b in doc["crosses"]),
                   hash_features=int(doc["hash_features"]),
                   classes=None if doc["classes"] is None else tuple(doc["classes"]))

    def transform(self, frame: Any, *, first_row: int = 0
                  ) -> tuple[Any, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """``(X, y, w, offset)`` of a pandas DataFrame (``first_row``: where it starts, for
        errors; ``w`` and ``offset`` None without their columns)."""
        label = self.label
        if label is None:
            raise ConfigurationError("these features were decided for a table without labels: take its rows' "
                                     "features(frame)")
        extras = [column for column in (self.weight, self.offset) if column]
        _check_columns(frame, [label, *self.columns, *extras], first_row)
        w, offset = (None if column is None else _numbers(frame[column], column, first_row)
                     for column in (self.weight, self.offset))
        return self.features(frame, first_row=first_row), self._labels(frame[label], label, first_row), w, offset

    def features(self, frame: Any, *, first_row: int = 0) -> Any:
        """``X`` of a pandas DataFrame: dense float64, or CSR when hashed."""
        import scipy.sparse as sp  # loaded with sparse data only

        _check_columns(frame, self.columns, first_row)
        rows = len(frame)
        numeric = [_numbers(frame[c], c, first_row) for c in self.numeric]
        coded = []  # (column offset, code per row: -1 for none)
        offset = len(self.numeric)
        for column, levels in self.one_hot:
            coded.append((offset, _level_codes(frame[column], levels)))
            offset += len(levels)
        if not self.sparse:
            X = np.zeros((rows, self.n_features))
            for j, values in enumerate(numeric):
                X[:, j] = values
            for start, codes in coded:
                coded_rows = np.flatnonzero(codes >= 0)
                X[coded_rows, start + codes[coded_rows]] = 1.0
            return X
        entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, columns, values)
        for j, values in enumerate(numeric):
            nonzero = np.flatnonzero(values)
            entries.append((nonzero, np.full(nonzero.size, j), values[nonzero].astype(np.float64)))
        for start, codes in coded:
            coded_rows = np.flatnonzero(codes >= 0)
            entries.append((coded_rows, start + codes[coded_rows], np.ones(coded_rows.size)))
        strings = [_strings(frame[c], f"{c}=") for c in self.hashed] + [
            _crossed(_strings(frame[a], f"{a}="), _strings(frame[b], f"{b}=")) for a, b in self.crosses]
        for text in strings:
            texted_rows = np.flatnonzero(text.notna().to_numpy())
            hashed_column, sign = _hashed(text.iloc[texted_rows].to_numpy(dtype=object), self.hash_features)
            entries.append((texted_rows, offset + hashed_column, sign))
        row_ids, col_ids, nonzeros = (np.concatenate(parts) if parts else np.zeros(0) for parts in zip(*entries)) \
            if entries else (np.zeros(0, np.int64),) * 3
        X_sparse = sp.coo_array((nonzeros, (row_ids, col_ids)), shape=(rows, self.n_features)).tocsr()
        X_sparse.sort_indices()  # coo to csr adds up colliding features
        return X_sparse

    def _labels(self, series: Any, label: str, first_row: int) -> np.ndarray:
        if self.classes is None:
            return _numbers(series, label, first_row)
        codes = _level_codes(series, self.classes)
        if (codes < 0).any():
            row = int(np.argmax(codes < 0))
            raise InvalidDataError(f"label column {label!r} has {series.iloc[row]!r} at row {first_row + row}, not "
                                   f"one of the classes {list(self.classes)}")
        return codes.astype(np.int64)


def _check_columns(frame: Any, wanted: Iterable[str], first_row: int) -> None:
    """Refuse a table without one of the ``wanted`` columns, naming those it lacks."""
    if missing := _absent(wanted, frame.columns):
        raise InvalidDataError(f"the rows starting at row {first_row} have no column(s) {missing}; "
                               f"found {list(map(str, frame.columns))}")


def _absent(wanted: Iterable[str], columns: Iterable[Any]) -> list[str]:
    present = {str(c) for c in columns}
    return [c for c in wanted if c not in present]


def _numbers(series: Any, name: str, first_row: int) -> np.ndarray:
    """A numeric or boolean column as float64 (int64 kept for integer labels), NaN refused."""
    import pandas as pd

    if not (pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)):
        raise InvalidDataError(f"column {name!r} holds {series.dtype} values at rows from {first_row}, "
                               "expected numbers")
    if series.isna().any():
        row = int(np.argmax(series.isna().to_numpy()))
        raise InvalidDataError(f"column {name!r} has a missing value at row {first_row + row}; drop or impute "
                               "such rows first")
    return series.to_numpy(dtype=np.int64 if getattr(series.dtype, "kind", "f") in "biu" else np.float64)


def _strings(series: Any, prefix: str) -> Any:
    """``prefix + value`` per row as an object Series, missing values kept missing."""
    import pandas as pd

    text = series.astype(object).map(str, na_action="ignore")
    return pd.Series(np.where(series.isna().to_numpy(), None, prefix + text.fillna("").astype(object)),
                     index=series.index, dtype=object)


def _crossed(a: Any, b: Any) -> Any:
    import pandas as pd

    both = a.notna().to_numpy() & b.notna().to_numpy()
    joined = a.fillna("").astype(object) + CROSS_SEPARATOR + b.fillna("").astype(object)
    return pd.Series(np.where(both, joined, None), index=a.index, dtype=object)


def _level_codes(series: Any, levels: tuple[str, ...]) -> np.ndarray:
    """Per row, the index of its value (as text) among ``levels``; -1 for missing or unseen."""
    import pandas as pd

    text = series.astype(object).map(str, na_action="ignore")
    return np.asarray(pd.Index(list(levels), dtype=object).get_indexer(text.to_numpy(dtype=object)), dtype=np.int64)


def _hashed(strings: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Column and sign of each string, as scikit-learn's ``FeatureHasher`` places it:
    each distinct string hashed once."""
    import scipy.sparse as sp  # loaded with sparse data only
    from sklearn.feature_extraction import FeatureHasher

    if strings.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    distinct, inverse = np.unique(strings.astype(str), return_inverse=True)
    placed = FeatureHasher(n_features=n_features, input_type="string").transform([[s] for s in distinct])
    placed = sp.csr_array(placed)
    return placed.indices.astype(np.int64)[inverse], placed.data.astype(np.float64)[inverse]
