"""Cross-validation on cached shards: K folds as row masks over the cached rows.

A fold's fit sees the cached shards through their sample weights: the training view weighs
the fold's held-out rows 0 (the rest keep their weights), holding the same ``X`` and ``y``
arrays and a new weight vector (8 bytes a row). Rows of weight 0 add nothing to a loss or
gradient sum, and the objective divides by the view's total weight, so a fold's fit is the
fit on its training rows alone. The held-out view holds a copy of the held-out rows alone
(a ``1/K`` share of the shards, released with the fold), so that scoring them after each fit
reads no other row. Each view is a set of Dask keys computed from the cached shards where
they live; a view lost with its worker is rebuilt from its shard. The folds are
scikit-learn's ``KFold``/``StratifiedKFold`` on the rows in their stored order
(:mod:`dasklbfgs.data.folds`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dasklbfgs.data.folds import Folds, check_n_splits, kfold, stratified_kfold
from dasklbfgs.data.masked import FoldDataset
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.compact_rows import CompactColumns
from dasklbfgs.scoring.evaluation import chosen_metrics
from dasklbfgs.selection.options import PathOptions
from dasklbfgs.selection.path import PathPlan, RegularizationPath, best_of, cached_on
from dasklbfgs.solvers.registry import minimize
from dasklbfgs.solvers.sandblaster.cached import CachedDataset
from dasklbfgs.solvers.sandblaster.shard_cache import ShardCache

__all__ = ["CrossValidatedPath", "cross_validate", "cross_validated_path", "fold_paths", "fold_views",
           "folds_on", "held_out_table", "plan_folds"]


def _labels_summary(shard: Any) -> tuple[np.ndarray, np.ndarray]:
    """Task: per class label (0..max), a cached shard's row count and first row (len: absent)."""
    y = np.asarray(shard.y).astype(np.intp)
    counts = np.bincount(y, minlength=int(y.max()) + 1 if len(y) else 0)
    first = np.full(len(counts), len(y))
    present = np.flatnonzero(counts)
    first[present] = [int(np.argmax(y == c)) for c in present]
    return counts, first


def plan_folds(shards: CachedDataset, n_splits: int, stratified: bool) -> Folds:
    """The folds of a cached dataset: ``KFold`` from its shard sizes, ``StratifiedKFold``
    from each shard's class counts and first rows, asked of the shards where they are."""
    data = shards.dataset
    rows = [hi - lo for lo, hi in data.shard_bounds]
    if not stratified:
        return kfold(rows, n_splits)
    client = shards.client
    summaries = client.gather([client.submit(_labels_summary, s, pure=False) for s in shards.shards_for(client)])
    n_classes = max(len(counts) for counts, _ in summaries)
    counts = np.zeros((len(summaries), n_classes), dtype=np.int64)
    first = np.full(n_classes, data.n_samples, dtype=np.int64)
    for i, ((found, at), lo) in enumerate(zip(summaries, (lo for lo, _ in data.shard_bounds))):
        counts[i, : len(found)] = found
        seen = found > 0
        first[: len(found)][seen] = np.minimum(first[: len(found)][seen], lo + at[seen])
    return stratified_kfold(counts, first, n_splits)


def _masked_shard(shard: Rows, view: FoldDataset, index: int) -> Rows:
    """Task: a cached shard seen through a fold's mask: for its training rows the same X and
    y with new weights (no copy of the rows); for its held-out rows, a copy of those rows
    alone (a fifth of the shard with 5 folds: scoring them reads no other row)."""
    X, y = shard.X, shard.y
    weights = view.masked(index, y, shard.w)
    if view.train:
        return shard._replace(w=weights)
    rows = np.flatnonzero(view.keep(index, y))
    kept = CompactColumns.of(X.to_csr()[rows]) if isinstance(X, CompactColumns) else X[rows]
    return Rows(kept, y[rows], weights[rows], None if shard.offset is None else shard.offset[rows])


def _weight_of(shard: Rows) -> float:
    assert shard.w is not None  # a fold's view weighs every row
    return float(np.sum(shard.w, dtype=np.float64))


