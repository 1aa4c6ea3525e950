"""Motor insurance claims: policy features, years of exposure, claim counts and claim sizes.

What an actuary's pricing models are fitted to (French MTPL-like): every row is a policy
observed for ``exposure`` years (0.05 to 1: policies start and end within the year) with
:data:`NUMERIC` standardised features and a region (one-hot, region A the reference level:
no column), and as many more standardised rating factors (``risk_1``, ...) as asked for a
wider table. Claim counts are Poisson with the planted rate times the exposure, so a
frequency model is a Poisson GLM with the offset ``log(exposure)`` (:data:`FREQUENCY`:
about 0.1 claims a policy-year); each claim's size is Gamma (shape :data:`SEVERITY_SHAPE`)
with a planted log-linear mean around ``exp(7)``, and the severity rows are the policies
with claims, their label the average size of their claims and their weight the claim count
(the average of ``n`` sizes is Gamma with ``n`` times the shape: a Gamma GLM weighted by the
count is the sizes' likelihood).

Rows are generated block by block from ``default_rng([seed, block])`` like the synthetic
recipes (:mod:`dasklbfgs.data.synthetic`): any number of rows in bounded memory, the same
rows for the same seed whatever the writer's block size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dasklbfgs.data.synthetic import GENERATOR_BLOCK_ROWS, seeded_blocks
from dasklbfgs.errors import ConfigurationError

__all__ = ["Claims", "FEATURE_NAMES", "FREQUENCY", "NUMERIC", "REGIONS", "SEVERITY_SHAPE", "feature_names"]

NUMERIC = ("driver_age", "vehicle_age", "vehicle_power", "bonus_malus", "log_density")
REGIONS = ("A", "B", "C", "D", "E")
FEATURE_NAMES = [*NUMERIC, *(f"region={r}" for r in REGIONS[1:])]
#: claims per policy-year at the intercept
FREQUENCY = 0.1
SEVERITY_SHAPE = 2.0
MEAN_SIZE = float(np.exp(7.0))


def feature_names(n_features: int) -> list[str]:
    """The names of the columns of a claims table of ``n_features`` (at least the policy's own
    :data:`FEATURE_NAMES`; the others ``risk_1``, ``risk_2``, ...)."""
    return [*FEATURE_NAMES, *(f"risk_{j}" for j in range(1, n_features - len(FEATURE_NAMES) + 1))]


@dataclass(frozen=True)
class Claims:
    """Seeded claims data (see the module) of ``n_features`` columns: :meth:`frequency_blocks`
    and :meth:`severity_blocks` of the same policies."""

    seed: int = 0
    n_features: int = len(FEATURE_NAMES)

    def __post_init__(self) -> None:
        if self.n_features < len(FEATURE_NAMES):
            raise ConfigurationError(f"the claims recipe has at least {len(FEATURE_NAMES)} features (the policy's "
                                     f"own: {', '.join(FEATURE_NAMES)}), got {self.n_features}",
                                     parameters=("features",))

    def planted(self) -> dict[str, np.ndarray]:
        """The planted coefficients (one per feature; the extra rating factors' smaller) and
        intercepts of the claim rate per year (``frequency``) and of the mean claim size
        (``severity``)."""
        rng = np.random.default_rng([self.seed, 2**31 - 2])
        d, extra = len(FEATURE_NAMES), self.n_features - len(FEATURE_NAMES)
        return {"frequency": np.concatenate([rng.normal(scale=0.3, size=d), rng.normal(scale=0.05, size=extra),
                                             [np.log(FREQUENCY)]]),
                "severity": np.concatenate([rng.normal(scale=0.15, size=d), rng.normal(scale=0.03, size=extra),
                                            [np.log(MEAN_SIZE)]])}

    def policies(self, n_rows: int, first_block: int = 0
                 ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """``(X, exposure, counts, average sizes)`` blocks of ``n_rows`` policies (the average
        size 0 where there is no claim)."""
        planted = self.planted()
        for rng, rows in seeded_blocks(n_rows, GENERATOR_BLOCK_ROWS, self.seed, first_block):
            X = np.zeros((rows, self.n_features))
            X[:, : len(NUMERIC)] = rng.normal(size=(rows, len(NUMERIC)))
            region = rng.integers(0, len(REGIONS), size=rows)
            coded = np.flatnonzero(region > 0)
            X[coded, len(NUMERIC) + region[coded] - 1] = 1.0
            X[:, len(FEATURE_NAMES) :] = rng.normal(size=(rows, self.n_features - len(FEATURE_NAMES)))
            exposure = rng.uniform(0.05, 1.0, size=rows)
            rate = np.exp(X @ planted["frequency"][:-1] + planted["frequency"][-1])
            counts = rng.poisson(exposure * rate).astype(np.float64)
            mean_size = np.exp(X @ planted["severity"][:-1] + planted["severity"][-1])
            shape = SEVERITY_SHAPE * np.maximum(counts, 1.0)  # the average of n sizes
            sizes = np.where(counts > 0, rng.gamma(shape, mean_size / shape), 0.0)
            yield X, exposure, counts, sizes

    def frequency_blocks(self, n_rows: int, *, first_block: int = 0
                         ) -> Iterator[tuple[np.ndarray, np.ndarray, None, np.ndarray]]:
        """``(X, counts, None, log exposure)``: a Poisson GLM's rows with their offsets."""
        for X, exposure, counts, _ in self.policies(n_rows, first_block):
            yield X, counts, None, np.log(exposure)

    def severity_blocks(self, n_rows: int, *, first_block: int = 0
                        ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(X, average claim size, claim count)`` of the policies among ``n_rows`` with claims:
        a Gamma GLM's rows, weighted."""
        for X, _, counts, sizes in self.policies(n_rows, first_block):
            claimed = counts > 0
            yield X[claimed], sizes[claimed], counts[claimed]
