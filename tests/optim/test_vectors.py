"""Vector arithmetic without parameter-length temporaries: the bits of the whole-vector forms."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.optim.basis import LocalBasis
from dasklbfgs.optim.vectors import BLOCK, add_scaled, max_abs

rng = np.random.default_rng(4)


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, 3 * BLOCK + 17])
def test_add_scaled_has_the_bits_of_the_whole_expression(size) -> None:
    into, vector = rng.normal(size=size), rng.normal(size=size) * 1e3
    expected = into + 0.37 * vector
    add_scaled(into, 0.37, vector)
    np.testing.assert_array_equal(into, expected, strict=True)


def test_add_scaled_works_on_a_view_in_place() -> None:
    grad, coef = np.zeros(2 * BLOCK + 5), rng.normal(size=2 * BLOCK)
    add_scaled(grad[: coef.size], 2.0, coef)
    np.testing.assert_array_equal(grad[: coef.size], 2.0 * coef)
    assert not grad[coef.size:].any()


def test_max_abs_is_numpys_and_keeps_nan() -> None:
    g = rng.normal(size=BLOCK + 3)
    assert max_abs(g) == float(np.max(np.abs(g)))
    assert max_abs(-np.abs(g)) == float(np.max(np.abs(g)))
    assert np.isnan(max_abs(np.array([1.0, np.nan]))) and np.isnan(max_abs(np.array([np.nan, -1.0])))
    assert max_abs(np.empty(0)) == 0.0


@pytest.mark.parametrize("pushes", [2, 5, 9])
def test_pairs_stored_side_by_side_combine_as_the_pairs_do(pushes) -> None:
    """S and Y are views of one matrix (rows reused once m are stored): the direction is
    the pairs' combination in pair order, as the vectors pushed say."""
    m, n = 4, 3 * BLOCK + 5
    basis, pushed = LocalBasis(n, m), []
    for _ in range(pushes):
        s, y = rng.normal(size=n), rng.normal(size=n)
        basis.push_pair(s, y)
        pushed = [*pushed, (s, y)][-m:]
    g = rng.normal(size=n)
    basis.set_gradient(g)
    k = basis.k
    delta = rng.normal(size=2 * k + 1)
    expected = sum(d * s for d, (s, _) in zip(delta[:k], pushed)) + sum(
        d * y for d, (_, y) in zip(delta[k : 2 * k], pushed)) + delta[-1] * g
    np.testing.assert_allclose(basis.combine(delta), expected, rtol=1e-12, atol=1e-12)
    for l, (s, y) in enumerate(pushed):  # S[slot] and Y[slot] are pair l's, however the rows were reused
        np.testing.assert_array_equal(basis.S[basis.slots[l]], s)
        np.testing.assert_array_equal(basis.Y[basis.slots[l]], y)
    basis.S = np.zeros((m, n))  # assigning S writes its rows, Y untouched
    assert not basis.S.any() and basis.Y[basis.slots[0]].any()
    with pytest.raises(ValueError, match=r"the pairs' rows are \(4, 98309\), got an array of shape \(98309,\)"):
        basis.Y = np.zeros(n)  # one row is not broadcast into all of them
