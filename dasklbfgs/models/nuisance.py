"""A nuisance parameter estimated with the coefficients: Huber's scale, the negative
binomial's dispersion.

A linear model whose loss has one more positive parameter (``nuisance``: the name of its
constructor argument and attribute) either fixes it (a number) or, given None, estimates it
with the coefficients: it is then one parameter after the intercepts
(:attr:`~dasklbfgs.models.linear.LinearModel.n_extra`), started at 1 and kept
``>= nuisance_floor`` by the model's :meth:`bounds` (so Sandblaster's projected method trains
it; the replica solvers refuse it), its gradient a row sum like the others
(:meth:`link_sums`). A subclass gives the link at a fixed value (:meth:`link_at`) and the
link with its derivative in the parameter (:meth:`link_and_derivative`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.linear import LinearModel

__all__ = ["EstimatedNuisance"]


class EstimatedNuisance(LinearModel):
    """The layout, start, bounds and row sums of a fixed or estimated nuisance parameter (see
    the module)."""

    #: the constructor argument and attribute holding the fixed value (None: estimated)
    nuisance: ClassVar[str]
    #: the least estimated value
    nuisance_floor: ClassVar[float]

    def fixed_nuisance(self) -> float | None:
        value: float | None = getattr(self, self.nuisance)
        return value

    @property
    def n_extra(self) -> int:
        """1 (the estimated parameter) when it is estimated, else 0."""
        return 1 if self.fixed_nuisance() is None else 0

    @property
    def starts_at_zero(self) -> bool:
        return self.fixed_nuisance() is not None

    def nuisance_of(self, params: np.ndarray) -> float:
        """The parameter's value at ``params``: the last parameter, or the fixed value."""
        fixed = self.fixed_nuisance()
        return float(params[-1]) if fixed is None else fixed

    def init_params(self, seed: int | None = None) -> np.ndarray:
        """The linear models' start, with the estimated parameter at 1."""
        params = super().init_params(seed)
        if self.fixed_nuisance() is None:
            params[-1] = 1.0
        return params

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The coefficients' bounds, and an estimated parameter's ``>= nuisance_floor``."""
        bounds = super().bounds()
        if self.fixed_nuisance() is not None:
            return bounds
        lower, upper = bounds or (np.full(self.n_params, -np.inf), np.full(self.n_params, np.inf))
        lower[-1] = self.nuisance_floor
        return lower, upper

    def link(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
        """The link at the fixed value. An estimated one is a parameter the link alone does not
        have: the row sums go through :meth:`link_sums`."""
        fixed = self.fixed_nuisance()
        if fixed is None:
            raise ConfigurationError(
                f"{self!r} estimates its {self.nuisance} with the coefficients, and this computation gives the loss "
                f"only the decision values (Sandblaster's online passes on sparse rows do): fix the {self.nuisance} "
                "or train without online_passes")
        return self.link_at(z, y, w, fixed)

    def link_sums(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, extra: np.ndarray,
                  extra_grad: np.ndarray) -> tuple[float, np.ndarray]:
        """With an estimated parameter, the loss at ``extra[0]``; its derivative in it added to
        ``extra_grad[0]``."""
        if self.fixed_nuisance() is not None:
            return self.link(z, y, w)
        loss, dz, derivative = self.link_and_derivative(z, y, w, float(extra[0]))
        extra_grad[0] += derivative
        return loss, dz

    def link_at(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                ) -> tuple[float, np.ndarray]:
        """The loss sum and ``dloss/dz`` of a block at the parameter ``value``."""
        raise NotImplementedError

    def link_and_derivative(self, z: np.ndarray, y: np.ndarray, w: np.ndarray | None, value: float
                            ) -> tuple[float, np.ndarray, float]:
        """:meth:`link_at` with the loss's derivative in the parameter (summed, weighted)."""
        raise NotImplementedError
