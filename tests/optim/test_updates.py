"""Update rules against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.updates import adagrad, ftrl, ftrl_weights, make_rule, momentum, sgd


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


@pytest.mark.parametrize("rule", [sgd(0.3), momentum(0.1, beta=0.9), momentum(0.1, beta=0.5, nesterov=True),
                                  adagrad(0.5, eps=1e-7, initial_accumulator=0.1)],
                         ids=["sgd", "momentum", "nesterov", "adagrad"])
@pytest.mark.parametrize("wire", [np.float64, np.float32])
def test_in_place_steps_have_the_bits_of_update(rule, wire) -> None:
    """``apply`` (blockwise, in place: what a parameter shard does) gives the very bits of
    ``update`` and ``params += delta``, over several blocks and a ragged last one; a float32
    gradient (off the wire, converted block by block) those of its float64 conversion."""
    from dasklbfgs.optim.updates import BLOCK

    rng = np.random.default_rng(0)
    size = 2 * BLOCK + 77
    params, state = rng.normal(size=size), rule.init(np.zeros(size))
    in_place, in_place_state = params.copy(), {k: v.copy() for k, v in state.items()}
    for _ in range(3):
        grad = rng.normal(size=size).astype(wire)
        delta, state = rule.update(grad.astype(np.float64), state)
        params += delta
        rule.apply(grad, in_place_state, in_place)
    np.testing.assert_array_equal(in_place, params)
    for key in state:
        np.testing.assert_array_equal(in_place_state[key], state[key])


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


def test_ftrl_three_steps_against_hand_computed_values() -> None:
    """alpha = 0.5, beta = 1, l1 = 0.3, l2 = 0.2, from w = 0 (z = n = 0). Coordinate 0, by hand:

    g = 1:   sigma = (1 - 0) / 0.5 = 2;  z = 1 - 2 * 0 = 1;  n = 1
             w = -(1 - 0.3) / ((1 + 1) / 0.5 + 0.2) = -0.7 / 4.2 = -0.1666...
    g = -2:  n = 5;  sigma = (sqrt 5 - 1) / 0.5 = 2.4721360;  z = 1 - 2 + 2.4721360 / 6 = -0.5879773
             w = -(-0.5879773 + 0.3) / ((1 + sqrt 5) / 0.5 + 0.2) = 0.2879773 / 6.6721360 = 0.0431612
    g = 0.5: n = 5.25;  sigma = (sqrt 5.25 - sqrt 5) / 0.5 = 0.1104405
             z = -0.5879773 + 0.5 - 0.1104405 * 0.0431612 = -0.0927441;  |z| <= 0.3: w = 0 exactly
    Coordinate 1 (g = 0.1, -0.1, 0.15): z = 0.1, 0.0, 0.15 (w stays 0, so sigma w = 0), all
    within l1: w = 0 exactly throughout; n = 0.01, 0.02, 0.0425.
    """
    rule = ftrl(0.5, beta=1.0, l1=0.3, l2=0.2)
    state = rule.init(np.zeros(2))
    w = np.zeros(2)
    expected = [  # (g, w after, z after) per step, for coordinates 0 and 1
        ([1.0, 0.1], [-0.7 / 4.2, 0.0], [1.0, 0.1]),
        ([-2.0, -0.1], [0.0431611920, 0.0], [-0.5879773408, 0.0]),
        ([0.5, 0.15], [0.0, 0.0], [-0.0927440517, 0.15]),
    ]
    for grad, w_expected, z_expected in expected:
        delta, state = rule.update(np.array(grad), state)
        w += delta
        np.testing.assert_allclose(w, w_expected, rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(state["z"], z_expected, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(state["n"], [5.25, 0.0425])
    # Exactly zero from the closed form; the tracked w is 0 up to rounding of the deltas.
    np.testing.assert_array_equal(ftrl_weights(state, **rule.hyper), [0.0, 0.0])


def test_ftrl_first_step_in_numbers() -> None:
    """One step written out as numbers: z = 1, n = 1, w = -(1 - 0.3) / ((1 + 1) / 0.5 + 0.2)."""
    rule = ftrl(0.5, beta=1.0, l1=0.3, l2=0.2)
    delta, state = rule.update(np.array([1.0]), rule.init(np.zeros(1)))
    np.testing.assert_allclose(delta, [-0.7 / 4.2])
    np.testing.assert_allclose([state["z"][0], state["n"][0]], [1.0, 1.0])


def test_ftrl_init_gives_the_params_back() -> None:
    params = np.array([-1.5, 0.0, 0.25, 3.0])
    l1 = np.array([0.1, 0.1, 0.0, 0.4])  # per coordinate
    rule = ftrl(0.3, beta=2.0, l1=l1, l2=0.5)
    state = rule.init(params)
    np.testing.assert_allclose(ftrl_weights(state, **rule.hyper), params, rtol=1e-14)
    np.testing.assert_array_equal(state["n"], 0.0)


def test_ftrl_zero_gradient_changes_nothing() -> None:
    """sparse_exact: updating only the entries a sparse gradient carries equals the dense update."""
    rule = ftrl(0.5, l1=0.2, l2=0.1)
    state = rule.init(np.array([0.5, -0.2, 0.0]))
    _, state = rule.update(np.array([0.3, -1.0, 2.0]), state)
    w_before = ftrl_weights(state, **rule.hyper)
    delta, after = rule.update(np.zeros(3), state)
    assert rule.sparse_exact
    np.testing.assert_array_equal(delta, 0.0)
    for key in ("z", "n"):
        np.testing.assert_array_equal(after[key], state[key])
    np.testing.assert_array_equal(ftrl_weights(after, **rule.hyper), w_before)
    # The same, entry by entry: a dense gradient with a zero equals updating the others alone.
    dense, _ = rule.update(np.array([0.7, 0.0, -0.4]), state)
    part, _ = rule.update(np.array([0.7, -0.4]), {k: v[[0, 2]] for k, v in state.items()})
    np.testing.assert_array_equal(dense[[0, 2]], part)
    assert dense[1] == 0.0


def test_ftrl_l1_gives_exact_zeros_and_spares_unpenalised_coordinates() -> None:
    rule = ftrl(1.0, l1=np.array([1.0, 1.0, 0.0]))
    state = rule.init(np.zeros(3))
    w = np.zeros(3)
    for g in ([0.5, -0.4, 0.5], [0.3, -0.3, 0.3], [2.0, 0.2, 0.01]):
        delta, state = rule.update(np.array(g), state)
        w += delta
    # |z| of coordinate 1 stays under l1: exactly 0; coordinate 2 has no l1 and moves.
    assert w[1] == 0.0 and np.signbit(w[1]) in (True, False)
    assert w[0] < 0 and w[2] != 0.0
    np.testing.assert_array_equal(ftrl_weights(state, **rule.hyper) == 0.0, [False, True, False])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ftrl(0.0), r"learning_rate must be a positive number, got 0.0"),
        (lambda: ftrl(float("inf")), r"learning_rate must be a positive number, got inf"),
        (lambda: ftrl(0.1, beta=0.0), r"beta must be a positive number, got 0.0"),
        (lambda: ftrl(0.1, beta="x"), r"beta must be a positive number, got 'x'"),
        (lambda: ftrl(0.1, l1=-0.1), r"l1 must be a non-negative number or array of them, got -0.1"),
        (lambda: ftrl(0.1, l1=np.array([0.1, np.nan])), r"l1 must be a non-negative number or array"),
        (lambda: ftrl(0.1, l2=-1), r"l2 must be a non-negative number or array of them, got -1"),
        (lambda: ftrl(0.1, l2=np.ones(2)), r"l2 must be a non-negative number, got an array of shape \(2,\)"),
        (lambda: make_rule("ftrl", learning_rate=0.1, gamma=1), r"bad hyper-parameters for 'ftrl'"),
    ],
)
def test_ftrl_errors(call, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        call()
