"""Sample and class weights through every solver: the weighted mean objective, checked
against scikit-learn's weighted fits, row repetition and hand-run gradient descent."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.utils.class_weight import compute_class_weight

from dasklbfgs import ShardedDataset
from dasklbfgs.downpour import downpour_sgd, sync_sgd
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import Logistic, Softmax, SparseAutoencoder, model_for_dataset
from dasklbfgs.sandblaster import sandblaster_lbfgs
from dasklbfgs.scoring import evaluate

TIGHT = dict(gtol=1e-10, ftol=1e-15, maxiter=300)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    n, d = 1200, 5
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.8 * rng.normal(size=n) > 0.3).astype(np.float64)
    w = rng.integers(0, 4, n).astype(np.float64)  # integers: a weight is a repetition count
    return X, y, w


@pytest.fixture(scope="module")
def weighted(problem, tmp_path_factory):
    X, y, w = problem
    return ShardedDataset.create(tmp_path_factory.mktemp("weighted") / "d", X, y, sample_weight=w, shard_rows=300)


@pytest.mark.parametrize("state", ["local", "sharded"])
@pytest.mark.parametrize("sparse", [False, True])
def test_sandblaster_matches_scikit_learn_s_weighted_fit(client, problem, tmp_path, state, sparse) -> None:
    X, y, w = problem
    data = ShardedDataset.create(tmp_path / "d", sp.csr_array(X) if sparse else X, y, sample_weight=w,
                                 shard_rows=300)
    assert data.total_weight == w.sum()
    reference = SkLogisticRegression(C=0.5, tol=1e-12, max_iter=2000).fit(X, y, sample_weight=w)
    # scikit-learn's C * sum_i w_i loss_i + ||W||^2 / 2 is our weighted mean plus l2 = 1 / (C sum w)
    result = sandblaster_lbfgs(Logistic(5, l2=1 / (0.5 * w.sum())), data, client=client, state=state, **TIGHT)
    assert result.success, result.message
    # Ours and scikit-learn's (L-BFGS-B) take the same steps to rounding, but a run may stop a step
    # early where the predicted decrease g.H^-1 g (~ |x - x*|_H^2) is within ftol max(|f|, 1) = 1e-15
    # (the sparse rows do on OpenBLAS's Haswell kernels, 5e-8 off): x is then within
    # sqrt(ftol / lambda_min) = sqrt(1e-15 / 6.2e-3) = 4e-7 of the optimum.
    np.testing.assert_allclose(result.x[:5], reference.coef_[0], atol=4e-7)
    np.testing.assert_allclose(result.x[5], reference.intercept_[0], atol=4e-7)


def test_integer_weights_are_repeated_rows_and_class_weights_multiply_them(client, problem, weighted,
                                                                           tmp_path) -> None:
    X, y, w = problem
    repeat = w.astype(int)
    repeated = ShardedDataset.create(tmp_path / "r", np.repeat(X, repeat, axis=0), np.repeat(y, repeat),
                                     shard_rows=500)
    model = Logistic(5, l2=1e-3)
    on_weights = sandblaster_lbfgs(model, weighted, client=client, **TIGHT)
    on_rows = sandblaster_lbfgs(model, repeated, client=client, **TIGHT)
    np.testing.assert_allclose(on_weights.x, on_rows.x, rtol=1e-7, atol=1e-9)
    # class weights scale each row's weight by its label's: scikit-learn's class_weight
    balanced = Logistic(5, l2=1 / w.sum(), class_weight=[3.0, 0.5])
    result = sandblaster_lbfgs(balanced, weighted, client=client, **TIGHT)
    reference = SkLogisticRegression(C=1.0, tol=1e-12, max_iter=2000, class_weight={0: 3.0, 1: 0.5})
    reference.fit(X, y, sample_weight=w)
    # as above; lambda_min = 2.5e-3 with these class weights: sqrt(1e-15 / 2.5e-3) = 6.3e-7
    np.testing.assert_allclose(result.x[:5], reference.coef_[0], atol=6.5e-7)
    # held-out figures are weighted like scikit-learn's scores
    metrics = evaluate(model, on_weights.x, weighted)
    predicted = model.predict(on_weights.x, X)
    assert metrics["accuracy"] == pytest.approx(accuracy_score(y, predicted, sample_weight=w), rel=1e-12)
    assert metrics["objective"] == pytest.approx(model.objective(on_weights.x, X, y, w)[0], rel=1e-12)


def _weighted_gradient_descent(model, X, y, w, rate, steps):
    x = np.zeros(model.n_params)
    for _ in range(steps):
        x = x - rate * model.objective(x, X, y, w)[1]
    return x


def test_replica_methods_descend_the_weighted_objective(client, problem, weighted) -> None:
    """With one full batch per epoch, a replica's step is a gradient step of the weighted
    mean objective: Downpour with one replica and sync SGD with two equal hand-run descent."""
    X, y, w = problem
    model = Softmax(5, 2, l2=1e-2)
    expected = _weighted_gradient_descent(model, X, y, w, 0.5, 6)
    downpour = downpour_sgd(model, weighted, client=client, n_replicas=1, batch_size=X.shape[0], epochs=6,
                            optimizer="sgd", learning_rate=0.5, local_learning_rate=0.0)
    np.testing.assert_allclose(downpour.x, expected, rtol=1e-12, atol=1e-14)
    sync = sync_sgd(model, weighted, client=client, n_replicas=2, batch_size=X.shape[0] // 2, epochs=6,
                    optimizer="sgd", learning_rate=0.5)
    np.testing.assert_allclose(sync.x, expected, rtol=1e-10, atol=1e-12)


def test_balanced_class_weights_are_scikit_learn_s_from_the_recorded_totals(problem, weighted, tmp_path) -> None:
    X, y, w = problem
    model = model_for_dataset("logistic", weighted, class_weight="balanced")
    expected = compute_class_weight("balanced", classes=np.array([0.0, 1.0]), y=y, sample_weight=w)
    np.testing.assert_allclose(model.class_weight, expected, rtol=1e-12)
    unweighted = ShardedDataset.create(tmp_path / "u", X, y, shard_rows=300)
    np.testing.assert_allclose(model_for_dataset("softmax", unweighted, class_weight="balanced").class_weight,
                               compute_class_weight("balanced", classes=np.array([0.0, 1.0]), y=y), rtol=1e-12)
    with pytest.raises(ConfigurationError, match=r"class_weight applies to the classifiers logistic and softmax, "
                                                 r"not 'least_squares'"):
        model_for_dataset("least_squares", weighted, class_weight="balanced")
    regression = ShardedDataset.create(tmp_path / "r", X, X[:, 0] * 0.37, shard_rows=300)
    with pytest.raises(ConfigurationError, match=r"class_weight='balanced' needs the class totals, and the dataset "
                                                 r"at '.*' recorded none"):
        model_for_dataset("logistic", regression, class_weight="balanced")
    one_class = ShardedDataset.create(tmp_path / "o", X, np.zeros(len(y)), shard_rows=300, attrs={"n_classes": 3})
    with pytest.raises(ConfigurationError, match=r"class\(es\) \[1, 2\] have no rows"):
        model_for_dataset("softmax", one_class, class_weight="balanced")


def test_a_model_without_weights_refuses_weighted_data(weighted) -> None:
    with pytest.raises(ModelDataMismatchError, match=r"SparseAutoencoder does not take sample weights, but the "
                                                     r"dataset at '.*' has them"):
        SparseAutoencoder(5, n_hidden=3).check_data(weighted)
