"""L-BFGS against scipy's L-BFGS-B: same optimum, about the same work, same stopping rules."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from dasklbfgs.errors import ConfigurationError, NonFiniteObjectiveError
from dasklbfgs.optim import LBFGSOptions, Status, lbfgs_minimize
from dasklbfgs.optim.lbfgs import MSG_PREDICTED


def rosen_fg(x):
    return rosen(x), rosen_der(x)


@pytest.mark.parametrize("n", [2, 10, 40])
def test_rosenbrock_like_scipy(n) -> None:
    x0 = np.full(n, -1.2)
    ours, _ = lbfgs_minimize(rosen_fg, x0, LBFGSOptions(gtol=1e-8))
    ref = minimize(rosen, x0, jac=rosen_der, method="L-BFGS-B", options={"gtol": 1e-8})
    assert ours.success
    np.testing.assert_allclose(ours.x, np.ones(n), atol=1e-4)
    assert ours.fun < 1e-8
    assert ours.nit <= 1.2 * ref.nit


def test_result_fields_and_history() -> None:
    res, state = lbfgs_minimize(rosen_fg, np.zeros(3))
    for field in ("x", "fun", "jac", "nit", "nfev", "njev", "status", "success", "message"):
        assert field in res
    assert len(res.history) == res.nit == state.nit
    assert [h["step"] for h in res.history] == list(range(1, res.nit + 1))
    assert all(a["loss"] >= b["loss"] for a, b in zip(res.history, res.history[1:]))
    np.testing.assert_array_equal(res.jac, rosen_der(res.x))


def test_maxiter_is_not_success() -> None:
    res, _ = lbfgs_minimize(rosen_fg, np.zeros(5), LBFGSOptions(maxiter=3))
    assert (res.nit, res.success, res.status) == (3, False, Status.LIMIT)
    assert "ITERATIONS REACHED LIMIT" in res.message


def test_maxfun_is_not_success() -> None:
    res, _ = lbfgs_minimize(rosen_fg, np.zeros(5), LBFGSOptions(maxfun=6))
    assert not res.success and res.status == Status.LIMIT and res.nfev <= 6
    assert "EVALUATIONS EXCEEDS LIMIT" in res.message


def test_callback_stop_iteration_halts_cleanly() -> None:
    seen = []

    def callback(intermediate_result):
        seen.append(intermediate_result.fun)
        if len(seen) == 4:
            raise StopIteration

    res, _ = lbfgs_minimize(rosen_fg, np.zeros(5), callback=callback)
    assert res.status == Status.CALLBACK_STOP and not res.success and res.nit == 4
    assert res.fun == seen[-1]


def test_continue_from_state_reaches_the_same_point() -> None:
    straight, _ = lbfgs_minimize(rosen_fg, np.zeros(6))
    first, state = lbfgs_minimize(rosen_fg, np.zeros(6), LBFGSOptions(maxiter=10))
    resumed, _ = lbfgs_minimize(rosen_fg, None, LBFGSOptions(), state=state)
    np.testing.assert_array_equal(resumed.x, straight.x)
    assert resumed.nit == straight.nit


def test_objective_turning_non_finite_stops_with_status() -> None:
    def fg(x):
        if x[0] > 0.5:
            return np.nan, np.full_like(x, np.nan)
        return float((x[0] - 2) ** 2), np.array([2 * (x[0] - 2)])

    res, _ = lbfgs_minimize(fg, np.zeros(1))
    assert not res.success
    assert np.isfinite(res.fun) and res.x[0] <= 0.5
    assert res.status in (Status.NON_FINITE, Status.CONVERGED)
    assert res.status == Status.CONVERGED or "non-finite" in res.message


def test_non_finite_start_raises() -> None:
    with pytest.raises(NonFiniteObjectiveError, match=r"the objective at x0 is not finite \(f = inf\)"):
        lbfgs_minimize(lambda x: (np.inf, x), np.zeros(2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"history": 0}, r"history must be an integer >= 1, got 0"),
        ({"maxiter": 2.5}, r"maxiter must be an integer >= 1, got 2.5"),
        ({"gtol": -1.0}, r"gtol must be a non-negative number, got -1.0"),
        ({"ftol": float("nan")}, r"ftol must be a non-negative number, got nan"),
    ],
)
def test_option_errors(kwargs, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LBFGSOptions(**kwargs)


def test_a_failed_search_predicting_a_reduction_within_ftol_has_converged() -> None:
    """A line search that fails where its first trial predicts a relative reduction within
    ftol stops the run as converged (the next accepted step would have, by ftol); one that
    predicted more ends as the failure it is."""
    def fg(x):
        return float(x @ x) + 10.0, 2 * x

    res, _ = lbfgs_minimize(fg, np.array([1e-3]), LBFGSOptions(max_line_search=1, ftol=1e-3, gtol=1e-12))
    assert res.success and res.status == Status.CONVERGED and res.message == MSG_PREDICTED
    res, _ = lbfgs_minimize(fg, np.array([1e-3]), LBFGSOptions(max_line_search=1, gtol=1e-12))
    assert not res.success and res.status == Status.LINE_SEARCH_FAILED