def fold_views(shards: CachedDataset, folds: Folds, fold: int) -> tuple[CachedDataset, CachedDataset]:
    """The training and held-out views of fold ``fold`` over the cached ``shards``, each a
    :class:`CachedDataset` of its own (close them when done; on an error here, whatever was
    made is released)."""
    client, base = shards.client, shards.dataset
    cache = shards.shard_cache(client)
    holders = client.who_has(cache.shards)
    views: list[CachedDataset] = []
    masked: list[Any] = []
    try:
        for train in (True, False):
            outline = FoldDataset(base, folds, fold, train, total_weight=0.0)
            token = f"fold-{fold}-{'train' if train else 'test'}-{uuid.uuid4().hex[:8]}"  # keys never reused
            masked = [client.submit(_masked_shard, shard, outline, i, key=f"sandblaster-shard-{token}-{i}",
                                    workers=list(holders.get(shard.key, ())) or None, allow_other_workers=True,
                                    pure=False) for i, shard in enumerate(cache.shards)]
            total = sum(client.gather([client.submit(_weight_of, s, pure=False) for s in masked]))
            view = FoldDataset(base, folds, fold, train, total_weight=total)
            views.append(CachedDataset.of_shards(view, client, ShardCache.of_futures(client, masked, token)))
            masked = []
    except BaseException:
        client.cancel(masked)
        for made in views:
            made.close()
        raise
    return views[0], views[1]


@dataclass
class CrossValidatedPath:
    """A :func:`cross_validated_path`: the penalties (``alphas``, ``l1``, ``l2``, strongest
    first), each fold's path (``folds``, held-out scores by fold and penalty in ``scores``:
    ``n_folds x n_alphas`` per metric), their mean (``mean_scores``), the chosen penalty
    (``best_index``, by ``selected_by``) and the model refitted on every row there
    (``coef``, ``refit``); ``alpha_max`` as the path's, on every row."""

    alphas: np.ndarray
    l1: np.ndarray
    l2: np.ndarray
    folds: list[RegularizationPath]
    scores: dict[str, np.ndarray]
    mean_scores: dict[str, np.ndarray]
    selected_by: str
    best_index: int
    coef: np.ndarray
    refit: Any
    alpha_max: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def best_alpha(self) -> float:
        return float(self.alphas[self.best_index])


def cross_validated_path(model: Any, data: Any, *, cv: int = 5, stratified: bool | None = None,
                         l1: Sequence[float] | None = None, l2: Sequence[float] | None = None,
                         n_alphas: int = PathOptions.default("n_alphas"), eps: float = PathOptions.default("eps"),
                         metric: str | None = None, client: Any = None, **options: Any) -> CrossValidatedPath:
    """A regularization path (:func:`~dasklbfgs.selection.path.regularization_path`'s
    penalties: its ``l1``, ``l2``, ``n_alphas``, ``eps`` and Sandblaster ``options``) fitted on
    each of ``cv`` folds' training rows and scored on its held-out rows, all on one set of
    cached shards; the penalty with the best mean held-out ``metric`` over the folds (default:
    log-loss for a classifier, the mean squared error for a regression, as ``LassoCV``) is then
    fitted on every row, warm started from the folds' mean solution there. ``stratified``
    (default: for classifiers) gives scikit-learn's ``StratifiedKFold(cv)``, else
    ``KFold(cv)``, on the rows in their stored order. The sequence of penalties, when not
    given, is computed once on all the rows (as scikit-learn's ``LassoCV``), so every fold fits
    the same ones.
    """
    plan = PathPlan.checked(model, PathOptions.from_mapping({"l1_values": l1, "l2_values": l2,
                                                              "n_alphas": n_alphas, "eps": eps}), options)
    return cross_validate(plan, data, cv=cv, stratified=stratified, metric=metric, client=client)


