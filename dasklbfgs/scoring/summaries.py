"""What a shard contributes to a model's metrics, merged across shards, then finished.

A :class:`Summary` is computed from one shard's rows (:func:`summarize`), merges with
another in a fixed order (:meth:`Summary.merge`: sums, Chan's pairwise update for means and
variances, sorted score counts for the ranking metrics), and finishes into the metrics
under scikit-learn's names and definitions, weighted where the data has weights
(:meth:`Summary.metrics`). Pure numpy: the workers compute and merge summaries, and only
the finished numbers travel to the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs.models.glm import label_terms, null_deviance, unit_deviance
from dasklbfgs.scoring.curves import Histogram, Reliability, ranking_curves
from dasklbfgs.scoring.ranking import PARTS, Ranked, RankedPart, ScoreCounts

if TYPE_CHECKING:
    from dasklbfgs.models.base import Model

__all__ = ["METRICS", "Summary", "summarize"]

#: every metric of each task, as :meth:`Summary.metrics` names them (scikit-learn's names)
METRICS = {
    "classification": ("log_loss", "accuracy", "roc_auc", "average_precision", "precision", "recall", "f1",
                       "confusion_matrix", "brier_score"),
    "regression": ("rmse", "mae", "r2", "explained_variance", "mean_tweedie_deviance", "d2"),
    "reconstruction": ("reconstruction_mse",),
}


@dataclass(frozen=True)
class Moments:
    """Total weight, weighted mean and weighted sum of squared deviations of some values."""

    weight: float
    mean: float
    m2: float

    @classmethod
    def of(cls, values: np.ndarray, weight: np.ndarray) -> Moments:
        total = float(weight.sum())
        mean = float(weight @ values) / total if total > 0 else 0.0
        deviation = values - mean
        return cls(total, mean, float((weight * deviation) @ deviation))

    def merge(self, other: Moments) -> Moments:
        """Chan, Golub and LeVeque's pairwise update: no cancellation of large sums."""
        total = self.weight + other.weight
        if total <= 0:
            return self
        delta = other.mean - self.mean
        return Moments(total, self.mean + delta * other.weight / total,
                       self.m2 + other.m2 + delta * delta * self.weight * other.weight / total)


