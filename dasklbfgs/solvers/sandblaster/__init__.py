"""Sandblaster L-BFGS: a coordinator over Dask futures computing mega-batch gradients
(docs/algorithms.md §1, §2)."""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports
from dasklbfgs.cluster import prepare_embedded_clusters
from dasklbfgs.solvers.registry import PlannedBy, Solver, register, solver_function
from dasklbfgs.solvers.sandblaster.options import SandblasterOptions
from dasklbfgs.solvers.stats import SandblasterStats

if TYPE_CHECKING:
    from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator

__all__ = ["MegaBatchEvaluator", "SandblasterOptions", "sandblaster_lbfgs"]

# The evaluator and the coordinator (Dask, scipy.optimize) load with a run, not with the
# package: workers import it for the portion service and the load tasks.
__getattr__, __dir__ = lazy_exports(__name__, {"MegaBatchEvaluator": "dasklbfgs.solvers.sandblaster.evaluator"})

SUMMARY = """Minimise ``model``'s objective over ``data`` with Sandblaster L-BFGS on Dask.

    Each evaluation cuts the dataset into portions that run as Dask tasks next to the
    workers' cached shards and are summed in portion order (bitwise the same iterates with
    any number of workers); a coordinator in this process runs L-BFGS with a strong Wolfe
    line search and scipy's stopping rules (OWL-QN when the model has an ``l1`` term).
    Returns a :class:`~dasklbfgs.solvers.result.Result` (``x, fun, jac, nit, nfev, njev,
    status, success, message, history, stats, run_id``)."""

SOLVER = register(Solver("sandblaster", SandblasterOptions,
                         PlannedBy("dasklbfgs.solvers.sandblaster.coordinator", "plan_sandblaster"), SUMMARY,
                         SandblasterStats,
                         deterministic=True, takes_l1=True, takes_bounds=True))
sandblaster_lbfgs = solver_function("sandblaster_lbfgs", "sandblaster", SandblasterOptions, SUMMARY)

# Workers of an embedded cluster start with the portion service (the evaluation's fast path),
# importing what a portion needs while they spawn rather than in the first run.
prepare_embedded_clusters(worker_plugin=("dasklbfgs.solvers.sandblaster.portion_service", "PortionService"))
