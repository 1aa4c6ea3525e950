"""Sandblaster on the parameters a wide sparse fit can move (solvers/sandblaster/active.py):
the pieces against the whole-vector forms they stand for, then runs on a real cluster against
scipy's optimum on the whole objective."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from dasklbfgs import ShardedDataset, sandblaster_lbfgs
from dasklbfgs.models import Huber, Logistic, Softmax
from dasklbfgs.models.sums import SparseSum
from dasklbfgs.optim import LBFGSState
from dasklbfgs.optim.basis import LocalBasis
from dasklbfgs.optim.vectors import BLOCK, products
from dasklbfgs.sandblaster import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster import active as active_module
from dasklbfgs.solvers.sandblaster.active import ActiveParameters, active_parameters
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import load_state
from dasklbfgs.solvers.sandblaster.standardize import Standardizer

# -- the pieces, no cluster --------------------------------------------------------------------


def rows_reading(columns: np.ndarray, n: int, d: int, seed: int = 0) -> sp.csr_array:
    """``n`` sparse rows over ``d`` columns whose values fall in ``columns`` only."""
    rng = np.random.default_rng(seed)
    X = sp.random_array((n, len(columns)), density=0.2, format="csr", rng=rng)
    return sp.csr_array((X.data, columns[X.indices], X.indptr), shape=(n, d))


@pytest.mark.parametrize("model", [Logistic(40, l2=0.1, l1=0.01, lower_bounds=-np.arange(40.0) - 1),
                                   Softmax(40, 3, l2=0.1, fit_intercept=False), Softmax(40, 3, l2=0.1),
                                   Huber(40, l2=0.1)], ids=["logistic", "softmax", "softmax-intercepts",
                                                            "huber-estimated-scale"])
def test_the_model_on_its_read_columns_is_the_whole_model_at_zeros_elsewhere(model) -> None:
    columns = np.array([2, 3, 11, 17, 30, 39])
    X = rows_reading(columns, 60, 40)
    y = np.random.default_rng(1).integers(0, getattr(model, "n_classes", 2), size=60)
    if isinstance(model, Huber):
        y = y + np.random.default_rng(3).normal(size=60)
    found = active_parameters(model, [model.positions_of(np.array([2, 11, 30])), model.positions_of(columns)],
                              np.zeros(model.n_params, dtype=bool), model.bounds())
    assert found is not None
    active, on = found
    np.testing.assert_array_equal(active.columns, columns)
    assert on.n_features == 6 and on.n_params == active.n_active == len(active.positions)
    theta = np.random.default_rng(2).normal(size=on.n_params)
    if isinstance(model, Huber):
        theta[-1] = 1.5  # the scale: positive
    whole = active.expand(theta)
    f_whole, g_whole = model.objective(whole, X, y)
    f_on, g_on = on.objective(theta, X[:, columns], y)
    assert f_on == pytest.approx(f_whole, rel=1e-13)
    np.testing.assert_allclose(g_on, active.restrict(g_whole), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(np.delete(g_whole, active.positions), 0.0)  # the rest never moves
    if model.lower_bounds is not None:
        np.testing.assert_array_equal(on.lower_bounds, model.lower_bounds[columns])
        np.testing.assert_array_equal(on.l1_weights(), active.restrict(model.l1_weights()))


def test_a_start_or_a_bound_away_from_zero_keeps_its_column() -> None:
    model = Logistic(10, lower_bounds=[0, 0, 0, 0, 0.5, 0, 0, 0, 0, 0], upper_bounds=1.0)
    start = np.zeros(model.n_params)
    start[7] = 0.25
    active, on = active_parameters(model, [model.positions_of(np.array([1]))], start != 0, model.bounds())
    np.testing.assert_array_equal(active.columns, [1, 4, 7])  # read, bound above zero, started elsewhere
    np.testing.assert_array_equal(active.positions, [1, 4, 7, 10])  # and the intercept
    np.testing.assert_array_equal(on.lower_bounds, [0, 0.5, 0])
    assert on.upper_bounds == 1.0


def test_positions_outside_the_cut_are_refused() -> None:
    active = ActiveParameters(np.array([1, 4, 5, 9]), 10, np.array([1, 4, 5]))
    np.testing.assert_array_equal(active.index_of(np.array([4, 9])), [1, 3])
    for outside in ([3], [10], [0, 4]):
        with pytest.raises(AssertionError, match="outside the active parameters"):
            active.index_of(np.array(outside))


def test_no_cut_when_most_parameters_can_move() -> None:
    model = Logistic(10)
    read = [model.positions_of(np.arange(int(10 * active_module.MOST_ACTIVE) + 1))]
    assert active_parameters(model, read, np.zeros(11, dtype=bool), None) is None


def test_sums_states_and_standardization_move_between_the_layouts() -> None:
    active = ActiveParameters(np.array([1, 4, 5, 9]), 10, np.array([1, 4, 5]))
    v = np.arange(10.0)
    kept = np.isin(np.arange(10), active.positions)
    np.testing.assert_array_equal(active.expand(active.restrict(v)), np.where(kept, v, 0))
    cut = active.restrict_sums(SparseSum(10, np.array([4, 9], dtype=np.int32), np.array([2.0, 3.0])))
    assert cut.size == 4
    np.testing.assert_array_equal(cut.index, [1, 3])
    np.testing.assert_array_equal(cut.to_dense(), [0.0, 2.0, 0.0, 3.0])
    np.testing.assert_array_equal(active.restrict_sums(v), [1.0, 4.0, 5.0, 9.0])
    basis = LocalBasis(4, 3)
    rng = np.random.default_rng(0)
    for _ in range(4):  # the oldest pair's rows reused
        s = rng.normal(size=4)
        basis.push_pair(s, 2 * s)
    basis.set_gradient(rng.normal(size=4))
    state = LBFGSState(x=rng.normal(size=4), f=1.5, g=basis.g.copy(), basis=basis, nit=4, nfev=5)
    back = active.restrict_state(active.expand_state(state))
    for a, b in ((back.x, state.x), (back.g, state.g), (back.basis.S, basis.S), (back.basis.Y, basis.Y),
                 (back.basis.g, basis.g), (back.basis._G, basis._G)):
        np.testing.assert_array_equal(a, b)
    assert back.basis.slots == basis.slots and back.basis.k == basis.k and (back.nit, back.nfev) == (4, 5)
    whole = Standardizer(np.linspace(0, 1, 9), np.linspace(1, 2, 9), n_outputs=1, fit_intercept=True)
    on = whole.on_columns(np.array([1, 4, 5]))
    theta = rng.normal(size=4)
    np.testing.assert_allclose(active.expand(on.to_params(theta)),
                               whole.to_params(active.expand(theta)), rtol=1e-14)


def test_the_basis_update_in_one_pass_equals_the_products_one_by_one() -> None:
    n, m = 3 * BLOCK + 17, 4  # longer than a block: the fused pass; reused rows after m pairs
    rng = np.random.default_rng(5)
    one_by_one, fused = LocalBasis(n, m), LocalBasis(n, m)
    for _ in range(6):
        s, g = rng.normal(size=n), rng.normal(size=n)
        y = s + 0.1 * rng.normal(size=n)
        pair_dots = one_by_one.push_pair(s, y)
        grad_dots = one_by_one.set_gradient(g)
        got = fused.advance((s, y), g)
        # sums of n products in another order: equal to rounding, against |s| |y| ~ n
        np.testing.assert_allclose(got[0], pair_dots, rtol=1e-12, atol=1e-14 * n)
        np.testing.assert_allclose(got[1], grad_dots, rtol=1e-12, atol=1e-14 * n)
        np.testing.assert_allclose(fused.gram(), one_by_one.gram(), rtol=1e-12, atol=1e-14 * n)
    assert fused.advance(None, g)[0] is None
    matrices = (rng.normal(size=(3, 2 * BLOCK + 5)), rng.normal(size=(3, 2 * BLOCK + 5)))
    vectors = tuple(rng.normal(size=2 * BLOCK + 5) for _ in range(2))
    np.testing.assert_allclose(products(matrices, vectors),
                               np.array([[M @ v for v in vectors] for M in matrices]).transpose(0, 2, 1), rtol=1e-12)


# -- runs on the cluster -------------------------------------------------------------------------

D = 2000  # columns; the rows read 150 of them


@pytest.fixture(scope="module")
def few_columns(tmp_path_factory) -> tuple[ShardedDataset, np.ndarray]:
    rng = np.random.default_rng(7)
    columns = np.sort(rng.choice(D, 150, replace=False))
    X = rows_reading(columns, 1500, D, seed=8)
    truth = np.zeros(D)
    truth[columns] = rng.normal(size=150)
    y = (rng.uniform(size=1500) < 1 / (1 + np.exp(-(X @ truth)))).astype(np.int64)
    return ShardedDataset.create(tmp_path_factory.mktemp("few-columns") / "d", X, y, shard_rows=300), columns


def scipy_optimum(model, data, x0=None, bounds=None):
    X, y = data.load_rows(0, data.n_samples)[:2]
    x0 = np.zeros(model.n_params) if x0 is None else x0
    return minimize(lambda x: model.objective(x, X, y), x0, jac=True, method="L-BFGS-B", bounds=bounds,
                    options={"gtol": 1e-11, "ftol": 1e-16, "maxiter": 5000})


def test_a_cut_run_reaches_scipys_optimum_of_the_whole_model_cached_or_streamed(client, few_columns) -> None:
    data, columns = few_columns
    model = Logistic(D, l2=1e-3)
    reference = scipy_optimum(model, data)
    runs = [sandblaster_lbfgs(model, data, client=client, gtol=1e-9, ftol=1e-15, cache=cache,
                              portion_rows=300) for cache in (True, False)]  # the same portions
    cached, streamed = runs
    assert cached.stats["active_parameters"] == streamed.stats["active_parameters"] == 151  # and the intercept
    np.testing.assert_array_equal(cached.x, streamed.x, strict=True)  # one cut, the same bits
    assert cached.success and cached.fun == pytest.approx(reference.fun, rel=1e-10)
    # the coordinator's own part of the direct calls is timed apart from the workers'
    # (direct calls gather each worker's parameters; tasks, as streaming uses, read the whole vector)
    assert 0 < cached.stats["gather_seconds_total"] < cached.stats["eval_seconds_total"]
    assert cached.stats["adding_seconds_total"] > 0 and streamed.stats["adding_seconds_total"] > 0
    assert streamed.stats["gather_seconds_total"] == 0.0
    np.testing.assert_allclose(cached.x, reference.x, atol=1e-5)
    assert cached.x.shape == cached.jac.shape == (D + 1,)
    np.testing.assert_array_equal(np.delete(cached.x, np.r_[columns, D]), 0.0)


def test_starts_bounds_and_l1_away_from_the_read_columns(client, few_columns) -> None:
    data, columns = few_columns
    X, y = data.load_rows(0, data.n_samples)[:2]
    unread = np.setdiff1d(np.arange(D), columns)[:2]
    lower = np.full(D, -np.inf)
    lower[unread[1]] = 0.3  # a bound that moves an unread coefficient off zero
    model = Logistic(D, l2=1e-2, lower_bounds=lower)
    x0 = np.zeros(D + 1)
    x0[unread[0]] = 2.0  # a start the l2 penalty pulls back
    result = sandblaster_lbfgs(model, data, client=client, x0=x0, gtol=1e-10, ftol=1e-15, maxiter=2000)
    assert result.stats["active_parameters"] == 153 and result.success, result.message
    reference = scipy_optimum(model, data, x0, bounds=list(zip(*model.bounds())))
    assert result.fun == pytest.approx(reference.fun, rel=1e-10)
    np.testing.assert_allclose(result.x, reference.x, atol=1e-5)
    assert abs(result.x[unread[0]]) < 1e-6 and result.x[unread[1]] == 0.3
    # l1 (OWL-QN on the cut): scipy's L-BFGS-B on w = u - v, u, v >= 0
    l1 = 2e-3
    sparse_model = Logistic(D, l2=1e-3, l1=l1)
    smooth = Logistic(D, l2=1e-3)

    def split(z):
        w = z[:D] - z[D : 2 * D]
        f, g = smooth.objective(np.r_[w, z[2 * D :]], X, y)
        return f + l1 * z[: 2 * D].sum(), np.r_[g[:D] + l1, -g[:D] + l1, g[D:]]

    split_optimum = minimize(split, np.zeros(2 * D + 1), jac=True, method="L-BFGS-B",
                             bounds=[(0, None)] * (2 * D) + [(None, None)], options={"gtol": 1e-11, "ftol": 1e-16})
    sparse = sandblaster_lbfgs(sparse_model, data, client=client, gtol=1e-10, ftol=1e-15, maxiter=2000)
    assert sparse.stats["active_parameters"] == 151 and sparse.success, sparse.message
    assert sparse.fun == pytest.approx(split_optimum.fun, rel=1e-8)
    w = split_optimum.x[:D] - split_optimum.x[D : 2 * D]
    np.testing.assert_allclose(sparse.x, np.r_[w, split_optimum.x[2 * D :]], atol=1e-4)
    assert 0 < np.count_nonzero(sparse.x[:D]) < 150  # exact zeros among the read columns too


def test_a_cut_runs_checkpoint_holds_the_whole_state_and_resumes_to_the_same_bits(client, few_columns,
                                                                                  tmp_path) -> None:
    data, _ = few_columns
    model = Logistic(D, l2=1e-3)
    straight = sandblaster_lbfgs(model, data, client=client, maxiter=25, history=3)
    path = tmp_path / "ckpt"
    sandblaster_lbfgs(model, data, client=client, maxiter=6, history=3, checkpoint_path=path)
    saved = load_state(path, model_config=_config(model), settings={"standardize": False, "history_size": 3,
                                                                   "n_samples": data.n_samples})
    assert saved.x.shape == (D + 1,) and saved.basis.S.shape == (3, D + 1)  # over the whole parameters
    resumed = sandblaster_lbfgs(model, data, client=client, maxiter=25, history=3, checkpoint_path=path, resume=True)
    assert resumed.nit == straight.nit
    np.testing.assert_array_equal(resumed.x, straight.x)


def _config(model):
    from dasklbfgs.models.persist import model_config

    return model_config(model)


def test_an_evaluation_on_the_cut_has_the_bits_of_the_whole_one_by_direct_calls_or_tasks(client, few_columns) -> None:
    """Direct calls answer at the shards' positions among the active parameters; tasks (what
    backups, rescues and streaming run) are sent the whole vector and their sums are cut back:
    both give the whole evaluation's numbers at the active parameters, bit for bit."""
    from dasklbfgs.solvers.sandblaster.shard_passes import read_positions_by_shard

    data, _ = few_columns
    model = Softmax(D, 2, l2=1e-3)  # two outputs and their intercepts: the col * K + k layout
    x = np.random.default_rng(3).normal(scale=0.1, size=model.n_params)
    whole = MegaBatchEvaluator(client, model, data)
    try:
        active, _ = active_parameters(model, read_positions_by_shard(whole), np.zeros(model.n_params, dtype=bool),
                                      None)
        x = active.expand(active.restrict(x))  # zero off the cut, as a cut run's parameters are
        expected_loss, expected = whole.evaluate(x)
    finally:
        whole.close()
    for direct in (True, False):
        evaluator = MegaBatchEvaluator(client, model, data, direct=direct)
        try:
            evaluator.restrict_to(active)
            loss, grad = evaluator.evaluate(active.restrict(x))
            assert evaluator.stats.direct_evaluations == int(direct)
        finally:
            evaluator.close()
        assert loss == expected_loss
        np.testing.assert_array_equal(grad, active.restrict(expected), strict=True)


