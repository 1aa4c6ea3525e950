"""Metrics from merged shard summaries equal scikit-learn's on the same predictions (to
1e-12), weighted and unweighted, with ties; and the workers compute what this process does."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm
from sklearn.preprocessing import label_binarize

from dasklbfgs import ShardedDataset, evaluate
from dasklbfgs.data.rows import Rows
from dasklbfgs.errors import ConfigurationError, MetricsWarning
from dasklbfgs.models import MLP, Gamma, LeastSquares, Logistic, Poisson, Softmax, SparseAutoencoder, Tweedie
from dasklbfgs.scoring.curves import CURVE_POINTS, Histogram, ranking_curves
from dasklbfgs.scoring.evaluation import merged_in_a_tree
from dasklbfgs.scoring.ranking import ScoreCounts
from dasklbfgs.scoring.summaries import METRICS, summarize

rng = np.random.default_rng(7)
CUTS = (0, 37, 38, 250, 400, 600)  # shards of uneven sizes, one of a single row


def _merged(model, params, X, y, w):
    parts = [summarize(model, params, X[a:b], y[a:b], None if w is None else w[a:b])
             for a, b in zip(CUTS[:-1], CUTS[1:])]
    return merged_in_a_tree(parts, lambda a, b: a.merge(b))


def _close(ours, theirs) -> None:
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("rounded", [False, True], ids=["distinct scores", "tied scores"])
def test_binary_classification_metrics_equal_scikit_learns(weighted, rounded) -> None:
    X = rng.normal(size=(600, 5))
    if rounded:
        X = np.round(X, 0)  # few distinct rows: many tied scores
    y = (X[:, 0] + rng.normal(size=600) > 0).astype(np.int64)
    w = rng.uniform(0.2, 3.0, 600) if weighted else None
    model = Logistic(5, l2=0.1)
    params = rng.normal(size=model.n_params)
    found = _merged(model, params, X, y, w).metrics(METRICS["classification"])
    proba, predicted = model.predict_proba(params, X), model.predict(params, X)
    _close(found["log_loss"], skm.log_loss(y, proba, sample_weight=w))
    _close(found["accuracy"], skm.accuracy_score(y, predicted, sample_weight=w))
    _close(found["roc_auc"], skm.roc_auc_score(y, proba[:, 1], sample_weight=w))
    _close(found["average_precision"], skm.average_precision_score(y, proba[:, 1], sample_weight=w))
    _close(found["precision"], skm.precision_score(y, predicted, sample_weight=w))
    _close(found["recall"], skm.recall_score(y, predicted, sample_weight=w))
    _close(found["f1"], skm.f1_score(y, predicted, sample_weight=w))
    _close(found["brier_score"], skm.brier_score_loss(y, proba[:, 1], sample_weight=w))
    np.testing.assert_allclose(found["confusion_matrix"], skm.confusion_matrix(y, predicted, sample_weight=w),
                               rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_multiclass_metrics_equal_scikit_learns_macro_and_one_vs_rest(weighted) -> None:
    X = rng.normal(size=(600, 4))
    y = np.argmax(X[:, :3] + rng.normal(size=(600, 3)), axis=1)
    w = rng.uniform(0.2, 3.0, 600) if weighted else None
    model = Softmax(4, 3, l2=0.1)
    params = rng.normal(size=model.n_params)
    found = _merged(model, params, X, y, w).metrics(METRICS["classification"])
    proba, predicted = model.predict_proba(params, X), model.predict(params, X)
    _close(found["log_loss"], skm.log_loss(y, proba, sample_weight=w))
    _close(found["roc_auc"], skm.roc_auc_score(y, proba, multi_class="ovr", average="macro", sample_weight=w))
    _close(found["average_precision"], skm.average_precision_score(label_binarize(y, classes=[0, 1, 2]), proba,
                                                                   average="macro", sample_weight=w))
    for name, score in (("precision", skm.precision_score), ("recall", skm.recall_score), ("f1", skm.f1_score)):
        _close(found[name], score(y, predicted, average="macro", sample_weight=w))
    _close(found["brier_score"], skm.brier_score_loss(y, proba, sample_weight=w))
    np.testing.assert_allclose(found["confusion_matrix"],
                               skm.confusion_matrix(y, predicted, labels=[0, 1, 2], sample_weight=w), rtol=1e-12)


def test_a_class_never_predicted_nor_present_is_left_out_of_the_macro_averages() -> None:
    """scikit-learn averages over the labels in y_true or y_pred; the confusion matrix keeps all K."""
    X = rng.normal(size=(600, 4))
    y = (X[:, 0] > 0).astype(np.int64)  # classes 0 and 1 of 3
    model = Softmax(4, 3)
    params = np.zeros(model.n_params)
    params[:8] = rng.normal(size=8)  # class 2's scores stay at zero: rarely the largest
    found = _merged(model, params, X, y, None).metrics(("precision", "recall", "f1", "confusion_matrix"))
    predicted = model.predict(params, X)
    for name, score in (("precision", skm.precision_score), ("recall", skm.recall_score), ("f1", skm.f1_score)):
        _close(found[name], score(y, predicted, average="macro", zero_division=0))
    assert np.shape(found["confusion_matrix"]) == (3, 3)


def test_the_macro_averages_take_a_class_present_only_in_rows_of_weight_zero() -> None:
    X = rng.normal(size=(300, 4))
    y = np.argmax(X[:, :3], axis=1)
    w = np.where(y == 2, 0.0, 1.0)  # class 2 weighs nothing, but is a label: scikit-learn averages over it
    model = Softmax(4, 3)
    params = rng.normal(size=model.n_params)
    found = _merged(model, params, X, y, w).metrics(("precision", "recall", "f1", "confusion_matrix"))
    predicted = model.predict(params, X)
    for name, score in (("precision", skm.precision_score), ("recall", skm.recall_score), ("f1", skm.f1_score)):
        _close(found[name], score(y, predicted, average="macro", sample_weight=w, zero_division=0))
    unweighted = _merged(model, params, X, y, None).metrics(("confusion_matrix",))["confusion_matrix"]
    assert unweighted == skm.confusion_matrix(y, predicted).tolist()  # counts: integers, as scikit-learn's
    assert all(type(v) is int for row in unweighted for v in row)


@pytest.mark.parametrize("model", [
    Logistic(4, l2=0.1, class_weight=[1.0, 3.0]), Softmax(4, 3, l2=0.1, l1=0.2), LeastSquares(4, l2=0.5),
    MLP(4, hidden=(5,), n_classes=3, l2=0.1), SparseAutoencoder(4, 3, beta=0.5),
], ids=["logistic", "softmax", "least_squares", "mlp", "autoencoder"])
def test_the_objective_an_evaluation_reports_is_the_training_objective(model) -> None:
    """Linear models score from one product X W (no gradient); the others from the training
    sums. Either way the objective is the one training minimises (the smooth part)."""
    X = rng.uniform(0.05, 0.95, size=(600, 4))
    y = np.argmax(X[:, :3], axis=1) if model.task == "classification" else X @ [1.0, -1.0, 2.0, 0.5]
    y = (y > 0).astype(np.int64) if model.n_params == 5 else y  # logistic: 0/1
    w = rng.uniform(0.2, 3.0, 600) if model.accepts_weights else None
    params = model.init_params(seed=3) + 0.1 * rng.normal(size=model.n_params)
    summary = _merged(model, params, X, y, w)
    _close(model.objective_value(params, summary.loss, summary.sums, summary.weight),
           model.objective(params, X, y, w)[0])
    scored = model.scored(params, X, y, w)
    if model.task == "classification":
        np.testing.assert_allclose(scored.outputs, model.predict_proba(params, X), rtol=1e-14)
        np.testing.assert_array_equal(scored.predicted, model.predict(params, X))
    else:
        np.testing.assert_allclose(scored.outputs, model.predict(params, X), rtol=1e-14)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_regression_metrics_equal_scikit_learns_far_from_zero(weighted) -> None:
    X = rng.normal(size=(600, 3))
    y = 1e6 + X @ [1.0, -2.0, 0.5] + rng.normal(size=600)  # a large mean: one-pass variances would lose digits
    w = rng.uniform(0.2, 3.0, 600) if weighted else None
    model = LeastSquares(3)
    params = np.array([1.1, -1.9, 0.4, 1e6])
    found = _merged(model, params, X, y, w).metrics(METRICS["regression"])
    predicted = model.predict(params, X)
    _close(found["rmse"], skm.root_mean_squared_error(y, predicted, sample_weight=w))
    _close(found["mae"], skm.mean_absolute_error(y, predicted, sample_weight=w))
    assert found["r2"] == pytest.approx(skm.r2_score(y, predicted, sample_weight=w), rel=1e-10)
    assert found["explained_variance"] == pytest.approx(
        skm.explained_variance_score(y, predicted, sample_weight=w), rel=1e-10)
    _close(found["mean_tweedie_deviance"], skm.mean_squared_error(y, predicted, sample_weight=w))  # power 0
    assert found["d2"] == pytest.approx(found["r2"], rel=1e-9)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("model", "labels"), [
    (Poisson(3), lambda mu: rng.poisson(mu).astype(float)),
    (Gamma(3), lambda mu: rng.gamma(2.0, mu / 2.0)),
    (Tweedie(3, power=1.5), lambda mu: rng.poisson(mu) * rng.gamma(2.0, 0.5, mu.size)),
    (Tweedie(3, power=3.0), lambda mu: rng.gamma(4.0, mu / 4.0)),
], ids=["poisson", "gamma", "tweedie-1.5", "tweedie-3"])
def test_a_glm_s_deviance_and_d2_equal_scikit_learns(weighted, model, labels) -> None:
    """The mean deviance of the model's family and D², summed shard by shard (the null
    deviance from sums of the labels): scikit-learn's ``mean_tweedie_deviance`` and
    ``d2_tweedie_score`` at the model's power (``mean_poisson_deviance``, ``mean_gamma_deviance``)."""
    X = rng.normal(size=(600, 3))
    params = np.array([0.3, -0.2, 0.1, 0.5])
    y = labels(np.exp(X @ params[:3] + params[3]))
    w = rng.uniform(0.2, 3.0, 600) if weighted else None
    found = _merged(model, params, X, y, w).metrics(METRICS["regression"])
    predicted = model.predict(params, X)
    deviance = skm.mean_tweedie_deviance(y, predicted, sample_weight=w, power=model.power)
    assert found["mean_tweedie_deviance"] == pytest.approx(deviance, rel=1e-10)
    if model.power in (1.0, 2.0):
        named = skm.mean_poisson_deviance if model.power == 1.0 else skm.mean_gamma_deviance
        assert found["mean_tweedie_deviance"] == pytest.approx(named(y, predicted, sample_weight=w), rel=1e-10)
    assert found["d2"] == pytest.approx(skm.d2_tweedie_score(y, predicted, sample_weight=w, power=model.power),
                                        rel=1e-9)


