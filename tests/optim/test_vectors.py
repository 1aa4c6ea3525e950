"""Vector arithmetic without parameter-length temporaries: the bits of the whole-vector forms."""

from __future__ import annotations

import numpy as np
import pytest

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
