"""The MLP partitioned by units equals the unpartitioned model."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.models import MLP
from dasklbfgs.parallel import partition, run_in_process
from dasklbfgs.parallel.base import even_bounds

rng = np.random.default_rng(3)
X = rng.normal(size=(120, 6))
y = rng.integers(0, 5, 120)
w = rng.uniform(0.2, 3.0, 120)


def params_of(model: MLP) -> np.ndarray:
    return model.init_params(1) + 0.1 * np.random.default_rng(1).normal(size=model.n_params)


def relative(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("activation", ["sigmoid", "relu", "tanh"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("weighted", [False, True])
def test_partitioned_loss_and_gradient_equal_the_model(activation: str, k: int, weighted: bool) -> None:
    model = MLP(6, (7, 4), 5, activation=activation, l2=0.3)
    params = params_of(model)
    weights = w if weighted else None
    loss, grad = model.loss_grad_sum(params, X, y, weights)
    plan = partition(model, k)
    split_loss, split_grad = plan.loss_grad_sum(params, X, y, weights)
    assert abs(split_loss - loss) <= 1e-12 * abs(loss)
    assert relative(split_grad, grad) <= 1e-12
    # every partition holds the same loss, bit for bit
    run = run_in_process([plan.program(p, part, X, y, weights) for p, part in enumerate(plan.split(params))])
    assert len({result[0] for result in run.results}) == 1


def test_float32_data_agrees_to_float32_rounding() -> None:
    model = MLP(6, (8,), 5, activation="tanh")
    params = params_of(model)
    X32 = X.astype(np.float32)
    loss, grad = model.loss_grad_sum(params, X32, y)
    split_loss, split_grad = partition(model, 3).loss_grad_sum(params, X32, y)
    assert abs(split_loss - loss) <= 1e-5 * abs(loss)
    assert relative(split_grad, grad) <= 1e-5
    assert relative(split_grad, model.loss_grad_sum(params, X, y)[1]) > 1e-12  # it did compute in float32


def test_softmax_regression_has_no_hidden_exchange() -> None:
    model = MLP(6, (), 5)
    params = params_of(model)
    plan = partition(model, 2)
    np.testing.assert_allclose(plan.loss_grad_sum(params, X, y)[1], model.loss_grad_sum(params, X, y)[1],
                               rtol=1e-12, atol=1e-12)
    run = run_in_process([plan.program(p, part, X, y) for p, part in enumerate(plan.split(params))])
    assert set(run.bytes_sent[0]) == {"softmax"}


def test_only_block_activations_and_per_row_stats_travel() -> None:
    """Forward: each partition's block of each hidden layer to the K - 1 others; the softmax:
    n x 3 numbers per partition (never the logits); backward: the error columns others own."""
    widths, k, n = (9, 5), 3, X.shape[0]
    model = MLP(6, widths, 5)
    plan = partition(model, k)
    run = run_in_process([plan.program(p, part, X, y) for p, part in enumerate(plan.split(params_of(model)))])
    for p, sent in enumerate(run.bytes_sent):
        own = [b[p + 1] - b[p] for b in (even_bounds(width, k) for width in widths)]
        assert sent["fwd/1"] == (k - 1) * n * own[0] * 8
        assert sent["fwd/2"] == (k - 1) * n * own[1] * 8
        assert sent["softmax"] == (k - 1) * n * 3 * 8
        assert sent["bwd/2"] == n * (widths[1] - own[1]) * 8
        assert sent["bwd/1"] == n * (widths[0] - own[0]) * 8