@dataclass(frozen=True)
class Summary:
    """One or more shards' contribution: rows, weight, the objective's sums, and the task's own."""

    task: str
    rows: int
    weight: float
    loss: float
    sums: np.ndarray | None  # what the objective's value needs beyond the loss (None: nothing)
    # classification
    confusion: np.ndarray | None = None  # (K, K) weight, true class by predicted class
    present: np.ndarray | None = None  # (K,) whether a row has the class as label or prediction, whatever its weight
    weighted: bool = False  # whether some rows had sample weights (a confusion matrix of counts otherwise)
    log_loss: float = 0.0  # sum of weight * -log(clipped probability of the true class)
    brier: float = 0.0  # sum of weight * squared distance of the probabilities to the one-hot label (binary: of P(y=1))
    counts: tuple[ScoreCounts, ...] = ()  # binary: the positive class's; K > 2: one per class
    reliability: Reliability | None = None  # binary: of P(y=1); K > 2: of the top class's probability
    # regression and reconstruction
    labels: Moments | None = None
    residuals: Moments | None = None
    squared_error: float = 0.0
    absolute_error: float = 0.0
    residual_histogram: Histogram | None = None
    n_outputs: int = 1
    # regression: the model family's deviance (a Tweedie power; least squares' is 0)
    power: float = 0.0
    deviance: float = 0.0  # sum of weight * unit deviance of the label from the prediction
    label_terms: float = 0.0  # sum of weight * glm.label_terms(label): for the null deviance

    def merge(self, other: Summary) -> Summary:
        """The summary of both sets of rows (this one's first)."""
        sums = None if self.sums is None or other.sums is None else self.sums + other.sums
        merged = replace(
            self, rows=self.rows + other.rows, weight=self.weight + other.weight, loss=self.loss + other.loss,
            sums=sums, log_loss=self.log_loss + other.log_loss, brier=self.brier + other.brier,
            squared_error=self.squared_error + other.squared_error,
            absolute_error=self.absolute_error + other.absolute_error, deviance=self.deviance + other.deviance,
            label_terms=self.label_terms + other.label_terms)
        if self.confusion is not None and other.confusion is not None:
            assert self.present is not None and other.present is not None
            merged = replace(merged, confusion=self.confusion + other.confusion, present=self.present | other.present,
                             weighted=self.weighted or other.weighted,
                             counts=tuple(a.merge(b) for a, b in zip(self.counts, other.counts)))
        if self.reliability is not None and other.reliability is not None:
            merged = replace(merged, reliability=self.reliability.merge(other.reliability))
        if self.residual_histogram is not None and other.residual_histogram is not None:
            merged = replace(merged, residual_histogram=self.residual_histogram.merge(other.residual_histogram))
        if self.labels is not None and other.labels is not None:
            merged = replace(merged, labels=self.labels.merge(other.labels))
        if self.residuals is not None and other.residuals is not None:
            merged = replace(merged, residuals=self.residuals.merge(other.residuals))
        return merged

    def ranked_part(self, index: int, parts: int = PARTS) -> tuple[RankedPart, ...]:
        """Part ``index`` of ``parts`` of the score range of each of :attr:`counts`
        (:meth:`~dasklbfgs.scoring.ranking.ScoreCounts.part`): what the parts, computed
        anywhere, finish the ranking metrics and curves with."""
        return tuple(counts.part(index, parts) for counts in self.counts)

    def ranked(self, parts: Sequence[tuple[RankedPart, ...]] | None = None) -> tuple[Ranked, ...]:
        """The ranked scores of each of :attr:`counts`, from their ``parts`` (every
        :meth:`ranked_part`, in order), or with None all computed here."""
        if parts is None:
            parts = [self.ranked_part(index) for index in range(PARTS)]
        return tuple(Ranked(tuple(part[k] for part in parts)) for k in range(len(parts[0]) if parts else 0))

    def without_counts(self) -> Summary:
        """This summary without its score counts (the rows' scores): what finishes the
        metrics with the ranked parts, a few numbers."""
        return replace(self, counts=())

    def metrics(self, names: tuple[str, ...], ranked: tuple[Ranked, ...] | None = None) -> dict[str, Any]:
        """The metrics ``names`` (of :data:`METRICS` for this task), finished; the ranking
        ones from ``ranked`` (:meth:`ranked`: computed here when None)."""
        ranked = self.ranked() if ranked is None else ranked
        finished = {"classification": lambda: self._classification(ranked), "regression": self._regression,
                    "reconstruction": self._reconstruction}[self.task]()
        return {name: finished[name] for name in names}

    def curves(self, ranked: tuple[Ranked, ...] | None = None) -> dict[str, Any]:
        """What the score figures draw (:mod:`~dasklbfgs.scoring.curves`): a classifier's ROC
        and precision-recall curves (one per class, one-vs-rest, for more than two; from
        ``ranked`` as in :meth:`metrics`, when the score counts were computed) and
        reliability diagram, a regression's residual histogram."""
        ranked = self.ranked() if ranked is None else ranked
        found: dict[str, Any] = {}
        if len(ranked) == 1:
            found.update(ranking_curves(ranked[0]))
        elif ranked:
            found["classes"] = [ranking_curves(r) for r in ranked]
        if self.reliability is not None:  # of P(y = 1) for two classes, of the top class's probability for more
            of = "positive" if self.confusion is not None and self.confusion.shape[0] == 2 else "top_class"
            found["reliability"] = {**self.reliability.finished(), "of": of}
        if self.residual_histogram is not None:
            found["residuals"] = self.residual_histogram.finished()
        return found

    def _classification(self, ranked: tuple[Ranked, ...]) -> dict[str, Any]:
        assert self.confusion is not None
        C = self.confusion
        binary = C.shape[0] == 2
        predicted, actual, hits = C.sum(axis=0), C.sum(axis=1), np.diag(C)
        precision, recall, f1 = _ratio(hits, predicted), _ratio(hits, actual), _ratio(2 * hits, predicted + actual)
        present = self.present  # scikit-learn's macro average: the labels in y_true or y_pred
        aucs = [r.roc_auc() for r in ranked] or [float("nan")]  # none: not asked for
        precisions = [r.average_precision() for r in ranked] or [float("nan")]
        return {
            "log_loss": self.log_loss / self.weight,
            "accuracy": float(hits.sum() / self.weight),
            "roc_auc": aucs[0] if binary else float(np.mean(aucs)),
            "average_precision": precisions[0] if binary else float(np.mean(precisions)),
            "precision": float(precision[1] if binary else precision[present].mean()),
            "recall": float(recall[1] if binary else recall[present].mean()),
            "f1": float(f1[1] if binary else f1[present].mean()),
            "confusion_matrix": (C if self.weighted else C.astype(np.int64)).tolist(),
            "brier_score": self.brier / self.weight,
        }

    def _regression(self) -> dict[str, Any]:
        assert self.labels is not None and self.residuals is not None
        spread = self.labels.m2
        return {
            "rmse": float(np.sqrt(self.squared_error / self.weight)),
            "mae": self.absolute_error / self.weight,
            "r2": _explained(self.squared_error, spread),
            "explained_variance": _explained(self.residuals.m2, spread),
            "mean_tweedie_deviance": self.deviance / self.weight,
            "d2": _explained(self.deviance, null_deviance(self.power, self.labels.weight, self.labels.mean, spread,
                                                          self.label_terms)),
        }

    def _reconstruction(self) -> dict[str, Any]:
        return {"reconstruction_mse": self.squared_error / (self.weight * self.n_outputs)}


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """``top / bottom``, 0 where ``bottom`` is 0 (scikit-learn's ``zero_division`` default)."""
    return np.divide(top, bottom, out=np.zeros_like(top, dtype=np.float64), where=bottom > 0)


