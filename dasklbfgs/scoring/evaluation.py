"""Evaluate a fitted model on a dataset: by the workers, a task per shard, the client
receiving a few hundred numbers, never rows.

Each shard's task loads its rows and computes its :class:`~dasklbfgs.scoring.summaries.Summary`.
The ranking metrics are finished in parts of the score range, side by side on the workers
(:mod:`~dasklbfgs.scoring.ranking`): each part's task merges every summary in a fixed tree
(neighbours first, so the figures do not depend on which worker did what) and ranks its part
of the scores; this process adds the parts up (a few hundred numbers each) and finishes the
metrics. Without a Dask client the same tasks run in this process, one after another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dasklbfgs._wire import INLINE_PARAMS_BYTES, aligned
from dasklbfgs.data._client import active_client
from dasklbfgs.data.rows import Rows, aligned_rows
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.compact_rows import plain_rows
from dasklbfgs.models.contract import as_model
from dasklbfgs.scoring.ranking import PARTS, RankedPart
from dasklbfgs.scoring.summaries import METRICS, RANKING, Summary, summarize

if TYPE_CHECKING:
    from dasklbfgs._typing import Dataset
    from dasklbfgs.models.base import Model

__all__ = ["HeldOutSummaries", "chosen_metrics", "evaluate", "evaluated", "held_out_metrics", "metrics_of"]

T = TypeVar("T")


def evaluate(model: Model, params: Any, data: Dataset, *, client: Any = None,
             metrics: Sequence[str] | None = None, curves: bool = False) -> dict[str, Any]:
    """The metrics of ``model`` at ``params`` on ``data``: its ``objective``, ``n_samples``,
    and the metrics of its task under scikit-learn's names and definitions (weighted where
    the data has weights; see :data:`~dasklbfgs.scoring.summaries.METRICS`):

    - classification: ``log_loss``, ``accuracy``, ``roc_auc`` (exact; one-vs-rest macro for
      more than two classes), ``average_precision``, ``precision``, ``recall``, ``f1``
      (of class 1 for two classes, macro averages for more), ``confusion_matrix`` (rows
      the true class 0..K-1, columns the predicted one), ``brier_score``;
    - regression: ``rmse``, ``mae``, ``r2``, ``explained_variance``, ``mean_tweedie_deviance``
      and ``d2`` (the deviance of the model's family at its power, and the share of it
      explained: the squared error and R^2 for least squares, Poisson's for ``Poisson``);
    - reconstruction: ``reconstruction_mse``.

    ``data``: a :class:`~dasklbfgs.data.ShardedDataset` (or its path or URL). ``metrics``
    picks some of them (all by default). With ``curves``, the result's ``"curves"`` holds
    what the score figures draw, computed by the workers too (see
    :meth:`~dasklbfgs.scoring.summaries.Summary.curves`): a classifier's ``roc`` (``fpr``,
    ``tpr``) and ``precision_recall`` curves (a few hundred thresholds; per class under
    ``classes`` for more than two; when the ranking metrics are among ``metrics``) and its
    ``reliability`` diagram, a regression's ``residuals`` histogram. A dataset on a store
    is evaluated by the workers of ``client`` (or of the active client), a task per shard,
    and only the finished numbers reach this process; with no client, or data in memory,
    here, one shard at a time.
    """
    import os

    from dasklbfgs.data.sharded import as_dataset

    model = as_model(model)  # a model of the contract's, wrapped
    names = chosen_metrics(model.task, metrics)
    if hasattr(data, "shards_for"):  # dasklbfgs.cached(...): summarised where its shards are
        given: Any = data
        client = given.client if client is None else client
        return evaluated(model, params, given.dataset, names, client, given.shards_for(client), curves=curves)
    if isinstance(data, (str, os.PathLike)):
        data = as_dataset(data)
    return evaluated(model, params, data, names, active_client() if client is None else client, curves=curves)


def evaluated(model: Model, params: Any, data: Dataset, names: tuple[str, ...], client: Any,
              cached: list[Any] | None = None, *, curves: bool = False) -> dict[str, Any]:
    """:func:`evaluate`, by the workers of ``client``, or here if it is None; ``cached``:
    futures of the dataset's shards already in the workers' memory, ``(X, y, w)`` each in
    shard order (a Sandblaster run's), summarised where they are, read from no store."""
    model.check_data(data)
    params = model.check_params(params, "params")
    if client is not None:
        model.check_workers(client)  # code the workers import (a torch module's factory), before any task
    parts = PARTS if model.task == "classification" and any(name in RANKING for name in names) else 1
    if client is not None and cached is not None:
        params_future = (client.scatter(params, hash=False) if params.nbytes > INLINE_PARAMS_BYTES
                         else params)  # a large one fetched by the others from the worker holding it
        where = client.who_has(cached)  # summarised where they are: a shard is megabytes, its summary a few numbers
        summaries = [client.submit(_rows_summary, model, params_future, shard, names, curves, pure=False,
                                   workers=list(where.get(shard.key, ())) or None, allow_other_workers=True)
                     for shard in cached]
        holding = sorted({worker for workers in where.values() for worker in workers})  # the parts side by side
        pieces = [client.submit(_ranked_part, summaries, index, parts, pure=False, allow_other_workers=True,
                                workers=[holding[index % len(holding)]] if holding else None)
                  for index in range(parts)]
        rows, weight, loss, sums, found = _finished(client.gather(pieces), names, curves)
    elif client is not None and hasattr(data, "location"):  # a store the workers read
        import dask

        shard = dask.delayed(_shard_summary, pure=True)
        params_ = dask.delayed(params, traverse=False)  # sent once, not inlined in every task
        summaries = [shard(model, params_, data, index, names, curves) for index in range(data.n_shards)]
        ranked = [dask.delayed(_ranked_part, pure=True)(summaries, index, parts) for index in range(parts)]
        rows, weight, loss, sums, found = _finished(client.gather(client.compute(ranked)), names, curves)
    else:
        summaries_here = [_shard_summary(model, params, data, index, names, curves) for index in range(data.n_shards)]
        rows, weight, loss, sums, found = _finished([_ranked_part(summaries_here, index, parts)
                                                     for index in range(parts)], names, curves)
    return {"objective": model.objective_value(params, loss, sums, weight), "n_samples": rows, **found}


def metrics_of(model: Model, params: np.ndarray, summaries: Sequence[Summary], names: tuple[str, ...]
               ) -> dict[str, Any]:
    """The metrics ``names`` (no ranking metric) and the objective at ``params`` of the rows
    ``summaries`` summarise, merged in their order (:func:`merged_in_a_tree`)."""
    rows, weight, loss, sums, found = _finished([_ranked_part(summaries, 0, 1)], names, False)
    return {"objective": model.objective_value(params, loss, sums, weight), "n_samples": rows, **found}


class HeldOutSummaries:
    """A portion model whose result for some rows is ``(0.0, their Summary)`` for the metrics
    ``names``: a Sandblaster run's held-out scoring by its evaluator's direct calls
    (:mod:`dasklbfgs.solvers.sandblaster.held_out`), the summaries merged by
    :func:`metrics_of`. Runs on the workers."""

    def __init__(self, model: Model, names: tuple[str, ...]) -> None:
        self.model, self.names = model, names

    @property
    def n_params(self) -> int:
        return int(self.model.n_params)

    def portion_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None,
                              offset: np.ndarray | None = None) -> tuple[float, Summary]:
        return 0.0, summarize(self.model, params, plain_rows(X), y, w, self.names, offset=offset)

    def compact_positions(self, X: Any) -> None:
        """Every parameter, for any rows (the direct calls send the whole vector)."""
        return None


