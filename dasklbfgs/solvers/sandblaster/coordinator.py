"""``sandblaster_lbfgs``: the coordinator loop of Sandblaster L-BFGS (ALGORITHMS.md §1).

The coordinator is this function in the client process: it runs the pure L-BFGS of
:mod:`dasklbfgs.optim` and asks a :class:`MegaBatchEvaluator` for each loss and gradient;
the evaluator's portions run as Dask futures on the workers next to their cached shards.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import Client
from scipy.optimize import OptimizeResult

from dasklbfgs._checks import check_int
from dasklbfgs.cluster import resolve_client
from dasklbfgs.data import ShardedDataset
from dasklbfgs.data.sharded import as_dataset
from dasklbfgs.errors import ConfigurationError, NonFiniteObjectiveError
from dasklbfgs.monitor.events import MetricsStream
from dasklbfgs.models.linear import LinearModel
from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.models.persist import model_config
from dasklbfgs.optim import LBFGSOptions, LBFGSState, lbfgs_minimize
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import load_sharded_state, load_state, save_sharded_state, save_state
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.portions import shards_fit
from dasklbfgs.solvers.sandblaster.sharded_space import ShardedSpace
from dasklbfgs.solvers.sandblaster.standardize import Standardizer, combine_moments

__all__ = ["sandblaster_lbfgs"]

logger = logging.getLogger(__name__)


def sandblaster_lbfgs(
    model: Any,
    data: ShardedDataset | str | os.PathLike[str],
    *,
    client: Client | None = None,
    x0: np.ndarray | None = None,
    maxiter: int = 100,
    gtol: float = 1e-5,
    ftol: float = 2.220446049250313e-09,
    maxfun: int = 15000,
    history: int = 10,
    portion_rows: int | None = None,
    backup_tasks: bool = True,
    standardize: bool = False,
    callback: Callable[[OptimizeResult], Any] | None = None,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    resume: bool = False,
    eval_data: Any = None,
    eval_every: int = 1,
    state: str = "local",
    n_param_shards: int = 2,
    cache: bool | str = "auto",
) -> OptimizeResult:
    """Minimise ``model``'s objective over ``data`` with Sandblaster L-BFGS on Dask.

    Parameters
    ----------
    model
        A model from :mod:`dasklbfgs.models` (``LeastSquares``, ``Logistic``, ``Softmax``).
    data
        A :class:`ShardedDataset` or a path to one. Workers read it by path, so on a real
        cluster it must be on storage every worker can reach.
    client
        Dask client; default: the active client, else an embedded ``LocalCluster`` that
        is closed on return.
    x0
        Starting parameters (default zeros), length ``model.n_params``.
    maxiter, gtol, ftol, maxfun, history
        L-BFGS limits and memory, with scipy's ``L-BFGS-B`` meanings and defaults
        (``maxiter`` excepted). With ``standardize=True``, ``gtol`` applies to the
        gradient in standardised coordinates.
    portion_rows
        Rows per portion (default: about four portions per worker thread, at most one
        shard each).
    backup_tasks
        Copy straggling portions to other workers and take the first result.
    standardize
        Optimise in standardised feature coordinates (one pass of column statistics);
        the objective and its minimiser are unchanged.
    callback
        Called after each iteration with ``intermediate_result`` (``x``, ``fun``, ``nit``);
        raising ``StopIteration`` stops the run cleanly (status 99).
    checkpoint_path, checkpoint_every
        Save the whole L-BFGS state (iterate, gradient, curvature pairs, counters, history)
        to this Zarr path every ``checkpoint_every`` iterations, atomically. With
        ``state="sharded"`` each vector shard writes its own slices into the checkpoint
        from its worker (the workers must see the path) and the coordinator only the
        Gram matrix and scalars; resume with the same ``n_param_shards``.
    eval_data, eval_every
        A held-out dataset scored every ``eval_every`` iterations (objective and accuracy,
        RMSE or reconstruction error); the scores join the history entries and the
        metrics events, so the dashboard's Training page plots them.
    state, n_param_shards
        ``"local"`` keeps the L-BFGS vectors (x, gradient, direction, the ``history`` pairs)
        in this process. ``"sharded"`` keeps them in slices on ``n_param_shards``
        actors that do the vector arithmetic; this process holds only the Gram matrix and
        scalars, and parameters and gradients go from shards to workers and back without
        passing through it (:mod:`dasklbfgs.solvers.sandblaster.sharded_space`). Same iterates up to
        rounding, with or without ``standardize`` (the workers map the shards' standardized
        coordinates to the model's parameters; the coordinator keeps only the per-feature
        scales).
    cache
        ``True``: load every shard into worker memory once and keep it there (data
        affinity). ``False``: out of core, every evaluation streams the rows from Zarr,
        one task per shard, on whichever worker is free. ``"auto"`` (default): cache when
        the data fit in half of the workers' summed memory limits, else stream.
    resume
        Continue from the checkpoint at ``checkpoint_path`` if there is one: a restarted
        coordinator reaches the same final result as an uninterrupted run. A checkpoint of
        another model or other settings is refused.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x, fun, jac, nit, nfev, njev, status, success, message`` (``success=False`` with
        a message when a limit was hit), ``history`` (per iteration: ``nit, fun, gnorm,
        step, nfev, time`` and ``eval_*`` when scored), ``timing`` and ``evaluator`` statistics.

    Raises
    ------
    ModelDataMismatchError
        The model does not fit the data (features, labels) or ``x0`` has the wrong length
        or is not finite.
    NonFiniteObjectiveError
        The objective is not finite at ``x0``.
    ConfigurationError
        A bad option value.
    """
    started = time.perf_counter()
    options = LBFGSOptions(history=history, gtol=gtol, ftol=ftol, maxiter=maxiter, maxfun=maxfun)
    if not isinstance(backup_tasks, bool):
        raise ConfigurationError(f"backup_tasks must be True or False, got {backup_tasks!r}")
    if not isinstance(standardize, bool):
        raise ConfigurationError(f"standardize must be True or False, got {standardize!r}")
    if callback is not None and not callable(callback):
        raise ConfigurationError(f"callback must be callable, got {callback!r}")
    if not (isinstance(cache, bool) or cache == "auto"):
        raise ConfigurationError(f"cache must be True, False or 'auto', got {cache!r}")
    if state not in ("local", "sharded"):
        raise ConfigurationError(f"state must be 'local' or 'sharded', got {state!r}")
    n_param_shards = check_int(n_param_shards, "n_param_shards")
    if state == "sharded" and n_param_shards > model.n_params:
        raise ConfigurationError(
            f"n_param_shards ({n_param_shards}) is larger than the model's {model.n_params} parameters"
        )
    if standardize and not isinstance(model, LinearModel):
        raise ConfigurationError(
            f"standardize=True rescales the features of linear models; {model!r} is not one "
            "(scale its inputs when writing the dataset instead)"
        )
    dataset = as_dataset(data)
    model.check_data(dataset)
    eval_every = check_int(eval_every, "eval_every")
    eval_set = as_dataset(eval_data) if eval_data is not None else None
    if eval_set is not None:
        model.check_data(eval_set)
    x_start = model.init_params(None) if x0 is None else model.check_params(x0, "x0")
    n = dataset.n_samples
    checkpoint_every = check_int(checkpoint_every, "checkpoint_every")
    if resume and checkpoint_path is None:
        raise ConfigurationError("resume=True needs checkpoint_path")
    config = model_config(model)
    settings = {"standardize": standardize, "history_size": history, "n_samples": n}
    if state == "sharded":
        settings["n_param_shards"] = n_param_shards
    saved = None
    if resume and os.path.exists(checkpoint_path):
        if state == "sharded":
            saved, _ = load_sharded_state(checkpoint_path, model_config=config, settings=settings)
        else:
            saved = load_state(checkpoint_path, model_config=config, settings=settings)
    space = None

    def save(current: LBFGSState) -> None:
        if space is not None:
            save_sharded_state(checkpoint_path, current, space, model_config=config, settings=settings)
        else:
            save_state(checkpoint_path, current, model_config=config, settings=settings)

    with resolve_client(client) as active:
        if cache == "auto":
            limits = [w.get("memory_limit") or 0 for w in active.scheduler_info(n_workers=-1)["workers"].values()]
            cache = shards_fit(dataset.nbytes_in_memory, limits)
            logger.info("%s the %d-byte dataset (worker memory limits %s)",
                        "caching" if cache else "streaming", dataset.nbytes_in_memory, limits)
        evaluator = MegaBatchEvaluator(
            active, model, dataset, portion_rows=portion_rows, backup_tasks=backup_tasks, cache=cache
        )
        metrics = MetricsStream(active, "sandblaster")
        try:
            transform = None
            if standardize:
                moments = combine_moments(evaluator.column_moments())
                transform = Standardizer.from_moments(
                    *moments, n_outputs=model.n_outputs, fit_intercept=model.fit_intercept,
                    l2=model.l2,
                )

            theta0 = x_start if transform is None else transform.to_theta(x_start)
            if state == "sharded":
                space = ShardedSpace(active, evaluator, model, n, theta0, history, n_param_shards, transform)
                theta0 = x_start = None  # the shards hold it now: no d-length vector stays here
                if saved is not None:
                    space.restore(checkpoint_path, saved.basis)

            def objective(params: np.ndarray) -> tuple[float, np.ndarray]:
                loss, sums = evaluator.evaluate(params)
                return model.objective_from_sums(params, loss, sums, n)

            if transform is None:
                evaluate = objective
            else:
                def evaluate(theta: np.ndarray) -> tuple[float, np.ndarray]:
                    f, g = objective(transform.to_params(theta))
                    return f, transform.gradient_to_theta(g)

            user_callback = callback
            if transform is not None and callback is not None:
                def user_callback(intermediate: OptimizeResult) -> Any:
                    intermediate.x = transform.to_params(intermediate.x)  # the model's coordinates
                    return callback(intermediate)

            try:
                def on_iteration(current: LBFGSState) -> None:
                    if eval_set is not None and current.nit % eval_every == 0:
                        x = space.x() if space is not None else current.x
                        if transform is not None:
                            x = transform.to_params(x)
                        current.history[-1].update(held_out_metrics(model, x, eval_set))
                    metrics.send(**current.history[-1], n_portions=len(evaluator.portions),
                                 backups_won=evaluator.stats.backups_won)
                    if checkpoint_path is not None and current.nit % checkpoint_every == 0:
                        save(current)

                result, final = lbfgs_minimize(
                    evaluate, theta0, options, callback=user_callback, state=saved,
                    on_iteration=on_iteration, space=space,
                )
                if checkpoint_path is not None and final.nit % checkpoint_every:
                    save(final)  # the last iterations since a checkpoint: the state the run ended in
            except NonFiniteObjectiveError as exc:
                raise NonFiniteObjectiveError(f"{exc} (dataset {str(dataset.path)!r})") from None
            if transform is not None:
                result.x = transform.to_params(result.x)
                result.jac = transform.gradient_to_params(result.jac)
        finally:
            if space is not None:
                result_bytes = space.bytes_received
                space.close()
            evaluator.close()

    result.timing = {
        "total_seconds": time.perf_counter() - started,
        **evaluator.stats.as_dict(),
        "cached": evaluator.cache,
    }
    if state == "sharded":
        result.timing["coordinator_bytes_received"] = result_bytes
    result.n_portions = len(evaluator.portions)
    result.run_id = metrics.run
    if not result.success:
        logger.info("Sandblaster L-BFGS stopped early: %s", result.message)
    return result