def cross_validate(plan: PathPlan, data: Any, *, cv: int, stratified: bool | None, metric: str | None,
                   client: Any) -> CrossValidatedPath:
    """:func:`cross_validated_path` of a checked plan (its own sequence, or given penalties
    with an elastic net's ratio kept)."""
    model = plan.model
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        shards, folds, stratify = folds_on(model, data, cv=cv, stratified=stratified, metric=metric, client=client,
                                           stack=stack)
        alpha_max = None
        fixed = plan
        if plan.given is None:  # the sequence on every row
            alphas, alpha_max, _ = plan.alphas_for(shards)
            fixed = plan.with_alphas(alphas)
        paths = [fold[0] for fold in fold_paths([fixed], shards, folds, metric)]
        by_fold, name = held_out_table(paths, metric)
        with warnings.catch_warnings():  # a penalty undefined on every fold stays NaN: best_of says so
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = {key: np.nanmean(values, axis=0) for key, values in by_fold.items()}
        best = best_of({key: list(values) for key, values in mean.items()}, name, "the folds' mean held-out")
        first = paths[0]
        chosen = fixed.model_for(float(first.alphas[best]))
        start = np.mean([p.coef(best) for p in paths], axis=0)
        refit = minimize(chosen, shards, "sandblaster", plan.solver_options, client=shards.client, x0=start)
    return CrossValidatedPath(alphas=first.alphas, l1=first.l1, l2=first.l2, folds=paths, scores=by_fold,
                              mean_scores=mean, selected_by=name, best_index=best, coef=refit.x, refit=refit,
                              alpha_max=alpha_max,
                              stats={"seconds": time.perf_counter() - started, "folds": cv,
                                     "stratified": stratify})


def folds_on(model: Any, data: Any, *, cv: int, stratified: bool | None, metric: str | None, client: Any,
             stack: contextlib.ExitStack) -> tuple[CachedDataset, Folds, bool]:
    """``data`` cached (for as long as ``stack``: :func:`~dasklbfgs.selection.path.cached_on`),
    its ``cv`` folds, and whether they are stratified (``stratified`` None: for classifiers);
    ``cv``, ``metric`` and the stratification refused before any caching."""
    check_n_splits(cv)
    if metric is not None:
        chosen_metrics(model.task, [metric])
    stratify = model.task == "classification" if stratified is None else bool(stratified)
    if stratify and model.task != "classification":
        raise ConfigurationError(f"stratified folds deal each class's rows to the folds; {model!r} is not a "
                                 "classifier (stratified=False)")
    shards = cached_on(data, client, stack)
    model.check_data(shards.dataset)  # labels a stratification can count, before any fold
    return shards, plan_folds(shards, cv, stratify), stratify


def fold_paths(plans: Sequence[PathPlan], shards: CachedDataset, folds: Folds, metric: str | None, *,
               summed: bool = False) -> list[list[RegularizationPath]]:
    """Each plan's path on each fold's training rows, scored on its held-out rows (``metric``
    with the path's own, or the path's own alone), as ``paths[fold][plan]``: one pair of fold
    views for all the plans. ``summed``: the plans' penalties are written beside a summed loss
    (scikit-learn's ``1 / C``), so each fold's are divided by the weight of its training rows."""
    paths = []
    for fold in range(folds.n_splits):
        train, test = fold_views(shards, folds, fold)
        with train, test:
            scale = 1.0 / train.dataset.total_weight if summed else 1.0
            paths.append([(plan.with_alphas(plan.given * scale) if summed and plan.given is not None else plan)
                          .run(train, eval_data=test, metrics=None if metric is None else [metric])
                          for plan in plans])
    return paths


def held_out_table(paths: Sequence[RegularizationPath], metric: str | None) -> tuple[dict[str, np.ndarray], str]:
    """The folds' held-out figures (``n_folds x n_alphas`` per metric; a regression's also as
    mean squared errors, LassoCV's ``mse_path_``), and the name to choose by (``metric``, or
    the paths' held-out loss)."""
    name = metric or paths[0].selected_by
    if name is None:
        raise ConfigurationError(f"no held-out loss to choose by for {paths[0]!r}: give metric=")
    first_scores = (paths[0].scores or [{}])[0]
    by_fold = {key: np.array([[float(s[key]) for s in p.scores or []] for p in paths])
               for key, value in first_scores.items() if np.isscalar(value)}
    if "rmse" in by_fold:  # a regression's folds averaged as mean squared errors (LassoCV's mse_path_)
        by_fold["mse"] = by_fold["rmse"] ** 2
        name = "mse" if name == "rmse" else name
    return by_fold, name
