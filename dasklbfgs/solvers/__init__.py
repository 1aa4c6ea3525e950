"""The solvers: one interface, one registry, one options class per solver.

``minimize(model, data, solver, options)`` runs any registered solver; each solver's
options class (``SandblasterOptions``, ``DownpourOptions``, ...) declares its options
once, and the CLI, YAML pipelines, estimators and docs derive from it.

Light to import (the registry, the options and statistics classes): the coordinators and
:class:`Result` (scipy.optimize) load with the first run (:mod:`dasklbfgs._lazy`).
"""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports

# Imported in registration order (the order front ends list the solvers in).
from dasklbfgs.solvers.sandblaster import (  # isort: skip
    NewtonSolverOptions, SandblasterOptions, sandblaster_lbfgs, sandblaster_newton,
)
from dasklbfgs.solvers.downpour import DownpourOptions, downpour_sgd  # isort: skip
from dasklbfgs.solvers.peers import (  # isort: skip
    EASGDOptions, GossipOptions, NeighbourOptions, SyncOptions, easgd, gossip_sgd, neighbour_sgd, sync_sgd,
)
from dasklbfgs.solvers.registry import Solver, get_solver, minimize, options_table, register, solver_names

# The cluster the solvers run on: ``dasklbfgs.connect`` is found here, so that the solvers
# above have registered what an embedded cluster starts with before it starts.
from dasklbfgs.cluster import connect  # isort: skip

if TYPE_CHECKING:
    from dasklbfgs.solvers.result import Result

__all__ = [
    "DownpourOptions", "EASGDOptions", "Result", "GossipOptions", "NeighbourOptions", "NewtonSolverOptions",
    "SandblasterOptions", "Solver", "SyncOptions", "connect", "downpour_sgd", "easgd", "get_solver", "gossip_sgd",
    "minimize", "neighbour_sgd", "options_table", "register", "sandblaster_lbfgs", "sandblaster_newton",
    "solver_names", "sync_sgd",
]

__getattr__, __dir__ = lazy_exports(__name__, {"Result": "dasklbfgs.solvers.result"})
