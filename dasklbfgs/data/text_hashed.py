"""Bag-of-words text, hashed: which standard-library module a docstring comes from.

The ``text-hashed`` recipe: every docstring of the :data:`N_CLASSES`-or-so standard library
modules with the most docstrings (the corpus of :mod:`dasklbfgs.data._stdlib_text`, on
every machine) is one row; its label is its module. Features are the docstring's unigrams
and bigrams (within sentences), *hashed* into ``n_features`` columns (no vocabulary; a stable
64-bit hash, the same on every run and machine), weighted by tf-idf with the training split's
document frequencies (``idf = ln((1 + N) / (1 + df)) + 1``, scikit-learn's smooth idf) and
scaled to unit L2 norm per row. Wide and sparse like text classification at scale, small
enough to train in seconds.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from dasklbfgs.data._stdlib_text import BOUNDARY, module_docstrings, tokenize
from dasklbfgs.errors import ConfigurationError

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["HashedDocstrings", "DEFAULT_TEXT_FEATURES", "N_CLASSES"]

DEFAULT_TEXT_FEATURES = 2**18
N_CLASSES = 10


def hashed_column(term: str, n_features: int) -> int:
    """The column of ``term``: its 64-bit BLAKE2b digest modulo ``n_features`` (Python's own
    ``hash`` of a string changes from process to process)."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little") % n_features


def terms(docstring: str) -> list[str]:
    """The unigrams and the bigrams (``"a b"``, never across a sentence end) of ``docstring``."""
    words = tokenize(docstring)
    unigrams = [w for w in words if w != BOUNDARY]
    bigrams = [f"{a} {b}" for a, b in zip(words, words[1:]) if BOUNDARY not in (a, b)]
    return unigrams + bigrams


@dataclass(frozen=True)
class HashedDocstrings:
    """The recipe's rows: ``(module label, hashed tf-idf row)`` for train and test splits."""

    n_features: int = DEFAULT_TEXT_FEATURES
    n_classes: int = N_CLASSES
    seed: int = 0
    test_fraction: float = 0.2

    @cached_property
    def modules(self) -> list[str]:
        """The ``n_classes`` modules with the most docstrings (ties by name): label k is ``modules[k]``."""
        counts = Counter(module for module, _ in module_docstrings())
        if self.n_classes > len(counts):
            raise ConfigurationError(f"the 'text-hashed' recipe has {len(counts)} modules to label docstrings "
                                     f"with; n_classes must be at most that, got {self.n_classes}")
        return sorted(sorted(counts), key=lambda m: -counts[m])[: self.n_classes]

    @cached_property
    def _documents(self) -> dict[str, list[tuple[int, list[str]]]]:
        """``(label, terms)`` per split: a seeded shuffle of the labelled docstrings, the last
        ``test_fraction`` of them held out."""
        label = {module: k for k, module in enumerate(self.modules)}
        rows = [(label[module], terms(doc)) for module, doc in module_docstrings() if module in label]
        order = np.random.default_rng([self.seed, 2**31 - 4]).permutation(len(rows))
        n_test = int(round(len(rows) * self.test_fraction))
        shuffled = [rows[i] for i in order]
        return {"train": shuffled[: len(rows) - n_test], "test": shuffled[len(rows) - n_test :]}

    @cached_property
    def idf(self) -> dict[int, float]:
        """Smoothed inverse document frequency of each hashed column, from the training split."""
        train = self._documents["train"]
        df = Counter(c for _, words in train for c in {hashed_column(t, self.n_features) for t in words})
        return {c: float(np.log((1 + len(train)) / (1 + n)) + 1.0) for c, n in df.items()}

    def n_rows(self, split: str) -> int:
        return len(self._documents[split])

    def blocks(self, split: str) -> Iterator[tuple[sp.csr_array, np.ndarray]]:
        """One block with every row of ``split`` (a few thousand rows: small)."""
        import scipy.sparse as sp  # with the data: the command line reads this module's constants

        docs = self._documents[split]
        default_idf = float(np.log(1 + len(self._documents["train"])) + 1.0)  # a column no training row has
        indptr, indices, values = [0], [], []
        for _, words in docs:
            counts = Counter(hashed_column(t, self.n_features) for t in words)
            columns = np.array(sorted(counts), dtype=np.int64)
            weights = np.array([counts[c] * self.idf.get(c, default_idf) for c in columns])
            norm = np.linalg.norm(weights)
            indices.append(columns)
            values.append(weights / norm if norm > 0 else weights)
            indptr.append(indptr[-1] + len(columns))
        X = sp.csr_array((np.concatenate(values) if values else np.zeros(0),
                          np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64),
                          np.asarray(indptr)), shape=(len(docs), self.n_features))
        yield X, np.array([label for label, _ in docs], dtype=np.int64)