def _explained(unexplained: float, spread: float) -> float:
    """``1 - unexplained / spread``; for constant labels 1.0 if nothing is unexplained, else
    0.0 (scikit-learn's ``force_finite``)."""
    if spread > 0:
        return 1.0 - unexplained / spread
    return 1.0 if unexplained == 0 else 0.0


#: the metrics that need every distinct score (:class:`ScoreCounts`), not sums alone
RANKING = ("roc_auc", "average_precision")


def summarize(model: Model, params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None,
              names: tuple[str, ...] = METRICS["classification"], *, curves: bool = False,
              offset: np.ndarray | None = None) -> Summary:
    """The summary of one block of rows (with their ``offset``, when the data have them),
    for the metrics ``names`` and, with ``curves``,
    :meth:`Summary.curves` (the score counts, and so the ROC and precision-recall curves,
    only when a ranking metric is among ``names``), from one
    :meth:`~dasklbfgs.models.base.Model.scored` of the rows."""
    weight = np.ones(X.shape[0]) if w is None else np.asarray(w, dtype=np.float64)
    scored = model.scored(params, X, y, w) if offset is None else model.scored(params, X, y, w, offset)
    base = Summary(model.task, int(X.shape[0]), float(weight.sum()), scored.loss, scored.sums)
    if model.task == "classification":
        assert scored.predicted is not None
        return _classified(base, scored.outputs, np.asarray(scored.predicted, dtype=np.int64),
                           np.asarray(y).astype(np.int64), weight, weighted=w is not None,
                           ranked=any(name in RANKING for name in names))
    if model.task == "regression":
        labels = np.asarray(y, dtype=np.float64)
        residual = labels - scored.outputs
        power = float(getattr(model, "deviance_power", 0.0))  # a GLM's; least squares' deviance: the squared error
        base = replace(base, power=power, deviance=float(weight @ unit_deviance(labels, scored.outputs, power)),
                       label_terms=float(weight @ label_terms(labels, power)))
        return replace(base, labels=Moments.of(labels, weight),
                       residuals=Moments.of(residual, weight), squared_error=float((weight * residual) @ residual),
                       absolute_error=float(weight @ np.abs(residual)),
                       residual_histogram=Histogram.of(residual, weight) if curves else None)
    dense = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    residual = np.asarray(scored.outputs) - dense
    return replace(base, squared_error=float(np.einsum("i,ij,ij->", weight, residual, residual)),
                   n_outputs=int(dense.shape[1]))


def _classified(base: Summary, proba: np.ndarray, predicted: np.ndarray, y: np.ndarray, weight: np.ndarray, *,
                weighted: bool, ranked: bool) -> Summary:
    k = proba.shape[1]
    weights = weight if weighted else None  # None: every row weighs 1, counted rather than weighed
    present = np.zeros(k, dtype=bool)
    present[y] = present[predicted] = True
    rows = np.arange(y.size)
    confusion = np.bincount(y * k + predicted, weights=weights, minlength=k * k).reshape(k, k).astype(np.float64)
    eps = np.finfo(proba.dtype).eps
    if k == 2:  # the positive class's probability alone (scikit-learn's brier_score_loss)
        positive = y == 1
        right = np.where(positive, proba[:, 1], proba[:, 0])
        off = proba[:, 1] - positive
        brier = _total(np.square(off, out=off), weights)
    else:
        right = proba[rows, y]
        off = proba.copy()  # the distance of the probabilities to the one-hot label
        off[rows, y] -= 1.0
        brier = _total(np.einsum("ij,ij->i", off, off), weights)
    log_loss = -_total(np.log(np.clip(right, eps, 1 - eps, out=right), out=right), weights)
    classes = ([1] if k == 2 else range(k)) if ranked else []
    counts = tuple(ScoreCounts.of(proba[:, c], y == c, weights) for c in classes)
    if k == 2:
        reliability = Reliability.of(proba[:, 1], positive, weights)
    else:
        reliability = Reliability.of(proba[rows, predicted], predicted == y, weights)
    return replace(base, confusion=confusion, present=present, weighted=weighted, log_loss=log_loss, brier=brier,
                   counts=counts, reliability=reliability)


def _total(values: np.ndarray, weight: np.ndarray | None) -> float:
    """The sum of ``values`` weighted by ``weight`` (None: 1 each)."""
    return float(values.sum() if weight is None else weight @ values)
