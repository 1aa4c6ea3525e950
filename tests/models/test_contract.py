"""The model contract: every shipped model and TorchModel pass the conformance checks; the
guide's models of the contract (numpy, JAX) train with every solver to scipy's optimum."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

from dasklbfgs import ShardedDataset, evaluate, minimize
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import (
    MLP,
    EmbeddingLM,
    Gamma,
    Huber,
    LeastSquares,
    LocalAutoencoder,
    Logistic,
    ModelContract,
    NegativeBinomial,
    Poisson,
    Softmax,
    SparseAutoencoder,
    Tweedie,
)
from dasklbfgs.models.contract import CONTRACT_MEMBERS
from dasklbfgs.models.registry import CLASSES
from dasklbfgs.testing import check_model
from tests._torch import needs_torch, torch_classifier

cloudpickle.register_pickle_by_value(sys.modules[__name__])
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"


def guide_example(marker: str) -> dict:
    """The names the guide's Python block after ``<!-- marker -->`` defines (the guide's
    own code, run as a user copies it)."""
    block = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert block, f"the guide has no {marker} block"
    names: dict = {"__name__": __name__}
    exec(compile(block.group(1), f"{GUIDE}:{marker}", "exec"), names)
    return names


def _rows(n=60, features=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)), rng


def _shipped():
    """Every shipped model, with rows of its kind: (model, X, y)."""
    X, rng = _rows()
    binary, counts = (X[:, 0] > 0).astype(float), rng.poisson(2.0, 60).astype(float)
    amounts, classes = rng.gamma(2.0, 1.0, 60), rng.integers(0, 3, 60).astype(float)
    image = rng.uniform(size=(60, 36))
    words = rng.integers(0, 12, size=(60, 2)).astype(float)
    return {
        "least_squares": (LeastSquares(4, l2=0.1), X, X @ [1.0, -2.0, 0.5, 0.0]),
        "logistic": (Logistic(4, l2=0.1), X, binary),
        "softmax": (Softmax(4, 3, l2=0.1), X, classes),
        "poisson": (Poisson(4, l2=0.1), X, counts),
        "gamma": (Gamma(4, l2=0.1), X, amounts),
        "tweedie": (Tweedie(4, power=1.5, l2=0.1), X, amounts),
        "negative_binomial": (NegativeBinomial(4, l2=0.1), X, counts),
        "huber": (Huber(4, l2=0.1), X, X @ [1.0, -2.0, 0.5, 0.0] + rng.standard_t(2, 60)),
        "mlp": (MLP(4, (5,), 3, activation="tanh", l2=0.1), X, classes),
        "sparse_autoencoder": (SparseAutoencoder(36, 5), image, np.zeros(60)),
        "local_autoencoder": (LocalAutoencoder(6, window=3, stride=3, maps=2), image, np.zeros(60)),
        "embedding_lm": (EmbeddingLM(12, embed_dim=3, context=2, hidden=4), words,
                         rng.integers(0, 12, 60).astype(float)),
    }


def test_every_shipped_model_is_checked() -> None:
    assert set(_shipped()) == set(CLASSES)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_shipped_model_meets_the_contract(name) -> None:
    model, X, y = _shipped()[name]
    assert isinstance(model, ModelContract)
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(y)) if model.accepts_weights else None
    assert check_model(model, X, y, weights) == ["contract", "split_sums", "gradient", "pickle", "predict", "refuses"]


@needs_torch
def test_a_torch_module_meets_the_contract() -> None:
    model = torch_classifier(4, 3, l2=0.1)
    X, rng = _rows()
    assert check_model(model, X.astype(np.float32), rng.integers(0, 3, 60), rng.uniform(0.5, 2, 60))[-1] == "refuses"


def test_the_guides_numpy_model_trains_with_every_solver_to_scipys_optimum(client, tmp_path) -> None:
    from scipy.optimize import minimize as scipy_minimize

    MyLogistic = guide_example("contract-example")["MyLogistic"]
    X, rng = _rows(3000, 8, seed=3)
    y = (X @ rng.normal(size=8) + rng.logistic(size=3000) > 0).astype(float)
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=750)
    model = MyLogistic(8)
    assert check_model(model, X, y)[-1] == "refuses"

    def objective(p):
        loss, grad = model.loss_grad_sum(p, X, y)
        penalty, penalty_grad = model.penalty(p)
        return loss / len(y) + penalty, grad / len(y) + penalty_grad

    reference = scipy_minimize(objective, np.zeros(9), jac=True, method="L-BFGS-B",
                               options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 1000}).x
    ours = minimize(model, data, client=client, gtol=1e-9, ftol=1e-15)
    assert ours.success
    np.testing.assert_allclose(ours.x, reference, atol=1e-6)
    assert evaluate(model, ours.x, data, client=client)["accuracy"] == pytest.approx(
        np.mean(model.predict(ours.x, X) == y))
    for solver in ("downpour", "sync", "easgd", "gossip", "neighbours"):
        sgd = minimize(model, data, solver=solver, client=client, epochs=3, batch_size=100, learning_rate=0.5)
        # 3 epochs of SGD close most of the gap between the start's objective and the optimum's
        # (measured: Downpour 99%, the peers 88-95%)
        start, best = objective(np.zeros(9))[0], objective(reference)[0]
        assert objective(sgd.x)[0] - best < 0.2 * (start - best), solver


def test_the_guides_jax_model_meets_the_contract_and_trains(client, tmp_path) -> None:
    pytest.importorskip("jax", reason="jax is not installed (the guide's JAX example; CI need not install it)")
    model = guide_example("jax-example")["JaxRegression"]()
    X, rng = _rows(400, 4, seed=5)
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=400)
    assert check_model(model, X, y, rng.uniform(0.5, 2, 400))[-1] == "refuses"
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=100)
    result = minimize(model, data, client=client, x0=model.init_params(0), maxiter=200)
    assert evaluate(model, result.x, data, client=client)["r2"] > 0.9


class _Broken:
    """The guide's logistic model with one thing wrong (set per test)."""

    task, n_features, n_params = "regression", 3, 3

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def init_params(self, seed=None):
        return np.full(3, 0.1)

    def loss_grad_sum(self, params, X, y):
        r = X @ params - y
        loss, grad = 0.5 * float(r @ r), X.T @ r
        if self.fault == "mean":  # a mean, not a sum: parts do not add up
            return loss / len(y), grad / len(y)
        return loss, (2 * grad if self.fault == "gradient" else grad)

    def penalty(self, params):
        return 0.0, np.zeros(3)

    def predict(self, params, X):
        return X @ params


