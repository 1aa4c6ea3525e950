"""Neural objectives: gradients against central differences, exact partial sums, layouts."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import MLP, EmbeddingLM, SparseAutoencoder, model_for_dataset
from dasklbfgs.models.persist import load_params, save_params
from dasklbfgs.scoring import evaluate

rng = np.random.default_rng(0)


def central_differences(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def jittered(model, seed: int = 1) -> np.ndarray:
    """Away from ReLU kinks at zero biases: a random point near the initialisation."""
    return model.init_params(seed) + 0.1 * np.random.default_rng(seed).normal(size=model.n_params)


def mlp_problem(activation: str):
    X = rng.normal(size=(400, 7))
    y = rng.integers(0, 4, 400)
    return MLP(7, (5, 6), 4, activation=activation, l2=0.1), X, y


def autoencoder_problem():
    X = rng.uniform(0.1, 0.9, size=(300, 9))
    return SparseAutoencoder(9, 4, sparsity=0.1, beta=3.0, l2=0.01), X, np.zeros(300)


def lm_problem():
    X = rng.integers(0, 8, size=(300, 2)).astype(np.int32)  # rows 8..11 of the table unused
    y = rng.integers(0, 12, 300)
    return EmbeddingLM(12, 3, 2, 5, l2=0.1), X, y


PROBLEMS = {
    "mlp-sigmoid": lambda: mlp_problem("sigmoid"),
    "mlp-tanh": lambda: mlp_problem("tanh"),
    "mlp-relu": lambda: mlp_problem("relu"),
    "autoencoder": autoencoder_problem,
    "embedding_lm": lm_problem,
}


@pytest.mark.parametrize("name", PROBLEMS)
def test_gradient_matches_central_differences(name: str) -> None:
    model, X, y = PROBLEMS[name]()
    params = jittered(model)
    f, g = model.objective(params, X, y)
    numeric = central_differences(lambda p: model.objective(p, X, y)[0], params)
    assert np.isfinite(f)
    np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", PROBLEMS)
def test_partial_sums_add_up_to_the_full_batch_objective(name: str) -> None:
    model, X, y = PROBLEMS[name]()
    params = jittered(model)
    full = model.objective(params, X, y)
    loss, sums = 0.0, np.zeros(model.n_sums)
    for part in np.array_split(np.arange(X.shape[0]), 7):
        part_loss, part_sums = model.loss_grad_sum(params, X[part], y[part])
        loss += part_loss
        sums += part_sums
    f, g = model.objective_from_sums(params, loss, sums, X.shape[0])
    assert f == pytest.approx(full[0], rel=1e-13)
    np.testing.assert_allclose(g, full[1], rtol=1e-12, atol=1e-15)


def test_autoencoder_sparsity_term_is_not_a_mean_of_per_batch_terms() -> None:
    """The reason for the extra sums: averaging per-portion objectives would be wrong."""
    model, X, y = autoencoder_problem()
    params = jittered(model)
    halves = [model.objective(params, X[s], y[s])[0] for s in (slice(0, 150), slice(150, 300))]
    assert abs(np.mean(halves) - model.objective(params, X, y)[0]) > 1e-6
    assert model.n_sums == model.n_params + 4 + 9 * 4 + 4


def test_autoencoder_kl_penalty_matches_the_formula() -> None:
    model, X, y = autoencoder_problem()
    params = jittered(model)
    hidden = model.transform(params, X)
    rho, rho_hat = 0.1, hidden.mean(axis=0)
    kl = np.sum(rho * np.log(rho / rho_hat) + (1 - rho) * np.log((1 - rho) / (1 - rho_hat)))
    recon = 0.5 * np.sum((model.predict(params, X) - X) ** 2) / X.shape[0]
    W = model.layout.views(params)
    decay = 0.5 * 0.01 * (np.sum(W["W1"] ** 2) + np.sum(W["W2"] ** 2))
    assert model.objective(params, X, y)[0] == pytest.approx(recon + decay + 3.0 * kl, rel=1e-12)


def test_embedding_gradient_is_zero_outside_the_touched_rows() -> None:
    model, X, y = lm_problem()
    _, g = model.objective(jittered(model), X, y)
    table = g[: 12 * 3].reshape(12, 3)
    touched = model.touched_rows(X)
    np.testing.assert_array_equal(touched, np.arange(8))
    assert np.all(table[8:] == 0) and np.all(np.abs(table[:8]).sum(axis=1) > 0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_mlp_matches_scikit_learn_forward_pass() -> None:
    """Same weights in scikit-learn's MLPClassifier give the same probabilities."""
    from sklearn.neural_network import MLPClassifier

    X = rng.normal(size=(50, 5))
    y = np.arange(50) % 3
    model = MLP(5, (4,), 3, activation="tanh")
    params = jittered(model)
    reference = MLPClassifier(hidden_layer_sizes=(4,), activation="tanh", max_iter=1).fit(X, y)
    views = model.layout.views(params)
    reference.coefs_ = [views["W0"].copy(), views["W1"].copy()]
    reference.intercepts_ = [views["b0"].copy(), views["b1"].copy()]
    np.testing.assert_allclose(model.predict_proba(params, X), reference.predict_proba(X), rtol=1e-12)


def test_float32_data_gives_float64_accurate_sums() -> None:
    model, X, y = mlp_problem("sigmoid")
    params = jittered(model)
    f64, g64 = model.objective(params, X, y)
    f32, g32 = model.objective(params, X.astype(np.float32), y)
    assert f32 == pytest.approx(f64, rel=1e-5)
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-5)


