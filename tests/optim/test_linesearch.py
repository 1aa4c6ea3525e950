"""The scalar strong Wolfe line search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dasklbfgs.optim import strong_wolfe


def along(f, grad, x, p):
    def phi(alpha):
        xa = x + alpha * p
        return f(xa), float(grad(xa) @ p)
    return phi


@pytest.mark.parametrize("alpha1", [1e-4, 1.0, 50.0])
def test_result_satisfies_strong_wolfe(alpha1) -> None:
    from scipy.optimize import rosen, rosen_der

    x = np.array([-1.2, 1.0])
    p = -rosen_der(x)
    f0, d0 = rosen(x), float(rosen_der(x) @ p)
    res = strong_wolfe(along(rosen, rosen_der, x, p), f0, d0, alpha1=alpha1)
    assert res.success
    assert res.f <= f0 + 1e-4 * res.alpha * d0
    assert abs(res.derivative) <= 0.9 * abs(d0)
    assert res.f == rosen(x + res.alpha * p)


def test_non_finite_trial_steps_are_shrunk() -> None:
    calls = []

    def phi(alpha):
        calls.append(alpha)
        if alpha > 2.0:
            return math.inf, math.nan
        return (alpha - 1.5) ** 2, 2 * (alpha - 1.5)

    res = strong_wolfe(phi, 2.25, -3.0, alpha1=8.0)
    assert res.success and res.saw_non_finite
    assert res.alpha <= 2.0 and calls[0] == 8.0


def test_failure_is_reported_not_raised() -> None:
    res = strong_wolfe(lambda a: (math.nan, math.nan), 1.0, -1.0, max_evals=5)
    assert not res.success and res.alpha == 0.0 and res.n_evals == 5 and res.saw_non_finite


def test_rejects_ascent_direction() -> None:
    with pytest.raises(ValueError, match=r"d0 must be negative for a descent direction, got 1.0"):
        strong_wolfe(lambda a: (0.0, 0.0), 0.0, 1.0)


def test_tiny_steps_on_huge_gradients() -> None:
    """First steps of ~1e-17 must not look like an empty bracket."""
    from dasklbfgs.optim import lbfgs_minimize

    scale = 1e16
    res, _ = lbfgs_minimize(lambda x: (scale * float(x @ x), 2 * scale * x), np.array([3.0, -4.0]))
    # It gets to the optimum to machine precision (here f ~ 1e-16 after starting at 2.5e17);
    # the line search may then report it can do no better, which is honest.
    assert res.nit >= 1 and res.fun < 1e-6
