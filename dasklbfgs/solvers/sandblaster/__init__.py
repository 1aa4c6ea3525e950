"""Sandblaster L-BFGS: a coordinator over Dask futures computing mega-batch gradients
(docs/algorithms.md §1, §2)."""

from typing import TYPE_CHECKING

from dasklbfgs._lazy import lazy_exports
from dasklbfgs.cluster import prepare_embedded_clusters
from dasklbfgs.solvers.registry import PlannedBy, Solver, register, solver_function
from dasklbfgs.solvers.sandblaster.options import NewtonSolverOptions, SandblasterOptions
from dasklbfgs.solvers.stats import SandblasterStats

if TYPE_CHECKING:
    from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator

__all__ = ["MegaBatchEvaluator", "NewtonSolverOptions", "SandblasterOptions", "sandblaster_lbfgs", "sandblaster_newton"]

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

NEWTON_SUMMARY = """Minimise ``model``'s objective over ``data`` with Newton's method on Sandblaster's evaluations.

    For narrow linear models and GLMs (up to a few thousand parameters): every portion returns
    its Hessian sum beside its loss and gradient sums, added in portion order as L-BFGS's are
    (the same bits with any number of workers), and the coordinator takes the Newton step,
    damped where needed, with a backtracking line search; an ``l1`` term and bounds by a
    proximal Newton step (coordinate descent on the quadratic model, as glmnet). A handful of
    passes over the data reach the last digits (statsmodels' IRLS optimum for the GLMs).
    Returns a :class:`~dasklbfgs.solvers.result.Result` as ``sandblaster_lbfgs``'s, with
    ``hess``, the objective's Hessian at ``x``."""

NEWTON = register(Solver("newton", NewtonSolverOptions,
                         PlannedBy("dasklbfgs.solvers.sandblaster.newton", "plan_newton"), NEWTON_SUMMARY,
                         SandblasterStats, deterministic=True, takes_l1=True, takes_bounds=True))
sandblaster_newton = solver_function("sandblaster_newton", "newton", NewtonSolverOptions, NEWTON_SUMMARY)

# Workers of an embedded cluster start with the portion service (the evaluation's fast path),
# importing what a portion needs while they spawn rather than in the first run.
prepare_embedded_clusters(worker_plugin=("dasklbfgs.solvers.sandblaster.portion_service", "PortionService"))
