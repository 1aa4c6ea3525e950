"""The coordinator of Sandblaster L-BFGS (docs/algorithms.md §1, §2).

The coordinator is a :class:`SandblasterRun` in the client process: it runs the pure
L-BFGS of :mod:`dasklbfgs.optim` (OWL-QN, §8, for a model with an l1 term) and asks a
:class:`MegaBatchEvaluator` for each loss and
gradient; the evaluator's portions run as Dask futures on the workers next to their
cached shards. Options: :class:`~dasklbfgs.solvers.sandblaster.options.SandblasterOptions`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

import numpy as np
from distributed import Client
from scipy.optimize import OptimizeResult

from dasklbfgs.checkpoint_store import checkpoint_exists
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, NonFiniteObjectiveError
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.persist import model_config, recorded_config
from dasklbfgs.optim import LBFGSState, LocalBasis, lbfgs_minimize, owlqn_minimize
from dasklbfgs.optim.constraints import Constraints
from dasklbfgs.optim.lbfgs import inverse_hessian_scale
from dasklbfgs.parallel import partition
from dasklbfgs.parallel.replica import PartitionedReplicas
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers.sandblaster.active import active_parameters
from dasklbfgs.solvers.sandblaster.coordinates import Coordinates
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.held_out import held_out_scorer
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import (
    load_sharded_state,
    load_state,
    save_sharded_state,
    save_state,
)
from dasklbfgs.solvers.sandblaster.options import SandblasterOptions
from dasklbfgs.solvers.sandblaster.shard_cache import choose_cache
from dasklbfgs.solvers.sandblaster.shard_passes import column_moments_by_shard, online_start, read_positions_by_shard
from dasklbfgs.solvers.sandblaster.sharded_space import ShardedSpace
from dasklbfgs.solvers.sandblaster.standardize import Standardizer, combine_moments
from dasklbfgs.solvers.stats import SandblasterStats

__all__ = ["SandblasterRun", "plan_sandblaster"]

logger = logging.getLogger(__name__)


def plan_sandblaster(context: RunContext) -> SandblasterRun:
    """A Sandblaster run of ``context``'s checked inputs (the registered ``plan``)."""
    return SandblasterRun(context)


