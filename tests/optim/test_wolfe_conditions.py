"""The line search returns steps that satisfy both strong Wolfe conditions, including where
the first step of sufficient decrease does not satisfy the curvature condition."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dasklbfgs.optim import strong_wolfe

C1, C2 = 1e-4, 0.9


def assert_strong_wolfe(phi, f0, d0, result) -> None:
    f, d = phi(result.alpha)
    assert result.alpha > 0
    assert f <= f0 + C1 * result.alpha * d0, "sufficient decrease"
    assert abs(d) <= C2 * abs(d0), "curvature"


def test_a_small_first_step_is_extended_until_the_slope_flattens() -> None:
    # phi(a) = (a - 1)^2: a first trial of 1e-3 decreases f enough but the slope there
    # (-1.998) is still steeper than c2 |phi'(0)| = 1.8, so it must not be accepted
    def phi(a):
        return (a - 1.0) ** 2, 2.0 * (a - 1.0)

    f0, d0 = phi(0.0)
    first_f, first_d = phi(1e-3)
    assert first_f <= f0 + C1 * 1e-3 * d0 and abs(first_d) > C2 * abs(d0)  # the premise
    result = strong_wolfe(phi, f0, d0, alpha1=1e-3, c1=C1, c2=C2)
    assert result.success
    assert_strong_wolfe(phi, f0, d0, result)
    assert result.alpha > 0.05  # well past the first trial


def test_zoom_goes_on_past_a_point_with_sufficient_decrease_but_too_steep() -> None:
    """phi(a) = -a + a^4 / 4 from a first trial of 3 (far past the minimum at 1, so the
    bracket [0, 3] is zoomed). The first interpolated point decreases phi enough but
    climbs out of the minimum too steeply for c2 = 0.5; the search must not stop there."""
    calls = []

    def phi(alpha):
        calls.append(alpha)
        return -alpha + alpha**4 / 4, -1.0 + alpha**3

    c1, c2 = 1e-4, 0.5
    res = strong_wolfe(phi, 0.0, -1.0, alpha1=3.0, c1=c1, c2=c2)
    assert res.success
    f_first, _ = phi(3.0)
    assert f_first > 0.0  # the premise: the first trial does not decrease phi, so zoom runs,
    f_zoom, d_zoom = phi(calls[1])  # and its first point is acceptable but for the curvature
    assert f_zoom <= c1 * calls[1] * -1.0 and abs(d_zoom) > c2
    assert res.alpha != calls[1] and res.n_evals >= 3
    assert (res.f, res.derivative) == phi(res.alpha)
    assert res.f <= c1 * res.alpha * -1.0
    assert abs(res.derivative) <= c2 * 1.0


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    curvature=st.floats(0.05, 50.0),
    minimum=st.floats(0.1, 20.0),
    wiggle=st.floats(0.0, 0.9),
    frequency=st.floats(0.5, 20.0),
    alpha1=st.floats(1e-4, 1e3),
)
def test_strong_wolfe_holds_on_random_smooth_functions(curvature, minimum, wiggle, frequency, alpha1) -> None:
    # a convex quadratic with its minimum at `minimum`, plus a sinusoid small enough that
    # phi stays bounded below and phi'(0) < 0
    amplitude = wiggle * curvature * minimum / frequency

    def phi(a):
        f = 0.5 * curvature * (a - minimum) ** 2 + amplitude * math.sin(frequency * a)
        d = curvature * (a - minimum) + amplitude * frequency * math.cos(frequency * a)
        return f, d

    f0, d0 = phi(0.0)
    assert d0 < 0
    result = strong_wolfe(phi, f0, d0, alpha1=alpha1, c1=C1, c2=C2, max_evals=40)
    if result.success:
        assert_strong_wolfe(phi, f0, d0, result)
        assert np.isclose(phi(result.alpha)[0], result.f) and np.isclose(phi(result.alpha)[1], result.derivative)
