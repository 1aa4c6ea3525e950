"""The Gram-matrix two-loop recursion equals the classic vector recursion."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.optim import LocalBasis, two_loop_coefficients


def classic_two_loop(pairs, g):
    """Nocedal & Wright Algorithm 7.4, written with vectors."""
    q = g.copy()
    alphas = []
    for s, y in reversed(pairs):
        a = (s @ q) / (s @ y)
        q -= a * y
        alphas.append(a)
    s, y = pairs[-1]
    r = q * (s @ y) / (y @ y)
    for (s, y), a in zip(pairs, reversed(alphas)):
        b = (y @ r) / (s @ y)
        r += s * (a - b)
    return -r


@pytest.mark.parametrize("m", [1, 3, 5])
def test_matches_classic_recursion_while_history_rolls(m) -> None:
    rng = np.random.default_rng(m)
    n = 30
    A = np.diag(np.linspace(0.5, 20, n))
    basis = LocalBasis(n, m)
    pairs: list = []
    for _ in range(2 * m + 3):
        s = rng.normal(size=n)
        y = A @ s
        basis.push_pair(s, y)
        pairs = (pairs + [(s, y)])[-m:]
        g = rng.normal(size=n)
        basis.set_gradient(g)
        stacked = np.array([p[0] for p in pairs] + [p[1] for p in pairs] + [g])
        np.testing.assert_allclose(basis.gram(), stacked @ stacked.T, rtol=1e-12, atol=1e-12)
        p = basis.combine(two_loop_coefficients(basis.gram(), basis.k))
        np.testing.assert_allclose(p, classic_two_loop(pairs, g), rtol=1e-10, atol=1e-12)


def test_no_pairs_is_steepest_descent() -> None:
    basis = LocalBasis(3, 4)
    basis.set_gradient(np.array([1.0, -2.0, 3.0]))
    delta = two_loop_coefficients(basis.gram(), 0)
    np.testing.assert_array_equal(basis.combine(delta), [-1.0, 2.0, -3.0])


def test_secant_equation_holds_for_the_newest_pair() -> None:
    """BFGS inverse-Hessian approximations map the newest y onto the newest s."""
    rng = np.random.default_rng(0)
    n = 6
    M = rng.normal(size=(n, n))
    A = M @ M.T + n * np.eye(n)
    basis = LocalBasis(n, 3)
    for _ in range(4):
        s = rng.normal(size=n)
        basis.push_pair(s, A @ s)
    basis.set_gradient(A @ s)  # g = newest y
    p = basis.combine(two_loop_coefficients(basis.gram(), basis.k))
    np.testing.assert_allclose(p, -s, rtol=1e-10)


def test_gram_shape_is_checked() -> None:
    with pytest.raises(ValueError, match=r"gram must be \(5, 5\) for 2 pairs, got \(3, 3\)"):
        two_loop_coefficients(np.eye(3), 2)