class SandblasterRun:
    """One Sandblaster run: its own checks, then the evaluator, optional standardisation and
    sharded vector space, the L-BFGS loop, and the result."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        model, options = context.model, context.options
        assert isinstance(options, SandblasterOptions)
        self.model, self.options, self.dataset, self.eval_set = model, options, context.dataset, context.eval_set
        if options.state == "sharded" and options.param_shards > model.n_params:
            raise ConfigurationError(
                f"n_param_shards ({options.param_shards}) is larger than the model's {model.n_params} parameters"
            )
        if options.standardize and not isinstance(model, LinearModel):
            raise ConfigurationError(
                f"standardize=True rescales the features of linear models; {model!r} is not one "
                "(scale its inputs when writing the dataset instead)"
            )
        # model parallelism: each portion computed by a replica split over model_partitions workers
        self.partitioned = partition(model, options.model_partitions) if options.model_partitions > 1 else None
        self.replicas: PartitionedReplicas | None = None
        # what the optimizer minimises, and how: the model, or the model on the features the rows
        # read (_cut_to_active), standardised or not
        self.coords = Coordinates(model)
        self.constraints: Constraints | None = None  # L1 and bounds in the optimizer's coordinates (_minimize)
        # sharded state, a model that starts at zeros (a linear model's) and no x0: the vector shards
        # make its zeros, so no d-length vector is formed here (the neural models start from random
        # weights; Gamma's inverse link and Huber's scale start elsewhere)
        shards_start_at_zero = context.x0 is None and options.state == "sharded" and model.starts_at_zero
        self.x_start = None if shards_start_at_zero else context.x_start()
        self.checkpoint = options.checkpoint_location(self.dataset)
        # what a checkpoint records of the model (refused before the run when it cannot record it)
        self.config = model_config(model) if self.checkpoint is None else recorded_config(model)
        self.settings: dict[str, Any] = {"standardize": options.standardize, "history_size": options.history,
                                         "n_samples": self.dataset.n_samples}
        if options.state == "sharded":
            self.settings["n_param_shards"] = options.param_shards
        self.saved = self._load_checkpoint()
        self.saved_nit = None if self.saved is None else self.saved.nit  # the iteration last checkpointed
        self.space: ShardedSpace | None = None
        self.online: dict[str, Any] | None = None  # what the online passes did (online_passes > 0)
        self.scale: float | None = None  # the final inverse Hessian scale (LBFGSOptions.initial_scale)

    # -- checkpoints ----------------------------------------------------------------------

    def _load_checkpoint(self) -> LBFGSState | None:
        path = self.checkpoint
        if not (self.options.resume and path is not None and checkpoint_exists(path)):  # (resume needs a path)
            return None
        if self.options.state == "sharded":
            return load_sharded_state(path, model_config=self.config, settings=self.settings)[0]
        return load_state(path, model_config=self.config, settings=self.settings)

    def _save(self, path: Location, state: LBFGSState) -> None:
        self.saved_nit = state.nit
        config, settings = self.config, self.settings
        if self.space is not None:
            save_sharded_state(path, state, self.space, model_config=config, settings=settings)
        else:  # over the whole parameters, whichever ones this run moves
            active = self.coords.active
            save_state(path, state if active is None else active.expand_state(state),
                       model_config=config, settings=settings)

    # -- the run --------------------------------------------------------------------------

    def run(self) -> Result:
        client = self.context.client
        assert client is not None, "a planned run runs connected"
        started = self.context.started
        opts = self.options
        self.context.start_cadences(0 if self.saved is None else self.saved.nit)
        if self.partitioned is not None:
            self.replicas = PartitionedReplicas(client, self.partitioned, started)
        cache = choose_cache(client, self.options.cache, self.dataset, self.context.cached)
        given = self.context.cached  # dasklbfgs.cached(...): the shards are in the workers' memory already
        self.evaluator = MegaBatchEvaluator(client, self.model, self.dataset, portion_rows=opts.portion_rows,
                                            backup_tasks=opts.backup_tasks, backup_slack=opts.backup_slack,
                                            cache=cache,
                                            portion_model=self.replicas.portion_model if self.replicas else None,
                                            shards=given.shard_cache(client) if cache and given else None)
        if self.replicas is not None:
            self.evaluator.on_restart = self._recover_replicas
        scorer = None
        try:
            scorer = held_out_scorer(self.context, client, cache)
            result = self._minimize(client)
            if self.context.scoring:  # on the cached shards, before they are released
                # a partitioned run's portions use partitioned replicas: the whole model scores from the store
                whole = self.evaluator.cached is not None and self.replicas is None
                cached = self.evaluator.cached.shards if whole else None  # type: ignore[union-attr]
                result["scores"] = self.context.final_scores(result.x, cached)
            bytes_received = self.space.bytes_received if self.space is not None else None
            partitions = self.replicas.stats() if self.replicas is not None else None
        finally:
            self.context.held_out = None
            try:
                if scorer is not None:
                    scorer.close()
                if self.space is not None:
                    self.space.close()
            finally:
                self.evaluator.close()
            if self.replicas is not None:
                self.replicas.close()
        result = self._finish(result, started, bytes_received)
        if partitions is not None:
            result.partitions = partitions
        return result

    def _recover_replicas(self) -> None:
        """Before an evaluation starts over: re-create the partitioned replicas (one of them may
        have lost a partition; they hold no state between evaluations, so this is cheap), and
        hand the portions the new ones."""
        assert self.replicas is not None, "set as the evaluator's on_restart only with partitioned replicas"
        self.replicas.recover()
        self.evaluator.portion_model = self.replicas.portion_model

    def _minimize(self, client: Client) -> OptimizeResult:
        opts = self.options
        if opts.online_passes and self.saved is None:  # (a resumed run continues its own iterates)
            self.x_start, self.online = online_start(self.evaluator, self.x_start, opts, self.dataset.url)
        if opts.standardize:
            assert isinstance(self.model, LinearModel), "standardize=True is refused for other models (__init__)"
            moments = combine_moments(column_moments_by_shard(self.evaluator))
            self.coords.standardize(Standardizer.from_moments(
                *moments, n_outputs=self.model.n_outputs, fit_intercept=self.model.fit_intercept, l2=self.model.l2,
            ))
        self._cut_to_active()
        theta0 = None if self.x_start is None else self.coords.to_theta(self.x_start)
        self.constraints = self.coords.constraints()
        if opts.state == "sharded":
            self.space = ShardedSpace(client, self.evaluator, self.model, self.dataset.total_weight, theta0,
                                      opts.history, opts.param_shards, self.coords.transform, self.constraints)
            theta0 = self.x_start = None  # the shards hold it now: no d-length vector stays here
            if self.saved is not None:
                assert self.checkpoint is not None  # a saved state came from it
                self.space.restore(self.checkpoint, self.saved.basis)
        try:
            result, final = self._optimize(theta0)
        except NonFiniteObjectiveError as exc:
            raise NonFiniteObjectiveError(f"{exc} (dataset {self.dataset.url!r})") from None
        self.scale = inverse_hessian_scale(final.basis)  # what a warm-started run next to this one starts with
        if self.checkpoint is not None and self.saved_nit != final.nit:
            self._save(self.checkpoint, final)  # the last iterations since a checkpoint: the state it ended in
        if self.eval_set is not None and result.history and "eval_objective" not in result.history[-1]:
            # held-out scores at the end too, whatever eval_every (None: only here)
            result.history[-1].update(self.context.score(self.coords.params(result.x), by_workers=True))
        self.coords.to_model(result)
        return result

    def _cut_to_active(self) -> None:
        """On sparse rows that read few of a linear model's features, run the optimizer on the
        parameters the fit can move alone (:mod:`.active`): the evaluator, the start, the l1
        weights, the bounds, the standardisation and a resumed state cut to them. Local state
        only (the sharded state's vectors live on the workers already)."""
        evaluator, model = self.evaluator, self.model
        if not (isinstance(model, LinearModel) and self.options.state == "local" and self.partitioned is None
                and self.dataset.is_sparse and self.x_start is not None):
            return
        read = read_positions_by_shard(evaluator)  # the same whether cached or streamed: the same cut
        if any(p is None for p in read):
            return
        nonzero = self.x_start != 0
        if self.saved is not None:  # (its x0 may have been another): what the resumed state holds
            basis = self.saved.basis
            assert isinstance(basis, LocalBasis), "a local state"
            for held in (self.saved.x, self.saved.g, *basis.S[: basis.k], *basis.Y[: basis.k]):
                nonzero |= held != 0
        found = active_parameters(model, cast(list[np.ndarray], read), nonzero, self.coords.bounds)
        if found is None:
            return
        active, objective = found
        self.coords.cut_to(active, objective)
        evaluator.restrict_to(active)
        self.x_start = active.restrict(self.x_start)
        if self.saved is not None:
            self.saved = active.restrict_state(self.saved)
        logger.info("optimizing the %d parameters the rows can move, of %d", active.n_active, active.size)

    def _optimize(self, theta0: np.ndarray | None) -> tuple[OptimizeResult, LBFGSState]:
        """L-BFGS, or OWL-QN and the projected method with the model's l1 weights and bounds (in
        ``theta``'s coordinates)."""
        # theta0 is None only with the sharded state, whose space holds the start (x0 is then unused)
        x0 = cast(np.ndarray, theta0)
        constraints = self.constraints
        if constraints is None:
            return lbfgs_minimize(self._evaluate, x0, self.options, state=self.saved,
                                  on_iteration=self._on_iteration, space=self.space)
        return owlqn_minimize(self._evaluate, x0, constraints.weights, self.options, state=self.saved,
                              on_iteration=self._on_iteration, space=self.space, lower=constraints.lower,
                              upper=constraints.upper)

    def _evaluate(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """Objective and gradient in the optimizer's coordinates (:class:`.Coordinates`)."""
        params = self.coords.objective_params(theta)
        loss, sums = self.evaluator.evaluate(params)
        return self.coords.objective_from_sums(params, loss, sums, self.dataset.total_weight)

    def _current_params(self, state: LBFGSState) -> np.ndarray:
        """The parameters of ``state`` in the model's coordinates (gathered from the vector
        shards in sharded mode)."""
        if self.space is not None:
            return self.coords.params(self.space.x())
        assert state.x is not None, "a local state holds its vectors"
        return self.coords.params(state.x)

    def _on_iteration(self, state: LBFGSState) -> str | None:
        """Held-out scores, the checkpoint and the report after each iteration; the reason to
        stop, if the callback or a stop rule gave one."""
        context, entry = self.context, state.history[-1]
        if context.evaluation_due(state.nit):
            entry.update(context.score(self._current_params(state), by_workers=True))  # idle between evaluations
        if (path := self.checkpoint) is not None:
            context.checkpoint_if_due(state.nit, lambda _: self._save(path, state))
        partitions = {} if self.replicas is None else {"partition_bytes": self.replicas.bytes_per_partition()}
        return context.report(entry, lambda: self._current_params(state).copy(),
                              n_portions=len(self.evaluator.portions), backups_won=self.evaluator.stats.backups_won,
                              rows_per_worker=self.evaluator.rows_per_worker(), **partitions)

    def _finish(self, optimized: OptimizeResult, started: float, bytes_received: int | None) -> Result:
        result = Result(optimized)
        stats = SandblasterStats(total_seconds=time.perf_counter() - started, **self.evaluator.stats.as_dict(),
                                 cached=self.evaluator.cache, n_portions=len(self.evaluator.portions))
        if bytes_received is not None:
            stats["coordinator_bytes_received"] = bytes_received
        if self.online is not None:
            stats["online"] = self.online
        if self.scale is not None:
            stats["inverse_hessian_scale"] = self.scale
        if self.coords.active is not None:
            stats["active_parameters"] = self.coords.active.n_active
        result.stats, result.run_id, result.solver = stats, self.context.run_id, self.context.solver.name
        if not result.success:
            logger.info("Sandblaster L-BFGS stopped early: %s", result.message)
        return result