def test_reconstruction_error_is_the_mean_over_rows_and_features() -> None:
    X = rng.uniform(0.1, 0.9, size=(600, 12))
    model = SparseAutoencoder(12, 4)
    params = model.init_params(seed=1)
    found = _merged(model, params, X, np.zeros(600), None).metrics(("reconstruction_mse",))
    _close(found["reconstruction_mse"], skm.mean_squared_error(X, model.predict(params, X)))


def test_score_counts_merge_ties_across_shards_and_cost_a_sort() -> None:
    scores = np.array([0.9, 0.5, 0.5, 0.1, 0.5, 0.9])
    positive = np.array([True, False, True, False, True, False])
    a = ScoreCounts.of(scores[:3], positive[:3], np.ones(3))
    both = a.merge(ScoreCounts.of(scores[3:], positive[3:], np.ones(3)))
    np.testing.assert_array_equal(both.scores, [0.9, 0.5, 0.1])  # one threshold per distinct score
    np.testing.assert_array_equal(both.positive, [1, 2, 0])
    np.testing.assert_array_equal(both.negative, [1, 1, 1])
    assert both.roc_auc() == pytest.approx(skm.roc_auc_score(positive, scores), abs=1e-15)
    only_one_class = ScoreCounts.of(scores, np.ones(6, bool), np.ones(6))
    assert np.isnan(only_one_class.roc_auc())
    weights = np.array([0.0, 1.0, 2.0, 1.0, 1.0, 0.5])  # the top score's first row weighs nothing
    _close(ScoreCounts.of(scores, positive, weights).average_precision(),
           skm.average_precision_score(positive, scores, sample_weight=weights))
    top_weightless = np.array([0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    _close(ScoreCounts.of(scores, positive, top_weightless).average_precision(),
           skm.average_precision_score(positive, scores, sample_weight=top_weightless))
    empty = ScoreCounts.of(np.array([]), np.array([], bool), np.array([]))  # a shard of no rows
    assert both.merge(empty) is both and empty.merge(both) is both and empty.merge(empty).scores.size == 0
    assert len(a.merge(both).runs) == 3  # runs kept as merged, sorted together once when read


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_the_roc_and_precision_recall_curves_are_scikit_learns(weighted) -> None:
    scores = np.round(rng.random(200), 1)  # ties
    positive = rng.random(200) < scores
    w = rng.uniform(0.2, 3.0, 200) if weighted else None
    counts = merged_in_a_tree([ScoreCounts.of(s, p, np.ones(s.size) if v is None else v)
                               for s, p, v in zip(np.array_split(scores, 3), np.array_split(positive, 3),
                                                  np.array_split(w, 3) if weighted else [None] * 3)],
                              lambda a, b: a.merge(b))
    found = ranking_curves(counts)  # 11 thresholds: none thinned out
    fpr, tpr, _ = skm.roc_curve(positive, scores, sample_weight=w, drop_intermediate=False)
    np.testing.assert_allclose(found["roc"]["fpr"], fpr, rtol=1e-12)
    np.testing.assert_allclose(found["roc"]["tpr"], tpr, rtol=1e-12)
    precision, recall, thresholds = skm.precision_recall_curve(positive, scores, sample_weight=w)
    np.testing.assert_allclose(found["precision_recall"]["precision"], precision[:-1][::-1], rtol=1e-12)
    np.testing.assert_allclose(found["precision_recall"]["recall"], recall[:-1][::-1], rtol=1e-12)
    np.testing.assert_array_equal(found["thresholds"], thresholds[::-1])


def test_long_curves_are_thinned_keeping_their_ends() -> None:
    scores = rng.random(50_000)
    counts = ScoreCounts.of(scores, rng.random(50_000) < scores, np.ones(50_000))
    found = ranking_curves(counts)
    fpr, tpr = np.array(found["roc"]["fpr"]), np.array(found["roc"]["tpr"])
    assert len(fpr) <= CURVE_POINTS + 1 and fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert np.trapezoid(tpr, fpr) == pytest.approx(counts.roc_auc(), abs=1e-3)  # the thinned curve, drawn


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("parts", [1, 2, 3, 4, 9])
def test_ranked_parts_add_up_to_scikit_learns_figures_wherever_the_cuts_fall(weighted, parts) -> None:
    scores = np.round(rng.random(400), 1)  # 11 distinct scores, tied within and across shards and at the cuts
    positive = rng.random(400) < scores
    w = rng.uniform(0.2, 3.0, 400) if weighted else None
    counts = merged_in_a_tree([ScoreCounts.of(s, p, v) for s, p, v in
                               zip(np.array_split(scores, 5), np.array_split(positive, 5),
                                   np.array_split(w, 5) if weighted else [None] * 5)], lambda a, b: a.merge(b))
    assert counts.cuts(parts).size == min(parts - 1, 10) and np.isin(-counts.cuts(parts), scores).all()
    ranked = counts.ranked(parts)
    _close(ranked.roc_auc(), skm.roc_auc_score(positive, scores, sample_weight=w))
    _close(ranked.average_precision(), skm.average_precision_score(positive, scores, sample_weight=w))
    found = ranking_curves(ranked)
    fpr, tpr, _ = skm.roc_curve(positive, scores, sample_weight=w, drop_intermediate=False)
    np.testing.assert_allclose(found["roc"]["fpr"], fpr, rtol=1e-12)
    np.testing.assert_allclose(found["roc"]["tpr"], tpr, rtol=1e-12)
    precision, _, thresholds = skm.precision_recall_curve(positive, scores, sample_weight=w)
    np.testing.assert_allclose(found["precision_recall"]["precision"], precision[:-1][::-1], rtol=1e-12)
    np.testing.assert_array_equal(found["thresholds"], thresholds[::-1])


def test_thinned_curves_pick_the_same_thresholds_whatever_the_parts() -> None:
    scores = np.round(rng.random(60_000), 4)
    positive = rng.random(60_000) < scores
    counts = ScoreCounts.of(scores, positive)
    whole = ranking_curves(counts.ranked(1))
    assert CURVE_POINTS - 2 <= len(whole["thresholds"]) <= CURVE_POINTS  # thinned
    for parts in (2, 4, 7):
        assert ranking_curves(counts.ranked(parts)) == whole  # counts of rows: the same sums, exactly
        assert counts.ranked(parts).roc_auc() == counts.ranked(1).roc_auc()  # areas of counts: integers, exact
        _close(counts.ranked(parts).average_precision(), skm.average_precision_score(positive, scores))


def test_unit_weights_are_counted_as_no_weights() -> None:
    scores, positive = rng.random(100), rng.random(100) < 0.5
    assert all(side[1] is None for side in ScoreCounts.of(scores, positive, np.ones(100)).runs[0])
    assert all(side[1] is not None for side in ScoreCounts.of(scores, positive, np.full(100, 2.0)).runs[0])


def test_the_reliability_bins_are_scikit_learns_at_their_edges() -> None:
    from sklearn.calibration import calibration_curve

    from dasklbfgs.scoring.curves import RELIABILITY_BINS, Reliability

    edges = np.linspace(0.0, 1.0, RELIABILITY_BINS + 1)
    near = (edges[:, None] + np.arange(-20, 21) * np.spacing(1.0) / 2).ravel()
    probability = np.concatenate([np.clip(near, 0.0, 1.0), rng.random(1000), [5e-324]])
    hit = rng.random(probability.size) < 0.5
    prob_true, prob_pred = calibration_curve(hit, probability, n_bins=RELIABILITY_BINS)
    finished = Reliability.of(probability, hit).finished()
    np.testing.assert_allclose(finished["mean_predicted"], prob_pred, rtol=1e-12)
    np.testing.assert_allclose(finished["fraction_positive"], prob_true, rtol=1e-12)


def test_the_reliability_diagram_is_scikit_learns_calibration_curve() -> None:
    from sklearn.calibration import calibration_curve

    X = rng.normal(size=(600, 4))
    y = (X[:, 0] + rng.normal(size=600) > 0).astype(np.int64)
    model = Logistic(4)
    params = rng.normal(size=model.n_params)
    found = _merged(model, params, X, y, None).curves()["reliability"]
    prob_true, prob_pred = calibration_curve(y, model.predict_proba(params, X)[:, 1], n_bins=10)
    _close(np.array(found["fraction_positive"]), prob_true)
    np.testing.assert_allclose(found["mean_predicted"], prob_pred, rtol=1e-12)
    assert sum(found["weight"]) == 600


def test_residual_histograms_of_shards_merge_into_the_histogram_of_all() -> None:
    values = np.concatenate([rng.normal(size=500), 40 + rng.normal(size=300) * 0.01, [-3.0]])  # unequal ranges
    weight = rng.uniform(0.5, 2.0, values.size)
    parts = [Histogram.of(v, w) for v, w in zip(np.array_split(values, 4), np.array_split(weight, 4))]
    merged = merged_in_a_tree(parts, lambda a, b: a.merge(b)).finished()
    edges = np.array(merged["edges"])
    assert 1 <= len(merged["weight"]) <= 64 and edges[0] <= values.min() and edges[-1] > values.max()
    expected, _ = np.histogram(values, bins=edges, weights=weight)
    np.testing.assert_allclose(merged["weight"], expected, rtol=1e-12)


@pytest.mark.parametrize("parts", [
    [np.linspace(0, 1e-9, 50), 1e6 + np.linspace(0, 1e-3, 50)],  # tight ranges far apart
    [np.array([-1e308, 1e308]), np.array([0.0])],  # the ends of the floats
    [np.array([5e-324]), np.array([5e-324, 1e-320])],  # subnormals
    [np.array([3.0, 3.0]), np.array([-2.0])],  # a constant shard
], ids=["far apart", "largest", "subnormal", "constant"])
def test_residual_histograms_merge_whatever_their_ranges(parts) -> None:
    merged = merged_in_a_tree([Histogram.of(p, np.ones(p.size)) for p in parts], lambda a, b: a.merge(b)).finished()
    values = np.concatenate(parts)
    assert 1 <= len(merged["weight"]) <= 64 and sum(merged["weight"]) == values.size
    edges = np.array(merged["edges"])
    assert edges[0] <= values.min() and (edges[-1] > values.max() or not np.isfinite(edges[-1]))


def test_the_workers_compute_the_bits_this_process_does(client, tmp_path) -> None:
    X = rng.normal(size=(900, 6))
    y = np.argmax(X[:, :3], axis=1)
    w = rng.uniform(0.5, 2.0, 900)
    data = ShardedDataset.create(tmp_path / "d", X, y, sample_weight=w, shard_rows=100)
    model = Softmax(6, 3, l2=0.01)
    params = rng.normal(size=model.n_params)
    on_workers = evaluate(model, params, data, client=client)
    from dasklbfgs.scoring.evaluation import evaluated

    here = evaluated(model, params, data, METRICS["classification"], client=None)
    assert on_workers == here
    assert on_workers["n_samples"] == 900 and on_workers["objective"] == pytest.approx(
        model.objective(params, X, y, w)[0], rel=1e-12)
    _close(on_workers["roc_auc"], skm.roc_auc_score(y, model.predict_proba(params, X), multi_class="ovr",
                                                    sample_weight=w))
    with_curves = evaluate(model, params, data, client=client, curves=True)
    assert with_curves["curves"] == evaluated(model, params, data, METRICS["classification"], None,
                                              curves=True)["curves"]
    assert len(with_curves["curves"]["classes"]) == 3 and with_curves["curves"]["reliability"]["of"] == "top_class"
    picked = evaluate(model, params, data, client=client, metrics=["roc_auc", "log_loss"])
    assert set(picked) == {"objective", "n_samples", "roc_auc", "log_loss"} and picked["roc_auc"] == here["roc_auc"]


class ScoringFails(Logistic):
    """A model whose evaluation (not its training) raises."""

    def scored(self, params, X, y, w=None):
        raise RuntimeError("no scores today")


def test_a_run_whose_scoring_fails_keeps_its_result_and_says_so(client, tmp_path) -> None:
    from dasklbfgs import minimize

    X = rng.normal(size=(400, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=100)
    with pytest.warns(MetricsWarning, match=r"scoring the run's result failed \(RuntimeError: no scores today\); "
                                            r"the result is kept, without scores"):
        result = minimize(ScoringFails(3, l2=0.1), data, "sandblaster", {"maxiter": 5}, client=client, score=True)
    assert result.scores == {} and result.score_curves == {}
    reference = minimize(Logistic(3, l2=0.1), data, "sandblaster", {"maxiter": 5}, client=client)
    np.testing.assert_array_equal(result.x, reference.x)  # the fit, whole


def test_a_metric_of_another_task_is_refused_naming_the_task_s_metrics(tmp_path) -> None:
    data = ShardedDataset.create(tmp_path / "d", rng.normal(size=(20, 2)), rng.normal(size=20), shard_rows=10)
    with pytest.raises(ConfigurationError, match=r"metrics \['roc_auc'\] are not metrics of a regression model; "
                                                 r"its metrics are \['rmse', 'mae', 'r2', 'explained_variance', "
                                                 r"'mean_tweedie_deviance', 'd2'\]"):
        evaluate(LeastSquares(2), np.zeros(3), data, metrics=["roc_auc"])


def test_the_command_line_scores_a_saved_model_on_the_running_cluster(client, tmp_path, capsys) -> None:
    import json

    from dasklbfgs.cli.main import main
    from dasklbfgs.models.persist import save_params

    X = rng.normal(size=(500, 4))
    y = (X[:, 1] > 0).astype(np.int64)
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=128)
    model = Logistic(4)
    params = rng.normal(size=model.n_params)
    save_params(tmp_path / "m.npz", model, params)
    where = ["--params", str(tmp_path / "m.npz"), "--scheduler", client.scheduler.address]
    assert main(["evaluate", *where, "--data", str(data.path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    _close(found["roc_auc"], skm.roc_auc_score(y, model.predict_proba(params, X)[:, 1]))
    assert found["n_samples"] == 500 and np.shape(found["confusion_matrix"]) == (2, 2)
    assert main(["evaluate", *where, "--data", str(data.path), "--metrics", "log_loss,f1"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in text] == ["objective", "n_samples", "log_loss", "f1"]
    # a dataset of other features, a metric of another task: named, and nothing scored
    other = ShardedDataset.create(tmp_path / "o", rng.normal(size=(50, 7)), np.zeros(50), shard_rows=25)
    assert main(["evaluate", *where, "--data", str(other.path)]) == 2
    assert "expects 4 features but the dataset at" in capsys.readouterr().err
    assert main(["evaluate", *where, "--data", str(data.path), "--metrics", "rmse"]) == 2
    assert "metrics ['rmse'] are not metrics of a classification model" in capsys.readouterr().err


def test_the_command_line_s_json_has_null_for_a_metric_the_data_leaves_undefined(client, tmp_path, capsys) -> None:
    """One class only: no ROC AUC (scikit-learn's is NaN too); the JSON says null, never NaN."""
    import json

    from sklearn.exceptions import UndefinedMetricWarning

    from dasklbfgs.cli.main import main
    from dasklbfgs.models.persist import save_params

    X = rng.normal(size=(60, 3))
    data = ShardedDataset.create(tmp_path / "d", X, np.zeros(60, dtype=np.int64), shard_rows=20)
    save_params(tmp_path / "m.npz", Logistic(3), rng.normal(size=4))
    with pytest.warns(UndefinedMetricWarning, match="Only one class"):
        assert np.isnan(skm.roc_auc_score(np.zeros(60), X[:, 0]))
    assert main(["evaluate", "--params", str(tmp_path / "m.npz"), "--data", str(data.path), "--json",
                 "--scheduler", client.scheduler.address]) == 0

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    found = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert found["roc_auc"] is None and found["n_samples"] == 60 and isinstance(found["accuracy"], float)


def test_json_for_other_programs_has_plain_numbers_and_null_for_the_undefined() -> None:
    import json

    from dasklbfgs.cli.format import json_text

    value = {"a": np.float64("nan"), "b": [np.int64(3), float("inf"), np.array([1.5, -np.inf])], "c": np.bool_(True),
             "d": "text", "e": None}
    assert json.loads(json_text(value)) == {"a": None, "b": [3, None, [1.5, None]], "c": True, "d": "text",
                                            "e": None}


def test_runs_with_score_report_every_metric_of_their_data(client, tmp_path) -> None:
    """Sandblaster scores sparse shards it holds compact, the replica methods from the store;
    both as ``evaluate`` gives them; ``score`` is refused unless a bool."""
    import scipy.sparse as sp

    from dasklbfgs import downpour_sgd, minimize, sandblaster_lbfgs

    X = sp.random(600, 30, density=0.2, format="csr", random_state=4)
    y = (X @ rng.normal(size=30) > 0).astype(np.int64)
    train = ShardedDataset.create(tmp_path / "train", X, y, shard_rows=150)
    test = ShardedDataset.create(tmp_path / "test", X[:200], y[:200], shard_rows=150)
    model = Logistic(30, l2=1e-2)
    fitted = sandblaster_lbfgs(model, train, client=client, eval_data=test, score=True, maxiter=30)
    assert fitted.scores["train"] == evaluate(model, fitted.x, train, client=client)
    assert fitted.scores["test"] == evaluate(model, fitted.x, test, client=client)
    _close(fitted.scores["train"]["roc_auc"], skm.roc_auc_score(y, model.predict_proba(fitted.x, X)[:, 1]))
    replicas = downpour_sgd(model, train, client=client, score=True, epochs=1, n_replicas=2, batch_size=50)
    assert replicas.scores["train"] == evaluate(model, replicas.x, train, client=client)
    assert "test" not in replicas.scores
    with pytest.raises(ConfigurationError, match="score must be True or False, got 'yes'"):
        minimize(model, train, client=client, score="yes")


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` starting one byte into its buffer, as arrays that arrive in a message can."""
    buffer = bytearray(a.nbytes + 1)
    copy = np.frombuffer(memoryview(buffer)[1:], dtype=a.dtype).reshape(a.shape)
    copy[...] = a
    return copy


def test_rows_and_parameters_that_came_unaligned_give_the_same_bits() -> None:
    from dasklbfgs.scoring.evaluation import _rows_summary

    X = rng.normal(size=(300, 5))
    y = (X[:, 0] > 0).astype(np.int64)
    model = Logistic(5, l2=0.1)
    params = rng.normal(size=model.n_params)
    assert not _unaligned(X).flags.aligned and not _unaligned(params).flags.aligned
    names = METRICS["classification"]
    here = _rows_summary(model, params, Rows(X, y), names, True)
    arrived = _rows_summary(model, _unaligned(params), Rows(_unaligned(X), _unaligned(y)), names, True)
    assert arrived.metrics(names) == here.metrics(names) and arrived.curves() == here.curves()