def test_standardized_softmax_on_the_cut_reaches_scipys_optimum(client, few_columns) -> None:
    data, columns = few_columns
    model = Softmax(D, 2, l2=1e-3)
    result = sandblaster_lbfgs(model, data, client=client, standardize=True, gtol=1e-10, ftol=1e-15, maxiter=2000)
    assert result.stats["active_parameters"] == 2 * 150 + 2 and result.success, result.message
    reference = scipy_optimum(model, data)
    assert result.fun == pytest.approx(reference.fun, rel=1e-10)
    np.testing.assert_allclose(result.x, reference.x, atol=1e-5)


def test_a_resume_keeps_what_the_saved_state_moved_whatever_x0(client, few_columns, tmp_path) -> None:
    """The first run started away from zero on an unread column (so it kept that column);
    a resume without x0 keeps it too (from the saved state), and ends as the straight run."""
    data, columns = few_columns
    unread = np.setdiff1d(np.arange(D), columns)[0]
    model = Logistic(D, l2=1e-3)
    x0 = np.zeros(D + 1)
    x0[unread] = 1.0
    straight = sandblaster_lbfgs(model, data, client=client, x0=x0, maxiter=20, history=3)
    path = tmp_path / "ckpt"
    sandblaster_lbfgs(model, data, client=client, x0=x0, maxiter=5, history=3, checkpoint_path=path)
    resumed = sandblaster_lbfgs(model, data, client=client, maxiter=20, history=3, checkpoint_path=path, resume=True)
    assert resumed.stats["active_parameters"] == straight.stats["active_parameters"] == 152
    assert resumed.x[unread] != 0.0
    np.testing.assert_array_equal(resumed.x, straight.x)
