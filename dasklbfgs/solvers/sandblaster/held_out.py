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

from dasklbfgs.scoring.evaluation import HeldOutSummaries, metrics_of
from dasklbfgs.scoring.names import held_out_names
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.shard_cache import choose_cache

__all__ = ["HeldOutScorer", "held_out_scorer"]


class HeldOutScorer:
    """Scores ``model`` on the held-out shards cached by its own evaluator (``shards``: cached
    already by ``dasklbfgs.cached``, left cached)."""

    def __init__(self, client: Client, model: Any, eval_set: Any, shards: Any = None) -> None:
        self.model, self.names = model, held_out_names(model)
        self.evaluator = MegaBatchEvaluator(client, HeldOutSummaries(model, self.names), eval_set, cache=True,
                                            shards=shards)

    def __call__(self, params: np.ndarray) -> dict[str, Any]:
        """The held-out figures at ``params`` (``eval_`` keys, as :func:`held_out_metrics`')."""
        summaries = [summary for _, summary in self.evaluator.portion_results(params)]
        found = metrics_of(self.model, params, summaries, self.names)
        return {f"eval_{key}": value for key, value in found.items() if key != "n_samples"}

    def close(self) -> None:
        self.evaluator.close()


def held_out_scorer(context: RunContext, client: Client) -> HeldOutScorer | None:
    """A :class:`HeldOutScorer` for ``context``'s held-out data, set as the context's way to
    score (:meth:`RunContext.score`); None without held-out data, or when it is not to be
    cached (its ``cache`` option, or ``"auto"`` and too big for the workers' memory: then the
    tasks read it from its store each time)."""
    if context.eval_set is None or getattr(context.options, "eval_every", None) is None:
        return None  # (scored once, at the end: not worth caching)
    given = context.eval_cached
    if not choose_cache(client, getattr(context.options, "cache", "auto"), context.eval_set, given):
        return None
    scorer = HeldOutScorer(client, context.model, context.eval_set,
                           given.shard_cache(client) if given is not None else None)
    context.held_out = scorer
    return scorer