def chosen_metrics(task: str, metrics: Sequence[str] | None) -> tuple[str, ...]:
    """The metric names ``metrics`` asks for (all of ``task``'s by default), checked."""
    available = METRICS[task]
    if metrics is None:
        return available
    if isinstance(metrics, str):
        metrics = [metrics]
    unknown = [name for name in metrics if name not in available]
    if unknown:
        raise ConfigurationError(f"metrics {unknown} are not metrics of a {task} model; its metrics are "
                                 f"{list(available)}")
    return tuple(metrics)


def held_out_metrics(model: Model, params: np.ndarray, data: Dataset, client: Any = None,
                     cached: list[Any] | None = None) -> dict[str, Any]:
    """The held-out figures a run records as it goes (``eval_`` keys): the objective and the
    model's scores (:func:`~dasklbfgs.scoring.names.held_out_names`), by the workers of ``client``
    (Sandblaster's, idle between its evaluations; ``cached``: futures of the held-out shards
    in their memory), or with None in this process (a replica solver's workers are busy with
    their replicas)."""
    from dasklbfgs.scoring.names import held_out_names

    found = evaluated(model, params, data, held_out_names(model), client=client, cached=cached)
    return {f"eval_{k}": v for k, v in found.items() if k != "n_samples"}


def merged_in_a_tree(items: list[T], merge: Callable[[T, T], T]) -> T:
    """``items`` merged pairwise, neighbours first, in rounds: a tree of depth log2(n)
    whose shape depends only on ``len(items)``."""
    while len(items) > 1:
        items = [merge(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


def _shard_summary(model: Model, params: np.ndarray, data: Dataset, index: int, names: tuple[str, ...],
                   curves: bool) -> Summary:
    """Task: the summary of shard ``index`` for the metrics ``names`` (and the curves), its
    rows read from the store in one fetch (:meth:`~dasklbfgs.data.ShardedDataset.load_shards`)."""
    return _rows_summary(model, params, data.load_shards([index])[0], names, curves)


def _rows_summary(model: Model, params: np.ndarray, shard: Rows, names: tuple[str, ...], curves: bool) -> Summary:
    """Task: the summary of a shard's rows (sparse rows kept compact: as CSR again); rows and
    parameters that came over the wire aligned (:func:`~dasklbfgs._wire.aligned`: numpy hands
    only aligned arrays to BLAS; its own loop is about 3x slower)."""
    X, y, w, offset = aligned_rows(shard)
    return summarize(model, aligned(params), plain_rows(X), y, w, names, curves=curves, offset=offset)


def _merged(a: Summary, b: Summary) -> Summary:
    return a.merge(b)


def _ranked_part(summaries: Sequence[Summary], index: int, parts: int
                 ) -> tuple[Summary | None, tuple[RankedPart, ...]]:
    """Task: the shards' summaries merged (:func:`merged_in_a_tree`: the same order wherever
    it runs), and part ``index`` of ``parts`` of its ranked scores; the first part also
    returns the merged summary without its score counts."""
    summary = merged_in_a_tree(list(summaries), _merged)
    return (summary.without_counts() if index == 0 else None), summary.ranked_part(index, parts)


def _finished(pieces: Sequence[tuple[Summary | None, tuple[RankedPart, ...]]], names: tuple[str, ...], curves: bool
              ) -> tuple[int, float, float, np.ndarray | None, dict[str, Any]]:
    """What the client needs of the merged summary and its ranked parts (every
    :func:`_ranked_part`, in order): rows, weight, the objective's sums and the finished
    metrics (and curves)."""
    summary = pieces[0][0]
    assert summary is not None
    ranked = summary.ranked([part for _, part in pieces])
    found = summary.metrics(names, ranked)
    if curves:
        found["curves"] = summary.curves(ranked)
    return summary.rows, summary.weight, summary.loss, summary.sums, found