def test_initialisation_is_seeded_and_not_symmetric() -> None:
    model = MLP(10, (8, 8), 3)
    a, b = model.init_params(3), model.init_params(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, model.init_params(4))
    np.testing.assert_array_equal(model.init_params(None), model.init_params(0))
    W0 = model.layout.views(a)["W0"]
    assert len({tuple(col) for col in W0.T}) == 8  # hidden units start different
    relu = MLP(100, (50,), 3, activation="relu").init_params(0)[:5000]
    assert relu.std() == pytest.approx(np.sqrt(2 / 100), rel=0.05)  # He


@pytest.mark.parametrize("model", [
    MLP(6, (5, 3), 4, activation="relu", l2=0.5),
    SparseAutoencoder(6, 3, sparsity=0.2, beta=1.0),
    EmbeddingLM(20, 4, 3, 7),
])
def test_save_and_load_round_trip(tmp_path, model) -> None:
    params = model.init_params(2)
    path = save_params(tmp_path / "m.npz", model, params)
    loaded, loaded_params, _ = load_params(path)
    assert loaded == model and repr(loaded) == repr(model)
    np.testing.assert_array_equal(loaded_params, params)


def test_model_for_dataset_sizes_neural_models(tmp_path) -> None:
    X = rng.normal(size=(60, 5))
    data = ShardedDataset.create(tmp_path / "d", X, np.arange(60) % 3, shard_rows=30)
    mlp = model_for_dataset("mlp", data, l2=0.1, hidden=(8,), activation="relu")
    assert (mlp.n_features, mlp.hidden, mlp.n_classes, mlp.activation) == (5, (8,), 3, "relu")
    assert model_for_dataset("sparse_autoencoder", data, n_hidden=3).n_hidden == 3
    ids = ShardedDataset.create(tmp_path / "ids", rng.integers(0, 9, size=(60, 2)).astype(np.int32),
                                np.arange(60) % 9, shard_rows=30, attrs={"vocab_size": 9})
    lm = model_for_dataset("embedding_lm", ids, embed_dim=4)
    assert (lm.vocab_size, lm.context, lm.embed_dim) == (9, 2, 4)
    with pytest.raises(ConfigurationError, match=r"model 'mlp' does not take option\(s\) \['n_hidden'\]"):
        model_for_dataset("mlp", data, n_hidden=3)
    with pytest.raises(ConfigurationError, match="fit_intercept=False applies to linear models"):
        model_for_dataset("mlp", data, fit_intercept=False)


def test_held_out_metrics_for_each_task(tmp_path) -> None:
    X = rng.uniform(0.1, 0.9, size=(80, 6))
    data = ShardedDataset.create(tmp_path / "p", X, np.zeros(80, dtype=np.int64), shard_rows=30)
    model = SparseAutoencoder(6, 3)
    params = model.init_params(0)
    metrics = evaluate(model, params, data)
    assert metrics["objective"] == pytest.approx(model.objective(params, X, np.zeros(80))[0], rel=1e-12)
    assert metrics["reconstruction_mse"] == pytest.approx(np.mean((model.predict(params, X) - X) ** 2))
    mlp = MLP(6, (4,), 2)
    labels = ShardedDataset.create(tmp_path / "l", X, np.arange(80) % 2, shard_rows=30)
    p = mlp.init_params(0)
    expected = np.mean(mlp.predict(p, X) == np.arange(80) % 2)
    assert evaluate(mlp, p, labels)["accuracy"] == pytest.approx(expected)


def test_bad_configurations_and_data_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="activation must be one of .* got 'softplus'"):
        MLP(4, (3,), 2, activation="softplus")
    with pytest.raises(ConfigurationError, match=r"hidden\[1\] must be"):
        MLP(4, (3, 0), 2)
    with pytest.raises(ConfigurationError, match="hidden must be a sequence of layer widths, got '64'"):
        MLP(4, "64", 2)
    with pytest.raises(ConfigurationError, match=r"sparsity must be in \(0, 1\), got 1.5"):
        SparseAutoencoder(4, 2, sparsity=1.5)
    with pytest.raises(ConfigurationError, match="beta must be a non-negative finite number, got -1"):
        SparseAutoencoder(4, 2, beta=-1)
    with pytest.raises(ConfigurationError, match="vocab_size must be"):
        EmbeddingLM(1)
    lm = EmbeddingLM(10, 2, 2, 3)
    with pytest.raises(ModelDataMismatchError, match=r"vocab_size=10 got word ids in \[0, 12\]"):
        lm.objective(lm.init_params(0), np.array([[0, 12]]), np.array([1]))
    with pytest.raises(ModelDataMismatchError, match="integer word ids"):
        lm.objective(lm.init_params(0), np.array([[0.5, 1.0]]), np.array([1]))
    ids = ShardedDataset.create(tmp_path / "ids", np.zeros((4, 2), dtype=np.int32), np.arange(4),
                                shard_rows=4, attrs={"vocab_size": 50})
    with pytest.raises(ModelDataMismatchError, match="has a vocabulary of 50 words"):
        lm.check_data(ids)
    data = ShardedDataset.create(tmp_path / "d", np.zeros((4, 3)), np.array([0, 1, 2, 5]), shard_rows=4)
    with pytest.raises(ModelDataMismatchError, match=r"MLP needs integer labels in 0..2"):
        MLP(3, (2,), 3).check_data(data)
