"""Update rules against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.updates import adagrad, make_rule, momentum, sgd


def test_sgd() -> None:
    rule = sgd(0.5)
    delta, state = rule.update(np.array([2.0, -4.0]), rule.init(np.zeros(2)))
    np.testing.assert_array_equal(delta, [-1.0, 2.0])
    assert state == {}


def test_momentum_two_steps() -> None:
    rule = momentum(0.1, beta=0.5)
    state = rule.init(np.zeros(1))
    d1, state = rule.update(np.array([1.0]), state)   # v = 1
    d2, state = rule.update(np.array([1.0]), state)   # v = 0.5 + 1 = 1.5
    np.testing.assert_allclose([d1[0], d2[0]], [-0.1, -0.15])
    nesterov = momentum(0.1, beta=0.5, nesterov=True)
    d, _ = nesterov.update(np.array([1.0]), nesterov.init(np.zeros(1)))  # g + beta v = 1.5
    np.testing.assert_allclose(d, [-0.15])


def test_adagrad_two_steps() -> None:
    rule = adagrad(1.0, eps=0.0 + 1e-12)
    state = rule.init(np.zeros(2))
    d1, state = rule.update(np.array([3.0, -4.0]), state)  # acc = 9, 16 -> -g/|g|
    np.testing.assert_allclose(d1, [-1.0, 1.0])
    d2, state = rule.update(np.array([4.0, 0.0]), state)   # acc = 25, 16 -> -4/5, 0
    np.testing.assert_allclose(d2, [-0.8, 0.0])
    np.testing.assert_array_equal(state["accumulator"], [25.0, 16.0])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sgd(0.0), r"learning_rate must be a positive number, got 0.0"),
        (lambda: adagrad(-1), r"learning_rate must be a positive number, got -1"),
        (lambda: adagrad(1, eps=0), r"eps must be positive, got 0"),
        (lambda: momentum(1, beta=1.0), r"beta must be in \[0, 1\), got 1.0"),
        (lambda: make_rule("adam", learning_rate=1), r"optimizer must be one of .* got 'adam'"),
        (lambda: make_rule("sgd", learning_rate=1, beta=2), r"bad hyper-parameters for 'sgd'"),
    ],
)
def test_errors(call, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call()