@pytest.mark.parametrize("fault, message", [
    ("mean", r"the loss sums over three parts of the rows add up to .*, the whole's is"),
    ("gradient", r"the gradient's coordinate \d is .*, central differences give"),
])
def test_the_checks_catch_a_model_that_breaks_the_contract(fault, message) -> None:
    X, rng = _rows(30, 3)
    with pytest.raises(AssertionError, match=message):
        check_model(_Broken(fault), X, rng.normal(size=30))


def test_an_object_that_is_not_a_model_is_refused_naming_what_it_lacks(client, tmp_path) -> None:
    class HalfAModel:
        task, n_features, n_params = "regression", 3, 3

        def predict(self, params, X):
            return X @ params

    X, rng = _rows(30, 3)
    data = ShardedDataset.create(tmp_path / "d", X, rng.normal(size=30), shard_rows=10)
    with pytest.raises(ConfigurationError, match=r"HalfAModel is not a model: it lacks init_params, loss_grad_sum, "
                                                 r"penalty of the model contract"):
        minimize(HalfAModel(), data, client=client)
    broken = _Broken("none")
    broken.task = "ranking"
    with pytest.raises(ConfigurationError, match=r"_Broken.task must be one of \('classification', 'regression', "
                                                 r"'reconstruction'\), got 'ranking'"):
        evaluate(broken, np.zeros(3), data)
    weighted = ShardedDataset.create(tmp_path / "w", X, rng.normal(size=30), sample_weight=np.ones(30), shard_rows=10)
    with pytest.raises(ModelDataMismatchError, match=r"does not take sample weights"):
        minimize(_Broken("none"), weighted, client=client)
    assert list(CONTRACT_MEMBERS) == ["task", "n_features", "n_params", "init_params", "loss_grad_sum", "penalty",
                                      "predict"]
