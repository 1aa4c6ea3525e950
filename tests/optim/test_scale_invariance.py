"""L-BFGS does not depend on the scale of the objective, and holds its own against
scipy's L-BFGS-B on classic badly scaled problems."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from dasklbfgs.optim import LBFGSOptions, lbfgs_minimize
from dasklbfgs.optim.basis import keep_pair


def scaled(fun, c):
    def evaluate(x):
        f, g = fun(x)
        return c * f, c * g
    return evaluate


def rosenbrock(x):
    return float(rosen(x)), rosen_der(x)


def badly_scaled_quadratic(x):
    # condition number 1e8 and an off-diagonal coupling: needs curvature pairs to converge
    d = np.logspace(0, 8, x.size)
    r = x - 1.0
    f = 0.5 * float(r @ (d * r)) + 0.25 * float(r[0] * r[-1])
    g = d * r
    g[0] += 0.25 * r[-1]
    g[-1] += 0.25 * r[0]
    return f, g


@pytest.mark.parametrize("fun, x0", [(rosenbrock, np.array([-1.2, 1.0, -0.5, 0.8])),
                                     (badly_scaled_quadratic, np.zeros(6))], ids=["rosenbrock", "quadratic"])
def test_the_iterates_do_not_depend_on_the_scale_of_the_objective(fun, x0) -> None:
    # gtol scales with the objective; ftol=0 because scipy's relative-decrease test (which
    # ours follows) measures decrease against max(|f|, 1), an absolute floor.
    # Scaling by c is itself not exact in floating point (c * f rounds), and over some 90
    # iterations of a problem conditioned at 1e8 those last bits decide which iteration first
    # crosses gtol, so the counts may differ by an iteration or two between scales, or between
    # BLAS kernels at one scale. What scale invariance promises is the rest: every scale
    # converges, in about as many iterations, to the same optimum (both problems' is all ones),
    # within what gtol allows: |x - x*| <= |g| / lambda_min, with lambda_min >= 0.25 for both.
    runs = {}
    for c in (1e-20, 1e-10, 1.0, 1e10, 1e30):
        options = LBFGSOptions(gtol=c * 1e-8, ftol=0.0, maxiter=500)
        result, _ = lbfgs_minimize(scaled(fun, c), x0, options)
        runs[c] = result
    reference = runs[1.0]
    bound = np.sqrt(x0.size) * 1e-8 / 0.25
    for c, result in runs.items():
        assert result.success, (c, result.message)
        assert abs(result.nit - reference.nit) <= 2, (c, result.nit, reference.nit)
        np.testing.assert_allclose(result.x, 1.0, rtol=0.0, atol=bound, err_msg=f"scale {c:g}")


def test_the_pair_test_is_relative_to_the_directional_derivative() -> None:
    # a pair whose curvature is tiny against y.y but fine against the step's descent is kept
    assert keep_pair(sy=1e20, descent=1e30) is True
    assert keep_pair(sy=1e10, descent=1e30) is False  # below eps * descent: dropped
    assert keep_pair(sy=0.0, descent=1.0) is False and keep_pair(sy=-1.0, descent=1.0) is False


# -- classic badly scaled problems (Moré, Garbow and Hillstrom 1981) ---------------------------

def powell_badly_scaled(x):
    f1 = 1e4 * x[0] * x[1] - 1.0
    f2 = np.exp(-x[0]) + np.exp(-x[1]) - 1.0001
    g = np.array([2 * f1 * 1e4 * x[1] - 2 * f2 * np.exp(-x[0]), 2 * f1 * 1e4 * x[0] - 2 * f2 * np.exp(-x[1])])
    return float(f1**2 + f2**2), g


def brown_badly_scaled(x):
    f1, f2, f3 = x[0] - 1e6, x[1] - 2e-6, x[0] * x[1] - 2.0
    g = np.array([2 * f1 + 2 * f3 * x[1], 2 * f2 + 2 * f3 * x[0]])
    return float(f1**2 + f2**2 + f3**2), g


def beale(x):
    a, b = x
    t = [1.5 - a + a * b, 2.25 - a + a * b**2, 2.625 - a + a * b**3]
    ga = sum(2 * ti * (-1 + b**k) for k, ti in enumerate(t, 1))
    gb = sum(2 * ti * a * k * b ** (k - 1) for k, ti in enumerate(t, 1))
    return float(sum(ti**2 for ti in t)), np.array([ga, gb])


def extended_rosenbrock(x):
    return rosenbrock(x)


def scaled_least_squares():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((200, 8)) * np.logspace(-2, 2, 8)  # A'A: condition ~1e8
    b = rng.standard_normal(200)

    def fun(x):
        r = A @ x - b
        return 0.5 * float(r @ r), A.T @ r
    return fun, np.linalg.lstsq(A, b, rcond=None)[0]


PROBLEMS = {
    "rosenbrock": (rosenbrock, np.array([-1.2, 1.0]), np.ones(2)),
    "extended-rosenbrock": (extended_rosenbrock, np.tile([-1.2, 1.0], 5), np.ones(10)),
    "powell-badly-scaled": (powell_badly_scaled, np.array([0.0, 1.0]), None),
    "brown-badly-scaled": (brown_badly_scaled, np.array([1.0, 1.0]), np.array([1e6, 2e-6])),
    "beale": (beale, np.array([1.0, 1.0]), np.array([3.0, 0.5])),
    "quadratic-cond-1e8": (badly_scaled_quadratic, np.zeros(6), np.ones(6)),
    "least-squares-columns-1e-2-to-1e2": (*[(f, np.zeros(8), xs) for f, xs in [scaled_least_squares()]][0],),
}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_badly_scaled_problems_reach_scipys_objective(name) -> None:
    fun, x0, solution = PROBLEMS[name]
    ours, _ = lbfgs_minimize(fun, x0, LBFGSOptions(gtol=1e-10, ftol=0.0, maxiter=5000, maxfun=20000))
    theirs = minimize(fun, x0, jac=True, method="L-BFGS-B",
                      options={"gtol": 1e-10, "ftol": 0.0, "maxiter": 5000, "maxfun": 20000})
    scale = max(abs(theirs.fun), 1.0)
    assert ours.fun <= theirs.fun + 1e-8 * scale, (ours.fun, theirs.fun, ours.message)
    if solution is not None:
        np.testing.assert_allclose(ours.x, solution, rtol=1e-4, atol=1e-8)
