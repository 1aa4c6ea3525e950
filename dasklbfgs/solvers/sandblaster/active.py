"""The parameters a wide sparse fit can move: the coordinator's vectors cut to them.

A linear model's gradient on a coefficient of a feature no row has a value for is only its
penalty's: ``l2 * w`` (and an l1 subgradient that contains 0 at 0). Starting at ``w = 0``
inside its bounds, such a coefficient has a zero gradient at every iterate, every curvature
pair is zero there, so every L-BFGS (or OWL-QN, or projected) direction is zero there: it
never moves. On hashed data most columns are such: the ``ctr`` recipe's 200,000 rows read
12% of its 2^22 columns. Sandblaster then runs its L-BFGS on the others only
(:class:`ActiveParameters`): the same iterates in exact arithmetic, with every vector of
the coordinator (iterate, gradient, the stored pairs, the sums being added) as long as the
parameters the data can move rather than as the model (docs/algorithms.md §13).

A coefficient is kept when some row reads its feature, when the start (or a resumed state:
its iterate, gradient or pairs) is not zero there, or when its bounds exclude zero (the first
projection moves it): every other one stays at zero, where the result reports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.sums import SparseSum, distinct, index_dtype
from dasklbfgs.optim import LBFGSState, LocalBasis

__all__ = ["ActiveParameters", "MOST_ACTIVE", "active_parameters"]

#: Cut the vectors only when at most this fraction of the parameters can move: above it the
#: copies between the two layouts (a fallback task's parameters, a checkpoint) cost more than
#: the shorter vectors save.
MOST_ACTIVE = 0.5


@dataclass(frozen=True)
class ActiveParameters:
    """The model's parameters at the sorted ``positions`` (out of ``size``): the coordinates
    the optimizer works on, every other one zero; they are the coefficients of the features
    ``columns`` and the parameters after the coefficients."""

    positions: np.ndarray
    size: int
    columns: np.ndarray

    @property
    def n_active(self) -> int:
        return len(self.positions)

    def restrict(self, v: np.ndarray) -> np.ndarray:
        """``v`` (or each row of a 2-D ``v``) at the active positions."""
        return np.ascontiguousarray(v[..., self.positions])

    def expand(self, v: np.ndarray) -> np.ndarray:
        """The whole vector (rows, for a 2-D ``v``) of active values ``v``: zero elsewhere."""
        out = np.zeros((*v.shape[:-1], self.size), dtype=v.dtype)
        out[..., self.positions] = v
        return out

    def index_of(self, positions: np.ndarray) -> np.ndarray:
        """Where the (active) whole-vector ``positions`` are among the active ones."""
        index: np.ndarray = np.searchsorted(self.positions, positions).astype(index_dtype(self.n_active), copy=False)
        assert np.array_equal(self.positions[np.minimum(index, self.n_active - 1)], positions), \
            "positions outside the active parameters (rows reading columns the cut did not keep)"
        return index

    def restrict_sums(self, sums: np.ndarray | SparseSum) -> np.ndarray | SparseSum:
        """A portion's sums over the whole parameters, at the active ones (a compact sum's
        coordinates are all active: its rows read them)."""
        if isinstance(sums, SparseSum):
            return SparseSum(self.n_active, self.index_of(sums.index), sums.values)
        return self.restrict(sums)

    def restrict_state(self, state: LBFGSState) -> LBFGSState:
        """A local L-BFGS state over the whole parameters (a checkpoint's), on the active ones."""
        return self._moved(state, self.restrict, self._restrict_into, self.n_active)

    def expand_state(self, state: LBFGSState) -> LBFGSState:
        """A local L-BFGS state on the active parameters, over the whole ones (as checkpoints
        hold it, whichever parameters a run moved)."""
        return self._moved(state, self.expand, self._expand_into, self.size)

    def _restrict_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        out[...] = rows[..., self.positions]

    def _expand_into(self, rows: np.ndarray, out: np.ndarray) -> None:
        out[..., self.positions] = rows  # (out is zeros: a new basis's)

    @staticmethod
    def _moved(state: LBFGSState, move, move_into, n: int) -> LBFGSState:
        """``state`` with its vectors moved by ``move``, its pairs by ``move_into`` straight
        into the new basis's rows (no second copy of them, as long as the whole vector)."""
        basis = state.basis
        assert isinstance(basis, LocalBasis) and state.x is not None and state.g is not None, "a local state"
        moved = LocalBasis(n, basis.S.shape[0])
        move_into(basis.S, moved.S)
        move_into(basis.Y, moved.Y)
        moved.g = move(basis.g)
        moved._G, moved.k, moved.slots = basis._G.copy(), basis.k, list(basis.slots)
        return dataclasses.replace(state, x=move(state.x), g=move(state.g), basis=moved)


def active_parameters(model: LinearModel, read: list[np.ndarray], nonzero: np.ndarray,
                      bounds: tuple[np.ndarray, np.ndarray] | None) -> tuple[ActiveParameters, LinearModel] | None:
    """The parameters a fit of ``model`` can move on rows whose shards read the parameters
    ``read`` (each shard's compact positions), from a start (or a resumed state) non-zero where
    ``nonzero``; and the model on those columns. None when more than :data:`MOST_ACTIVE` of
    them can."""
    n_coef, K = model.n_coef, model.n_outputs
    moved = [nonzero[:n_coef]]
    if bounds is not None:
        lower, upper = bounds
        moved.append((lower[:n_coef] > 0) | (upper[:n_coef] < 0))
    extra = [np.flatnonzero(np.any(np.reshape(m, (-1, K)), axis=1)) for m in moved]
    # each shard's columns come sorted: a stable sort merges the runs (np.unique would hash them)
    columns = distinct(np.sort(np.concatenate([p[p < n_coef] // K for p in read] + extra), kind="stable"))
    positions = model.positions_of(columns)
    if len(positions) > MOST_ACTIVE * model.n_params:
        return None
    return ActiveParameters(positions, model.n_params, columns), model.on_columns(columns)
