"""Sandblaster's Newton procedure (``solver="newton"``; docs/algorithms.md §14).

The coordinator runs Newton's method (:func:`dasklbfgs.optim.newton.newton_minimize`) and
asks the same :class:`~dasklbfgs.solvers.sandblaster.evaluator.MegaBatchEvaluator` as L-BFGS
for each evaluation, with the model wrapped so that every portion returns its Hessian sum
beside its loss and gradient sums (:class:`~dasklbfgs.models.second_order.WithHessian`):
the portions, their fixed-order sums (the same bits with any number of workers), the cached
shards, backups and recovery from lost workers are L-BFGS's, with no copy. The coordinator
adds the penalty, solves the ``d x d`` system and keeps the last Hessian (``result.hess``).

For narrow problems: the Hessian is ``d^2`` numbers per portion and a ``d^3`` solve, so the
model's width is limited (:data:`MAX_HESSIAN_BYTES`); the models with a Hessian are the
linear models and GLMs (``Model.has_hessian``; not one that estimates a scale or dispersion
beside its coefficients, nor the neural models).
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np

from dasklbfgs._format import human_bytes
from dasklbfgs.errors import CollinearityWarning, ConfigurationError, NonFiniteObjectiveError
from dasklbfgs.models.linear import Softmax
from dasklbfgs.models.second_order import WithHessian
from dasklbfgs.optim.newton import NewtonState, dependent_coordinates, newton_minimize
from dasklbfgs.optim.owlqn import constraints_of
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.held_out import held_out_scorer
from dasklbfgs.solvers.sandblaster.options import NewtonSolverOptions
from dasklbfgs.solvers.sandblaster.portions import planned_portions
from dasklbfgs.solvers.sandblaster.shard_cache import choose_cache
from dasklbfgs.solvers.stats import SandblasterStats

__all__ = ["MAX_HESSIANS_BYTES", "MAX_HESSIAN_BYTES", "NewtonRun", "plan_newton"]

logger = logging.getLogger(__name__)

#: The largest Hessian (``n_params^2`` float64) a Newton run forms: each portion returns one,
#: and the coordinator adds them and factors their total. 256 MiB: about 5,800 parameters.
MAX_HESSIAN_BYTES = 256 * 2**20
#: The Hessians of every portion of an evaluation, which the coordinator holds before adding them.
MAX_HESSIANS_BYTES = 2 * 2**30
#: Named in the warning about dependent columns, at most.
NAMED_COLUMNS = 10


def plan_newton(context: RunContext) -> NewtonRun:
    """A Newton run of ``context``'s checked inputs (the registered ``plan``)."""
    return NewtonRun(context)


