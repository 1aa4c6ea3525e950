"""Synthetic classification and regression data, generated block by block.

Each block of rows draws from its own seeded generator, ``default_rng([seed, block])``,
so a dataset of any size is written in bounded memory and is the same for the same seed
whatever the block size the writer uses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dasklbfgs.errors import ConfigurationError

GENERATOR_BLOCK_ROWS = 65_536


def seeded_blocks(
    n_rows: int, block_rows: int, seed: int, first_block: int, *stream: int
) -> Iterator[tuple[np.random.Generator, int]]:
    """``(rng, rows)`` for each block of ``n_rows`` rows: block ``b`` has ``block_rows``
    rows (the last one fewer) and draws from ``default_rng([seed, first_block + b, *stream])``."""
    if n_rows < 1:
        raise ConfigurationError(f"rows must be >= 1, got {n_rows}")
    for b, start in enumerate(range(0, n_rows, block_rows)):
        rng = np.random.default_rng([seed, first_block + b, *stream])
        yield rng, min(block_rows, n_rows - start)


#: the planted models' kinds
KINDS = ("logistic", "multinomial", "regression", "counts", "amounts")


@dataclass(frozen=True)
class SyntheticProblem:
    """A planted linear model; ``kind`` is ``"logistic"``, ``"multinomial"``, ``"regression"``,
    ``"counts"`` (Poisson counts, mean ``exp(margin / 4 - 1.5)``: about 0.25 a row, as claim
    frequencies) or ``"amounts"`` (Gamma amounts of shape 2, mean ``exp(margin / 4 + 7)``: as
    claim sizes).

    ``ill_conditioned`` multiplies feature j by ``scales[j]`` (log-spaced over
    ``condition_decades`` orders of magnitude) and divides the planted weights by the same
    scale, so the labels carry the same signal while the Hessian is badly scaled.
    """

    kind: str
    n_features: int
    n_classes: int = 2
    seed: int = 0
    ill_conditioned: bool = False
    condition_decades: float = 4.0
    noise: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.n_features < 1:
            raise ConfigurationError(f"n_features must be >= 1, got {self.n_features}")
        if self.kind == "multinomial" and self.n_classes < 2:
            raise ConfigurationError(f"n_classes must be >= 2, got {self.n_classes}")

    @property
    def scales(self) -> np.ndarray:
        if not self.ill_conditioned:
            return np.ones(self.n_features)
        half = self.condition_decades / 2
        return np.logspace(-half, half, self.n_features)

    def planted(self) -> tuple[np.ndarray, np.ndarray]:
        """The planted coefficients (d,) or (d, K) and intercept(s) in unscaled coordinates."""
        rng = np.random.default_rng([self.seed, 2**31 - 1])
        k = self.n_classes if self.kind == "multinomial" else 1
        coef = rng.normal(size=(self.n_features, k)) * (2.0 / np.sqrt(self.n_features))
        intercept = rng.normal(size=k) * 0.5
        return coef, intercept

    def blocks(self, n_rows: int, *, first_block: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(X, y)`` blocks that together hold ``n_rows`` rows."""
        coef, intercept = self.planted()
        scales = self.scales
        for rng, rows in seeded_blocks(n_rows, GENERATOR_BLOCK_ROWS, self.seed, first_block):
            Z = rng.normal(size=(rows, self.n_features))
            margin = Z @ coef + intercept
            yield Z * scales, self._labels(margin, rng)

    def _labels(self, margin: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "regression":
            return margin[:, 0] + self.noise * rng.normal(size=margin.shape[0])
        if self.kind == "counts":
            return rng.poisson(np.exp(margin[:, 0] / 4.0 - 1.5)).astype(np.float64)
        if self.kind == "amounts":
            return rng.gamma(2.0, np.exp(margin[:, 0] / 4.0 + 7.0) / 2.0)
        if self.kind == "logistic":
            p = 1.0 / (1.0 + np.exp(-margin[:, 0]))
            return (rng.random(margin.shape[0]) < p).astype(np.int64)
        shifted = margin - margin.max(axis=1, keepdims=True)
        p = np.exp(shifted)
        p /= p.sum(axis=1, keepdims=True)
        u = rng.random((margin.shape[0], 1))
        return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), self.n_classes - 1).astype(np.int64)
