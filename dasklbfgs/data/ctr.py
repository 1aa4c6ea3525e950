"""Click-through-like data: hashed categorical features, wide and sparse, few positives.

What click-through models on parameter servers train: every row is an impression with
:data:`N_FIELDS` categorical fields (site, ad, user segment, ...), each value drawn from a
power law (a few values are everywhere, most are rare), plus :data:`CROSSES` crossed pairs of
fields. Each (field, value) and each cross is *hashed* into ``n_features`` columns (the
hashing trick: no dictionary, collisions allowed), giving ``N_FIELDS + len(CROSSES)`` = 34
non-zeros of 1.0 per row (fewer when two hash to the same column: they add up). Labels come
from a planted logistic model on the hashed columns whose bias makes about
:data:`POSITIVE_RATE` of the rows positive.

Rows are generated block by block from ``default_rng([seed, block])`` like the synthetic
recipes (:mod:`dasklbfgs.data.synthetic`): any number of rows in bounded memory, the same
rows for the same seed whatever the writer's block size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from dasklbfgs.data.synthetic import GENERATOR_BLOCK_ROWS, seeded_blocks

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["ClickLogs", "DEFAULT_HASHED_FEATURES", "N_FIELDS", "CROSSES", "POSITIVE_RATE"]

DEFAULT_HASHED_FEATURES = 2**22
N_FIELDS = 26
CROSSES = ((0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7), (6, 8))
POSITIVE_RATE = 0.03
ZIPF_EXPONENT = 1.3  # value frequencies: the k-th most common value is drawn ~ k^-1.3 of the time
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_BLOCK_ROWS = GENERATOR_BLOCK_ROWS // 4  # 16k rows x 34 non-zeros per generated block


def _hash(field: np.ndarray | int, value: np.ndarray, n_features: int) -> np.ndarray:
    """Column of (field, value): a 64-bit multiply-xorshift mix (splitmix64's finaliser)
    reduced modulo ``n_features``."""
    with np.errstate(over="ignore"):
        h = np.asarray(value, dtype=np.uint64) * _MIX[0] + np.uint64(field) * _MIX[1]
        h ^= h >> np.uint64(31)
        h *= _MIX[2]
        h ^= h >> np.uint64(29)
    return (h % np.uint64(n_features)).astype(np.int64)


@dataclass(frozen=True)
class ClickLogs:
    """Generator of ``(X, y)`` blocks: ``X`` a CSR block of hashed one-hot features."""

    n_features: int = DEFAULT_HASHED_FEATURES
    seed: int = 0

    @cached_property
    def cardinalities(self) -> np.ndarray:
        """Distinct values per field, log-spaced from 3 to 1,000,000 (a fixed draw per seed)."""
        rng = np.random.default_rng([self.seed, 2**31 - 2])
        return rng.permutation(np.logspace(np.log10(3), 6, N_FIELDS).astype(np.int64))

    @cached_property
    def teacher(self) -> tuple[np.ndarray, float]:
        """Planted weights on the hashed columns and the bias that makes about
        :data:`POSITIVE_RATE` of the rows positive (found on a calibration sample)."""
        rng = np.random.default_rng([self.seed, 2**31 - 1])
        n_per_row = N_FIELDS + len(CROSSES)
        weights = rng.normal(scale=1.5 / np.sqrt(n_per_row), size=self.n_features).astype(np.float32)
        margins = self._columns(np.random.default_rng([self.seed, 2**31 - 3]), 20_000)
        z = weights[margins].sum(axis=1, dtype=np.float64)
        low, high = -20.0, 5.0
        for _ in range(60):  # bisection on the bias: mean sigmoid(z + b) = POSITIVE_RATE
            mid = (low + high) / 2
            low, high = (mid, high) if np.mean(1 / (1 + np.exp(-(z + mid)))) < POSITIVE_RATE else (low, mid)
        return weights, (low + high) / 2

    def _columns(self, rng: np.random.Generator, rows: int) -> np.ndarray:
        """The hashed columns of ``rows`` impressions, (rows, 34)."""
        values = np.minimum(rng.zipf(ZIPF_EXPONENT, size=(rows, N_FIELDS)) - 1, 2**62)
        values %= self.cardinalities  # rare draws past a field's cardinality wrap onto its values
        columns = [_hash(f, values[:, f], self.n_features) for f in range(N_FIELDS)]
        for k, (a, b) in enumerate(CROSSES):
            columns.append(_hash(N_FIELDS + k, values[:, a] * self.cardinalities[b] + values[:, b], self.n_features))
        return np.stack(columns, axis=1)

    def blocks(self, n_rows: int, *, first_block: int = 0) -> Iterator[tuple[sp.csr_array, np.ndarray]]:
        """Yield ``(X, y)`` blocks that together hold ``n_rows`` rows."""
        import scipy.sparse as sp  # with the data: the command line reads this module's constants

        weights, bias = self.teacher
        for rng, rows in seeded_blocks(n_rows, _BLOCK_ROWS, self.seed, first_block):
            columns = self._columns(rng, rows)
            margin = weights[columns].sum(axis=1, dtype=np.float64) + bias
            y = (rng.random(rows) < 1 / (1 + np.exp(-margin))).astype(np.int64)
            width = columns.shape[1]
            X = sp.csr_array((np.ones(rows * width), columns.ravel(), np.arange(0, rows * width + 1, width)),
                             shape=(rows, self.n_features))
            X.sum_duplicates()  # two fields hashed to one column: one entry of 2.0
            yield X, y
