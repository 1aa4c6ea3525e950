"""What a Sandblaster run's optimizer works on, and the way back to the model's parameters.

The optimizer minimises :attr:`Coordinates.objective` over ``theta``. The objective is the
model, or the model on the parameters its rows can move alone (:mod:`.active`: the others
stay at zero); ``theta`` is the objective's parameters, standardised when the run asks for it
(:mod:`.standardize`: an exact change of variables). The l1 weights and the bounds follow
both maps, and a result maps back through both: theta to the objective's parameters, those to
the model's (the rest zeros, their gradient zero).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import OptimizeResult

from dasklbfgs.models.base import Model
from dasklbfgs.optim.constraints import Constraints
from dasklbfgs.optim.owlqn import constraints_of
from dasklbfgs.solvers.sandblaster.active import ActiveParameters
from dasklbfgs.solvers.sandblaster.standardize import Standardizer

__all__ = ["Coordinates"]


class Coordinates:
    """The problem a run's optimizer solves: the objective, its coordinates, its constraints."""

    def __init__(self, model: Model) -> None:
        self.objective: Model = model
        #: The parameters the objective is on (None: all of the model's)
        self.active: ActiveParameters | None = None
        #: The standardisation of the objective's parameters (None: theta is them)
        self.transform: Standardizer | None = None
        self.l1 = model.l1_weights()
        self.bounds = model.bounds()

    def standardize(self, transform: Standardizer) -> None:
        """Optimise in ``transform``'s coordinates (before :meth:`cut_to`, which cuts it too)."""
        assert self.active is None, "standardised before the cut, which cuts the transform"
        self.transform = transform

    def cut_to(self, active: ActiveParameters, objective: Model) -> None:
        """Optimise ``objective``, the model on the ``active`` parameters alone: the l1
        weights, the bounds and the standardisation cut to them."""
        self.active, self.objective = active, objective
        cut = active.restrict
        self.l1 = None if self.l1 is None else cut(self.l1)
        self.bounds = None if self.bounds is None else (cut(self.bounds[0]), cut(self.bounds[1]))
        if self.transform is not None:
            self.transform = self.transform.on_columns(active.columns)

    def constraints(self) -> Constraints | None:
        """The l1 weights and bounds in theta's coordinates; None without either (plain L-BFGS)."""
        l1, bounds, transform = self.l1, self.bounds, self.transform
        if transform is not None:
            l1 = None if l1 is None else transform.l1_weights_to_theta(l1)
            bounds = None if bounds is None else (transform.bounds_to_theta(bounds[0]),
                                                  transform.bounds_to_theta(bounds[1]))
        lower, upper = (None, None) if bounds is None else bounds
        return constraints_of(l1, self.objective.n_params, lower=lower, upper=upper)

    def to_theta(self, params: np.ndarray) -> np.ndarray:
        """Theta for the objective's parameters ``params``."""
        return params if self.transform is None else self.transform.to_theta(params)

    def objective_params(self, theta: np.ndarray) -> np.ndarray:
        """The objective's parameters for ``theta``."""
        return theta if self.transform is None else self.transform.to_params(theta)

    def params(self, theta: np.ndarray) -> np.ndarray:
        """The model's parameters for ``theta``."""
        params = self.objective_params(theta)
        return params if self.active is None else self.active.expand(params)

    def objective_from_sums(self, params: np.ndarray, loss: float, sums: np.ndarray,
                            total_weight: float) -> tuple[float, np.ndarray]:
        """The objective and its gradient in theta's coordinates, from the sums of an
        evaluation at the objective's parameters ``params``."""
        f, g = self.objective.objective_from_sums(params, loss, sums, total_weight)
        return (f, g) if self.transform is None else (f, self.transform.gradient_to_theta(g))

    def to_model(self, result: OptimizeResult) -> None:
        """``result.x`` and ``result.jac`` from theta's coordinates to the model's parameters,
        in place (the coefficients no row reads stayed at zero, their gradient zero)."""
        if self.transform is not None:
            result.x = self.transform.to_params(result.x)
            result.jac = self.transform.gradient_to_params(result.jac)
        if self.active is not None:
            result.x, result.jac = self.active.expand(result.x), self.active.expand(result.jac)
