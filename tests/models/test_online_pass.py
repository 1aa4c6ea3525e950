"""The online pass of Adagrad and the weighted average of passes (pure numpy, no cluster)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.models.online_pass import BATCH_ROWS, PassResult, adagrad_pass, averaged
from dasklbfgs.optim.updates import adagrad

rng = np.random.default_rng(11)


def _sparse_rows(n: int, d: int) -> sp.csr_array:
    return sp.csr_array(sp.random(n, d, density=0.05, format="csr", random_state=3,
                                  data_rvs=lambda k: rng.normal(size=k)))


def _reference_pass(model, params, X, y, w, learning_rate, batch_rows=BATCH_ROWS):
    """Mini-batch Adagrad written out: each step on the batch's objective (mean loss and
    penalty, with the model's own objective), every coordinate."""
    rule = adagrad(learning_rate)
    x, state = params.copy(), rule.init(params)
    for start in range(0, X.shape[0], batch_rows):
        s = slice(start, start + batch_rows)
        _, g = model.objective(x, X[s], y[s], None if w is None else w[s])
        delta, state = rule.update(g, state)
        x += delta
    return x, state["accumulator"]


@pytest.mark.parametrize("model", [Logistic(30), Softmax(30, 3), Logistic(30, class_weight=[0.2, 3.0]),
                                   Softmax(30, 3, class_weight=[1.0, 0.5, 4.0])],
                         ids=["logistic", "softmax", "logistic-class-weight", "softmax-class-weight"])
def test_a_sparse_pass_steps_as_mini_batch_adagrad_on_the_objective(model) -> None:
    """Without a penalty, stepping on each mini-batch's own columns is the full step: the
    gradient is zero on the others, and Adagrad leaves a coordinate with zero gradient alone."""
    X = _sparse_rows(500, 30)
    y = rng.integers(0, model.n_outputs if model.n_outputs > 1 else 2, size=500).astype(np.float64)
    w = rng.uniform(0.5, 2.0, size=500)
    x0 = rng.normal(size=model.n_params) * 0.1
    expected, accumulator = _reference_pass(model, x0, X.toarray(), y, w, 0.3)
    result = adagrad_pass(model, x0, X, y, w, learning_rate=0.3)
    assert result.index is not None and np.all(np.diff(result.index) > 0)
    np.testing.assert_allclose(result.params, expected[result.index], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(result.weight, accumulator[result.index], rtol=1e-12, atol=1e-14)
    untouched = np.setdiff1d(np.arange(model.n_params), result.index)
    np.testing.assert_array_equal(expected[untouched], x0[untouched])  # the columns no row uses
    dense = adagrad_pass(model, x0, X.toarray(), y, w, learning_rate=0.3)
    assert dense.index is None
    np.testing.assert_allclose(dense.params, expected, rtol=1e-12, atol=1e-14)
    # progressive validation: each batch's loss before its step, per unit of weight
    assert result.mean_loss == pytest.approx(dense.mean_loss, rel=1e-12)
    assert result.rows_weight == pytest.approx(w.sum())


def test_the_sparse_pass_puts_the_penalty_on_the_coordinates_it_touches() -> None:
    model = Logistic(20, l2=0.5)
    X = sp.csr_array(([1.0, 1.0], ([0, 1], [3, 7])), shape=(2, 20))
    y = np.array([1.0, 0.0])
    x0 = np.full(model.n_params, 0.2)
    result = adagrad_pass(model, x0, X, y, learning_rate=0.1, batch_rows=1)
    moved = dict(zip(result.index.tolist(), result.params))
    assert sorted(moved) == [3, 7, 20]  # the two columns and the intercept
    # row 0: z = 0.2 + 0.2; d loss / dz = sigmoid(0.4) - 1; plus l2 * w at column 3
    g = 1 / (1 + np.exp(-0.4)) - 1 + 0.5 * 0.2
    assert moved[3] == pytest.approx(0.2 - 0.1 * g / (abs(g) + 1e-8), rel=1e-12)


def test_the_average_weighs_each_coordinate_by_its_squared_gradients() -> None:
    start = np.array([9.0, 9.0, 9.0, 9.0])
    one = PassResult(np.array([0, 1]), np.array([1.0, 2.0]), np.array([1.0, 3.0]), 0.0, 1.0)
    two = PassResult(np.array([1, 2]), np.array([6.0, 5.0]), np.array([1.0, 0.0]), 0.0, 1.0)
    everywhere = PassResult(None, np.array([0.0, 0.0, 0.0, 4.0]), np.array([0.0, 0.0, 0.0, 2.0]), 0.0, 1.0)
    x = averaged(start, [one, two, everywhere])
    # column 0: only the first pass moved it, so its value (not half of it); column 1: 3:1;
    # column 2: moved with no gradient, no say; column 3: the dense pass alone
    np.testing.assert_allclose(x, [1.0, (3 * 2.0 + 6.0) / 4, 9.0, 4.0], rtol=1e-15)
    assert start[0] == 9.0  # not modified
