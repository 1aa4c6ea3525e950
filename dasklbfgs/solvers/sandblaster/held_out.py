"""A Sandblaster run's held-out scoring by direct calls, as its evaluations are made.

Scoring the held-out data every ``eval_every`` iterations went through a task per shard that
read the shard from its store, a tree of merges and a gather: 22 ms an iteration on sklearn's
digits, five times the evaluation itself (4 ms). Here the held-out shards are cached in the
workers' memory for the run, and each scoring is a :class:`MegaBatchEvaluator` pass whose
portions return their rows' :class:`~dasklbfgs.scoring.summaries.Summary` for the held-out
metrics (:class:`~dasklbfgs.scoring.evaluation.HeldOutSummaries`): one direct call each way
per worker, the summaries merged in portion order here (the same figures whoever computed
them), lost workers and late ones handled as the evaluations' are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from distributed import Client

from dasklbfgs.data.masked import FoldDataset
from dasklbfgs.scoring.evaluation import HeldOutSummaries, metrics_of
from dasklbfgs.scoring.names import held_out_names
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.options import MegaBatchOptions
from dasklbfgs.solvers.sandblaster.portions import shards_fit
from dasklbfgs.solvers.sandblaster.shard_cache import worker_memory_limits

__all__ = ["HeldOutScorer", "held_out_scorer"]


class HeldOutScorer:
    """Scores ``model`` on the held-out shards cached by its own evaluator (``shards``: cached
    already by ``dasklbfgs.cached``, left cached)."""

    def __init__(self, client: Client, model: Any, eval_set: Any, shards: Any = None, *, backup_tasks: bool = True,
                 backup_slack: float = MegaBatchOptions.default("backup_slack")) -> None:
        self.model, self.names = model, held_out_names(model)
        self.evaluator = MegaBatchEvaluator(client, HeldOutSummaries(model, self.names), eval_set, cache=True,
                                            shards=shards, backup_tasks=backup_tasks, backup_slack=backup_slack)

    def __call__(self, params: np.ndarray) -> dict[str, Any]:
        """The held-out figures at ``params`` (``eval_`` keys, as :func:`held_out_metrics`')."""
        summaries = [summary for _, summary in self.evaluator.portion_results(params)]
        found = metrics_of(self.model, params, summaries, self.names)
        return {f"eval_{key}": value for key, value in found.items() if key != "n_samples"}

    def close(self) -> None:
        self.evaluator.close()


def held_out_scorer(context: RunContext, client: Client, training_cached: bool) -> HeldOutScorer | None:
    """A :class:`HeldOutScorer` for ``context``'s held-out data, set as the context's way to
    score (:meth:`RunContext.score`); None (the tasks read the store each time) without
    held-out data or ``eval_every`` (scored once, at the end), for a validation split (a mask
    over the training shards: caching it would hold every row again), with ``cache=False``,
    or when it does not fit the workers' memory beside the training shards
    (``training_cached``) under ``cache="auto"``'s rule. Shards given cached
    (``dasklbfgs.cached``) are used as they are."""
    eval_set, options, given = context.eval_set, context.options, context.eval_cached
    if eval_set is None or getattr(options, "eval_every", None) is None or isinstance(eval_set, FoldDataset):
        return None
    option = getattr(options, "cache", "auto")
    if given is None:
        if option is False:
            return None
        held = eval_set.nbytes_in_memory + (context.dataset.nbytes_in_memory if training_cached else 0)
        if option == "auto" and not shards_fit(held, worker_memory_limits(client)):
            return None
    scorer = HeldOutScorer(client, context.model, eval_set, given.shard_cache(client) if given is not None else None,
                           backup_tasks=getattr(options, "backup_tasks", True),
                           backup_slack=getattr(options, "backup_slack", MegaBatchOptions.default("backup_slack")))
    context.held_out = scorer
    return scorer