class NewtonRun:
    """One Newton run: its own checks, then the evaluator, Newton's iterations and the result."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        model, options = context.model, context.options
        assert isinstance(options, NewtonSolverOptions)
        self.model, self.options, self.dataset = model, options, context.dataset
        if not getattr(model, "has_hessian", False):
            raise ConfigurationError(
                f"solver 'newton' needs the Hessian of the model's loss, and {model!r} has none (a neural model, "
                "Huber's loss, or a scale or dispersion estimated beside the coefficients); train it with solver "
                "'sandblaster' (L-BFGS), or fix the dispersion")
        n = model.n_params
        if n * n * 8 > MAX_HESSIAN_BYTES:
            raise ConfigurationError(
                f"solver 'newton' forms the {n} x {n} Hessian of {model!r} ({n} parameters), {n * n * 8} bytes "
                f"({human_bytes(n * n * 8)}) per portion, more than the {human_bytes(MAX_HESSIAN_BYTES)} it allows: "
                "too wide for Newton's method; train it with solver 'sandblaster' (L-BFGS, memory linear in the "
                "parameters)")
        portions = len(planned_portions(self.dataset, options.portion_rows, options.cache is not False))
        if portions * n * n * 8 > MAX_HESSIANS_BYTES:
            raise ConfigurationError(
                f"solver 'newton' receives a {n} x {n} Hessian from each of the {portions} portions of "
                f"{self.dataset.url!r} before adding them, {human_bytes(portions * n * n * 8)} in all, more than the "
                f"{human_bytes(MAX_HESSIANS_BYTES)} it allows: give larger portions (portion_rows), fewer shards, or "
                "train it with solver 'sandblaster' (L-BFGS)", parameters=("portion_rows",))
        self.portion_model = WithHessian(model)
        bounds = model.bounds()
        lower, upper = (None, None) if bounds is None else bounds
        self.constraints = constraints_of(model.l1_weights(), n, lower=lower, upper=upper)
        self.x_start = context.x_start()
        self.penalty_curvature = model.penalty_curvature()  # type: ignore[attr-defined]
        self.checked_rank = False

    def run(self) -> Result:
        client = self.context.client
        assert client is not None, "a planned run runs connected"
        context, opts = self.context, self.options
        context.start_cadences(0)
        given = context.cached  # dasklbfgs.cached(...): the shards are in the workers' memory already
        cache = choose_cache(client, opts.cache, self.dataset, given)
        self.evaluator = MegaBatchEvaluator(client, self.portion_model, self.dataset, portion_rows=opts.portion_rows,
                                            backup_tasks=opts.backup_tasks, backup_slack=opts.backup_slack,
                                            cache=cache, shards=given.shard_cache(client) if cache and given else None)
        scorer = None
        try:
            scorer = held_out_scorer(context, client, cache)
            try:
                result, final = newton_minimize(self._evaluate, self.x_start, opts, constraints=self.constraints,
                                                on_iteration=self._on_iteration)
            except NonFiniteObjectiveError as exc:
                raise NonFiniteObjectiveError(f"{exc} (dataset {self.dataset.url!r})") from None
            if context.eval_set is not None and result.history and "eval_objective" not in result.history[-1]:
                result.history[-1].update(context.score(result.x, by_workers=True))  # held-out at the end too
            if context.scoring:  # on the cached shards, before they are released
                cached = self.evaluator.cached.shards if self.evaluator.cached is not None else None
                result["scores"] = context.final_scores(result.x, cached)
        finally:
            context.held_out = None
            try:
                if scorer is not None:
                    scorer.close()
            finally:
                self.evaluator.close()
        return self._finish(result, final)

    def _evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """The mean objective, its gradient and its Hessian at ``x`` (penalty included)."""
        loss, sums = self.evaluator.evaluate(x)
        total = self.dataset.total_weight
        f, g = self.model.objective_from_sums(x, loss, sums, total)
        H = self.portion_model.split(sums)[1] / total
        H[np.diag_indices_from(H)] += self.penalty_curvature
        if not self.checked_rank:
            self.checked_rank = True
            self._warn_if_singular(H)
        return f, g, H

    def _warn_if_singular(self, H: np.ndarray) -> None:
        """Warn, naming them, of the columns the first Hessian cannot tell apart from others
        (an unpenalised model; softmax's own redundancy, a constant added to every class,
        is not the data's)."""
        if isinstance(self.model, Softmax) or not np.all(np.isfinite(H)):
            return
        dependent = dependent_coordinates(H)
        if dependent.size == 0:
            return
        names = [self._parameter_name(int(j)) for j in dependent[:NAMED_COLUMNS]]
        more = f" and {dependent.size - NAMED_COLUMNS} more" if dependent.size > NAMED_COLUMNS else ""
        warnings.warn(
            f"the Hessian of {self.model!r} on {self.dataset.url!r} is singular: {', '.join(names)}{more} "
            f"{'is a linear combination' if dependent.size == 1 else 'are linear combinations'} of the other columns "
            f"(or {'holds' if dependent.size == 1 else 'hold'} no value), "
            f"so the coefficients are not unique{'' if self.constraints else '; newton takes the least-squares step'}"
            ". Drop or merge those columns, or set l2 > 0", CollinearityWarning, stacklevel=2)

    def _parameter_name(self, j: int) -> str:
        """Parameter ``j`` by its column: ``column 3 ('age')``, or ``the intercept``."""
        model = self.model
        n_features, n_outputs = model.n_features, getattr(model, "n_outputs", 1)
        column, output = divmod(j, n_outputs)
        if column >= n_features:
            return "the intercept" if n_outputs == 1 else f"the intercept of output {output}"
        names = getattr(self.dataset, "feature_names", None)
        named = f" ({names[column]!r})" if names else ""
        return f"column {column}{named}" + ("" if n_outputs == 1 else f" (output {output})")

    def _on_iteration(self, state: NewtonState) -> str | None:
        """Held-out scores and the report after each iteration; the reason to stop, if any."""
        context, entry = self.context, state.history[-1]
        if context.evaluation_due(state.nit):
            entry.update(context.score(state.x, by_workers=True))  # the workers are idle between evaluations
        return context.report(entry, lambda: state.x.copy(), n_portions=len(self.evaluator.portions),
                              backups_won=self.evaluator.stats.backups_won,
                              rows_per_worker=self.evaluator.rows_per_worker())

    def _finish(self, optimized: Any, final: NewtonState) -> Result:
        result = Result(optimized)
        result.hess = final.H
        stats = SandblasterStats(total_seconds=time.perf_counter() - self.context.started,
                                 **self.evaluator.stats.as_dict(), cached=self.evaluator.cache,
                                 n_portions=len(self.evaluator.portions))
        result.stats, result.run_id, result.solver = stats, self.context.run_id, self.context.solver.name
        if not result.success:
            logger.info("Sandblaster's Newton procedure stopped early: %s", result.message)
        return result
