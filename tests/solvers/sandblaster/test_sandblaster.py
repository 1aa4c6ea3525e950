"""Sandblaster L-BFGS on a real LocalCluster, against scipy's L-BFGS-B in one process."""

from __future__ import annotations

import sys
import time

import cloudpickle
import numpy as np
import pytest
from distributed import get_task_stream, get_worker
from scipy.optimize import minimize

from dasklbfgs import ShardedDataset, connect
from dasklbfgs.errors import (
    ConfigurationError,
    ModelDataMismatchError,
    NonFiniteObjectiveError,
    PerformanceWarning,
)
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs, sandblaster_newton
from dasklbfgs.solvers.sandblaster.portions import shards_fit
from tests._torch import TORCH_TESTS, torch_classifier
from tests.solvers.sandblaster.conftest import load_all

# Test-only model subclasses below travel to the workers by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MODELS = {
    "logistic": lambda d: Logistic(d, l2=1e-3),
    "multinomial": lambda d: Softmax(d, 3, l2=1e-3),
    "regression": lambda d: LeastSquares(d, l2=1e-3),
}
TIGHT = {"gtol": 1e-9, "ftol": 1e-14}


def scipy_reference(model, data, **options):
    X, y = load_all(data)
    return minimize(lambda p: model.objective(p, X, y), np.zeros(model.n_params), jac=True,
                    method="L-BFGS-B", options={"maxiter": 5000, **options})


@pytest.mark.parametrize("kind", ["logistic", "multinomial", "regression"])
@pytest.mark.parametrize("conditioning", ["", "-ill"])
def test_same_optimum_as_scipy(client, datasets, kind, conditioning) -> None:
    data = datasets[kind + conditioning]
    model = MODELS[kind](data.n_features)
    ours = sandblaster_lbfgs(model, data, client=client, maxiter=5000, **TIGHT)
    ref = scipy_reference(model, data, gtol=TIGHT["gtol"], ftol=TIGHT["ftol"])
    assert ours.success, ours.message
    assert ours.fun == pytest.approx(ref.fun, rel=1e-8)
    assert ours.nit <= 1.2 * ref.nit + 1
    X, y = load_all(data)
    np.testing.assert_allclose(ours.jac, model.objective(ours.x, X, y)[1], rtol=1e-10, atol=1e-14)


def test_standardize_cuts_iterations_and_keeps_the_optimum(client, datasets) -> None:
    data = datasets["logistic-very-ill"]
    model = Logistic(data.n_features, l2=1e-3)
    plain = sandblaster_lbfgs(model, data, client=client, maxiter=5000, **TIGHT)
    scaled = sandblaster_lbfgs(model, data, client=client, maxiter=5000, standardize=True, **TIGHT)
    ref = scipy_reference(model, data, **TIGHT)
    assert scaled.success
    assert scaled.fun == pytest.approx(ref.fun, rel=1e-8)
    assert plain.nit >= 5 * scaled.nit
    # The Hessian's eigenvalues span 1e-3 .. 1.4e3 here. scipy's L-BFGS-B, like the unscaled run,
    # stops some 300 steps in on the relative decrease of f (ftol), up to 8e-5 from the optimum
    # along the flattest direction, as the BLAS kernel's rounding steers those steps: Newton's
    # method from there gives the optimum itself, which the standardized run reaches.
    X, y = load_all(data)
    optimum = _logistic_optimum(model, X, y, ref.x)
    np.testing.assert_allclose(scaled.x, optimum, rtol=1e-4, atol=1e-6)
    # The unscaled run is held to what its ftol controls, f: 1e-14 of it a step, over the
    # ~sqrt(1e6) steps the flattest direction takes to settle, leaves ~1e-11 (seen: 3e-14 to 1e-11)
    assert plain.fun == pytest.approx(model.objective(optimum, X, y)[0], rel=1e-10)


def _logistic_optimum(model, X, y, x):
    """A logistic model's optimum to rounding: Newton's method from x, with the exact Hessian of
    the mean log-loss plus (l2 / 2) |coef|^2."""
    rows = np.c_[X, np.ones(len(X))]
    ridge = np.diag(np.r_[np.full(X.shape[1], model.l2), 0.0])
    for _ in range(8):
        p = 1.0 / (1.0 + np.exp(-(rows @ x)))
        x = x - np.linalg.solve((rows * (p * (1 - p))[:, None]).T @ rows / len(X) + ridge, model.objective(x, X, y)[1])
    assert np.max(np.abs(model.objective(x, X, y)[1])) < 1e-13
    return x


def test_bitwise_identical_with_one_or_two_workers_and_with_backups(client, datasets) -> None:
    data = datasets["multinomial"]
    model = Softmax(data.n_features, 3, l2=1e-2)
    kwargs = {"maxiter": 15, "portion_rows": 700}
    two = sandblaster_lbfgs(model, data, client=client, **kwargs)
    no_backup = sandblaster_lbfgs(model, data, client=client, backup_tasks=False, **kwargs)
    with connect(n_workers=1, dashboard_address=None) as single:
        one = sandblaster_lbfgs(model, data, client=single, **kwargs)
    assert two.stats["n_portions"] == 12  # 6 shards of 1000 rows, two portions each
    for other in (no_backup, one):
        assert other.nit == two.nit
        np.testing.assert_array_equal(other.x, two.x)
        assert other.fun == two.fun


REDUCE_GROUP = 8  # the documented reduction: groups of 8 partial sums, then groups of those


def _add_left_to_right(parts):
    loss, sums = 0.0, np.zeros_like(parts[0][1])
    for part_loss, part_sums in parts:
        loss += part_loss
        sums += part_sums
    return loss, sums


def _reduce_in_portion_order(parts):
    """The documented reduction, written out here: consecutive groups of 8 partial sums in
    portion order, each added left to right from zero, then the same over the groups'
    totals until one is left."""
    while len(parts) > 1:
        parts = [_add_left_to_right(parts[i:i + REDUCE_GROUP]) for i in range(0, len(parts), REDUCE_GROUP)]
    return parts[0]


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_evaluation_is_bitwise_the_documented_reduction_in_portion_order(client, tmp_path, layout) -> None:
    """Against a reference computed here with plain numpy, not against the evaluator itself
    (the other bitwise tests compare the code with itself, and would pass for any fixed
    order): each portion's ``loss_grad_sum`` on rows sliced out of its shard as a worker
    loads it, reduced in portion order. Sparse rows: the portions send compact sums of
    their columns, and the result is still the dense vectors' reduction, bit for bit."""
    import scipy.sparse as sp

    rng = np.random.default_rng(11)
    n, d, shard_rows, portion_rows = 5000, 6 if layout == "dense" else 1000, 600, 140
    # Rows spanning six decades: the portions' partial sums differ widely in magnitude, so
    # the order of the additions shows in the last bits (checked below).
    scale = 10.0 ** rng.uniform(-3, 3, size=(n, 1))
    X = rng.normal(size=(n, d)) * scale
    if layout == "sparse":  # ~5 values a row: a portion touches half the columns
        X = sp.csr_array(X * (rng.uniform(size=(n, d)) < 5 / d))
    data = ShardedDataset.create(tmp_path / "mixed", X, rng.normal(size=n) * scale[:, 0] * 3, shard_rows=shard_rows)
    model = LeastSquares(d, l2=1e-3)
    x = rng.normal(size=model.n_params)

    # Portions as documented: every shard cut into equal pieces of at most portion_rows rows.
    plan = []
    for lo, hi in data.shard_bounds:
        pieces = -(-(hi - lo) // portion_rows)
        edges = [lo + (hi - lo) * i // pieces for i in range(pieces + 1)]
        plan += [(lo, start, stop) for start, stop in zip(edges[:-1], edges[1:])]
    assert len(plan) == 8 * 5 + 2  # 8 full shards in 5 pieces, the 200-row last one in 2
    shards = {lo: data.load_rows(lo, hi) for lo, hi in data.shard_bounds}  # one contiguous read per shard
    parts = []
    for lo, start, stop in plan:
        X, y = shards[lo]
        parts.append(model.loss_grad_sum(x, X[start - lo:stop - lo], y[start - lo:stop - lo]))
    loss, sums = _reduce_in_portion_order(parts)
    # The data make the order matter: the reverse order gives other bits.
    reversed_loss, reversed_sums = _reduce_in_portion_order(parts[::-1])
    assert not np.array_equal(reversed_sums, sums)
    assert reversed_loss != loss or layout == "sparse"  # on these sparse rows the losses happen to round alike

    evaluator = MegaBatchEvaluator(client, model, data, portion_rows=portion_rows)
    try:
        assert [(p.start, p.stop) for p in evaluator.portions] == [(start, stop) for _, start, stop in plan]
        for _ in range(2):  # the second evaluation places portions by measured speed: same bits
            got_loss, got_sums = evaluator.evaluate(x)
            assert got_loss == loss
            np.testing.assert_array_equal(got_sums, sums, strict=True)
    finally:
        evaluator.close()


def wait_until_quiet(client, timeout=10.0) -> None:
    """Wait for tasks a test cancelled, and direct calls it gave up on, that a worker thread
    is still running to end."""
    from dasklbfgs.solvers.sandblaster.portion_service import PortionService

    def busy(dask_worker) -> int:
        service = dask_worker.plugins.get(PortionService.name)
        return dask_worker.state.executing_count + (service.running if service is not None else 0)

    deadline = time.monotonic() + timeout
    while any(client.run(busy).values()):
        assert time.monotonic() < deadline, "workers still busy"
        time.sleep(0.05)


class SlowOnOneWorker(Logistic):
    """A Logistic model whose portions sleep on one chosen worker (a straggler)."""

    def __init__(self, n_features, slow_worker, delay, **kw):
        super().__init__(n_features, **kw)
        self.slow_worker, self.delay = slow_worker, delay

    def loss_grad_sum(self, params, X, y):
        try:
            here = get_worker().address
        except ValueError:  # not on a worker (the coordinator's own checks)
            here = None
        if here == self.slow_worker:
            time.sleep(self.delay)
        return super().loss_grad_sum(params, X, y)


def test_backup_tasks_beat_a_straggler_with_identical_results(client, datasets) -> None:
    data = datasets["logistic"]
    slow = sorted(client.scheduler_info()["workers"])[1]
    fast_model = Logistic(data.n_features, l2=1e-3)
    slow_model = SlowOnOneWorker(data.n_features, slow, 0.25, l2=1e-3)
    reference = sandblaster_lbfgs(fast_model, data, client=client, maxiter=6)
    with_backups = sandblaster_lbfgs(slow_model, data, client=client, maxiter=6)
    assert with_backups.stats["backups_won"] > 0
    np.testing.assert_array_equal(with_backups.x, reference.x)
    without = sandblaster_lbfgs(slow_model, data, client=client, maxiter=3, backup_tasks=False)
    assert without.stats["backups_launched"] == 0
    per_eval_with = with_backups.stats["eval_seconds_median"]
    # Without backups every evaluation waits for the 0.25 s portion; with them it does not
    # (compared with each other, not with a clock: the machine may be busy).
    assert without.stats["eval_seconds_median"] > 0.25
    assert per_eval_with < without.stats["eval_seconds_median"]
    wait_until_quiet(client)


def test_streaming_backups_beat_a_straggler_with_identical_results(client, datasets) -> None:
    """Out of core, Dask hands portions to free workers; the straggler's last portion in
    flight is read again on the idle worker, and the sums are bitwise those of the cache."""
    data = datasets["logistic"]
    slow = sorted(client.scheduler_info()["workers"])[1]
    x = np.full(data.n_features + 1, 0.1)
    cached = MegaBatchEvaluator(client, Logistic(data.n_features, l2=1e-3), data, portion_rows=250)
    reference = cached.evaluate(x)
    cached.close()
    for backup_tasks in (True, False):
        evaluator = MegaBatchEvaluator(client, SlowOnOneWorker(data.n_features, slow, 0.5, l2=1e-3), data,
                                       portion_rows=250, cache=False, backup_tasks=backup_tasks)
        loss, grad = evaluator.evaluate(x)
        assert loss == reference[0]
        np.testing.assert_array_equal(grad, reference[1])
        if backup_tasks:
            assert evaluator.stats.backups_won > 0
        else:
            assert evaluator.stats.backups_launched == 0
        evaluator.close()
    wait_until_quiet(client)


def test_work_drifts_away_from_a_persistent_straggler(client, datasets) -> None:
    """Backups copy the straggler's shards to the helper; later evaluations give the helper
    more of those portions, so fewer backups are needed, and every sum stays bitwise equal."""
    data = datasets["logistic"]
    slow = sorted(client.scheduler_info()["workers"])[1]
    evaluator = MegaBatchEvaluator(client, SlowOnOneWorker(data.n_features, slow, 0.05, l2=1e-3), data,
                                   portion_rows=250)
    x = np.full(data.n_features + 1, 0.1)
    launched, results = [], []
    for _ in range(5):
        before = evaluator.stats.backups_launched
        results.append(evaluator.evaluate(x))
        launched.append(evaluator.stats.backups_launched - before)
    evaluator.close()
    assert launched[0] > 0 and launched[-1] < launched[0], launched
    for loss, grad in results[1:]:
        assert loss == results[0][0]
        np.testing.assert_array_equal(grad, results[0][1])
    wait_until_quiet(client)


def test_shards_load_once_and_never_move(client, datasets) -> None:
    data = datasets["regression"]
    wait_until_quiet(client)
    client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
    result = sandblaster_lbfgs(LeastSquares(data.n_features), data, client=client, maxiter=20,
                               backup_tasks=False)
    assert result.nfev >= 5
    moved = client.run(lambda dask_worker: [k for t in dask_worker.transfer_incoming_log
                                            for k in t["keys"] if "sandblaster-shard" in str(k)])
    assert moved == {w: [] for w in moved}
    prefixes = client.run_on_scheduler(
        lambda dask_scheduler: {k: v.states.get("memory", 0) + v.states.get("released", 0)
                                + v.states.get("forgotten", 0)
                                for k, v in dask_scheduler.task_prefixes.items()})
    assert "sandblaster-gradient" in prefixes and "sandblaster-shard" in prefixes


def test_streaming_out_of_core_reaches_the_cached_result(client, datasets) -> None:
    """cache=False keeps no shard in worker memory: every evaluation reads Zarr, one task
    per shard; the sums group differently, so iterates agree to rounding, not bitwise."""
    data = datasets["logistic-ill"]
    model = Logistic(data.n_features, l2=1e-3)
    cached = sandblaster_lbfgs(model, data, client=client, cache=True, standardize=True)
    streamed = sandblaster_lbfgs(model, data, client=client, cache=False, standardize=True)
    assert cached.stats["cached"] and not streamed.stats["cached"]
    assert streamed.stats["n_portions"] == data.n_shards and streamed.stats["load_seconds"] == 0
    np.testing.assert_allclose(streamed.x, cached.x, rtol=1e-8, atol=1e-10)
    assert streamed.nit == cached.nit
    held = client.run_on_scheduler(
        lambda dask_scheduler: [k for k in dask_scheduler.tasks if "sandblaster-shard" in str(k)])
    assert held == []


def test_cache_auto_streams_only_what_does_not_fit() -> None:
    gib = 1 << 30
    assert shards_fit(gib, [gib, gib])                   # half of 2 GiB
    assert not shards_fit(gib + 1, [gib, gib])
    assert not shards_fit(6 * gib, [gib, gib])           # out of core: 3x the limits
    assert shards_fit(6 * gib, [gib, 0])                 # a worker without a limit
    assert shards_fit(1, [])


def test_callback_and_limits(client, datasets) -> None:
    data = datasets["logistic"]
    model = Logistic(data.n_features)
    seen = []

    def stop_after_two(intermediate_result):
        seen.append(intermediate_result.fun)
        if len(seen) == 2:
            raise StopIteration

    stopped = sandblaster_lbfgs(model, data, client=client, callback=stop_after_two)
    assert (stopped.nit, stopped.status, stopped.success) == (2, 99, False)
    limited = sandblaster_lbfgs(model, data, client=client, maxiter=1)
    assert not limited.success and "ITERATIONS REACHED LIMIT" in limited.message
    assert limited.history[0]["step"] == 1 and "time" in limited.history[0]


def test_accepts_a_path_and_x0(client, datasets) -> None:
    data = datasets["logistic"]
    model = Logistic(data.n_features)
    first = sandblaster_lbfgs(model, str(data.path), client=client, maxiter=3)
    warm = sandblaster_lbfgs(model, data, client=client, x0=first.x)
    cold = sandblaster_lbfgs(model, data, client=client)
    assert warm.fun == pytest.approx(cold.fun, rel=1e-8)
    assert warm.nit < cold.nit


def test_default_client_is_used_when_none_given(client, datasets) -> None:
    data = datasets["logistic"]
    result = sandblaster_lbfgs(Logistic(data.n_features), data, maxiter=2)
    assert result.nit == 2


def test_errors(client, datasets, tmp_path) -> None:
    data = datasets["multinomial"]
    with pytest.raises(ModelDataMismatchError, match=r"expects 9 features but the dataset at .* has 8"):
        sandblaster_lbfgs(Logistic(9), data, client=client)
    with pytest.raises(ModelDataMismatchError, match=r"Logistic needs integer labels in 0..1"):
        sandblaster_lbfgs(Logistic(8), data, client=client)
    with pytest.raises(ModelDataMismatchError, match=r"x0 must have shape \(27,\) .* got \(3,\)"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, x0=np.zeros(3))
    with pytest.raises(ModelDataMismatchError, match=r"x0 is not finite: x0\[0\] = inf"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, x0=np.r_[np.inf, np.zeros(26)])
    with pytest.raises(ConfigurationError, match=r"l2 must be a non-negative finite number, got -0.1"):
        Softmax(8, 3, l2=-0.1)
    with pytest.raises(ConfigurationError, match=r"portion_rows must be an integer >= 1 or None, got 0"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, portion_rows=0)
    with pytest.raises(ConfigurationError, match=r"cache must be True, False or 'auto', got 'yes'"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, cache="yes")
    with pytest.raises(ConfigurationError, match=r"cache must be True, False or 'auto', got 1"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, cache=1)
    with pytest.raises(ConfigurationError, match=r"maxiter must be an integer >= 1, got 0"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, maxiter=0)
    with pytest.raises(ConfigurationError, match=r"data must be a ShardedDataset or a path or URL of one, got ndarray"):
        sandblaster_lbfgs(Softmax(8, 3), np.zeros((3, 8)), client=client)
    with pytest.raises(TypeError, match=r"sandblaster does not take option 'max_iter' \(did you mean 'maxiter'\?\)"):
        sandblaster_lbfgs(Softmax(8, 3), data, client=client, max_iter=3)
    huge = ShardedDataset.create(tmp_path / "huge", np.ones((20, 2)), np.full(20, 1e200), shard_rows=10)
    with pytest.raises(NonFiniteObjectiveError, match=r"the objective at x0 is not finite \(f = inf\).*huge"):
        sandblaster_lbfgs(LeastSquares(2), huge, client=client)


def test_constant_column_with_standardize(client, tmp_path) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 3))
    X[:, 1] = 0.1  # constant: its rounding-noise variance must not become a scale of 1e-15
    y = (X[:, 0] + 0.3 * rng.normal(size=2000) > 0).astype(np.int64)
    data = ShardedDataset.create(tmp_path / "c", X, y, shard_rows=500)
    model = Logistic(3, l2=1e-3)
    # ftol=1e-14 asks for the last bits: whether the line search then finds a step depends on
    # the rounding of the portion order. At ftol=1e-12 every portion plan converges.
    result = sandblaster_lbfgs(model, data, client=client, standardize=True, gtol=1e-7, ftol=1e-12)
    ref = scipy_reference(model, data, **TIGHT)
    assert result.success and result.fun == pytest.approx(ref.fun, rel=1e-8)


def test_float32_data_converges(client, tmp_path) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(6000, 5)).astype(np.float32)
    y = (X @ np.arange(1.0, 6.0) + rng.normal(size=6000) > 0).astype(np.int64)
    data = ShardedDataset.create(tmp_path / "f32", X, y, shard_rows=1500)
    model = Logistic(5, l2=1e-3)
    result = sandblaster_lbfgs(model, data, client=client)
    ref = scipy_reference(model, data)
    assert result.status == 0, result.message
    assert result.fun == pytest.approx(ref.fun, rel=1e-6)


def test_errors_propagate_with_the_default_client(client, datasets) -> None:
    with pytest.raises(ConfigurationError, match=r"portion_rows must be an integer >= 1 or None, got 0"):
        sandblaster_lbfgs(Logistic(8), datasets["logistic"], portion_rows=0)


def test_callback_sees_model_coordinates_with_standardize(client, datasets) -> None:
    data = datasets["logistic-very-ill"]
    model = Logistic(data.n_features, l2=1e-3)
    X, y = load_all(data)
    seen = []
    result = sandblaster_lbfgs(model, data, client=client, standardize=True,
                               callback=lambda intermediate_result: seen.append((intermediate_result,
                                                                                 intermediate_result.x)))
    assert len(seen) == result.nit
    last, x = seen[-1]
    np.testing.assert_array_equal(x, result.x)
    assert last.fun == pytest.approx(model.objective(x, X, y)[0], rel=1e-10)


@pytest.mark.parametrize("eval_every", [None, 4])
def test_held_out_scores_at_the_end_whatever_eval_every(client, datasets, eval_every) -> None:
    model = Logistic(8, l2=1e-3)
    held_out = datasets["logistic-ill"]  # other rows of the same shape
    result = sandblaster_lbfgs(model, datasets["logistic"], client=client, eval_data=held_out, eval_every=eval_every)
    scored = [h["step"] for h in result.history if "eval_objective" in h]
    expected = [] if eval_every is None else list(range(eval_every, result.nit + 1, eval_every))
    assert scored == sorted(set(expected) | {result.nit})
    from dasklbfgs.scoring import evaluate

    assert result.history[-1]["eval_objective"] == pytest.approx(
        evaluate(model, result.x, held_out)["objective"], rel=1e-12)


def test_held_out_data_is_cached_and_scored_by_direct_calls(client, datasets) -> None:
    """Every eval_every: the held-out shards are cached for the run and scored by the
    evaluator's direct calls (no task reads them from the store, none summarises them), with
    the figures dasklbfgs.evaluate gives at each iterate; and released at the end."""
    from dasklbfgs.scoring import evaluate

    model, held_out = Softmax(8, 3, l2=1e-2), datasets["multinomial-ill"]
    iterates = {}
    keys_before = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks)))
    with get_task_stream(client=client) as stream:
        result = sandblaster_lbfgs(model, datasets["multinomial"], client=client, eval_data=held_out, maxiter=12,
                                   callback=lambda intermediate: iterates.update({intermediate.step: intermediate.x}))
    assert len(result.history) >= 5 and all("eval_accuracy" in entry for entry in result.history)
    for entry in (result.history[3], result.history[-1]):
        expected = evaluate(model, iterates[entry["step"]], held_out)
        assert entry["eval_objective"] == pytest.approx(expected["objective"], rel=1e-12)
        assert entry["eval_accuracy"] == pytest.approx(expected["accuracy"], rel=1e-12)
    tasks = [str(task["key"]) for task in stream.data]
    assert not [key for key in tasks if "summary" in key or "ranked" in key], tasks
    left = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))) - keys_before
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:  # releases are asynchronous
        time.sleep(0.1)
        left = set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))) - keys_before
    assert not left


def test_the_default_run_is_bitwise_the_same_on_any_cluster(datasets) -> None:
    """Without portion_rows the plan comes from the data alone (about 8 portions, at most a
    shard each), so one single-thread worker and three two-thread workers agree bitwise: L-BFGS's
    iterates, a torch module's, and Newton's iterates and Hessians."""
    data = datasets["multinomial"]
    models = [Softmax(data.n_features, 3, l2=1e-2)]
    if TORCH_TESTS:  # a user's torch module too: one intra-op thread per block, whatever the worker's
        models.append(torch_classifier(data.n_features, 3, l2=1e-2))
    runs: list[list] = [[], []]
    for runs_here, (n_workers, threads) in zip(runs, ((1, 1), (3, 2))):
        with connect(n_workers=n_workers, threads_per_worker=threads, dashboard_address=None) as cluster:
            runs_here.extend(sandblaster_lbfgs(model, data, client=cluster, maxiter=15) for model in models)
            # Newton's procedure: the Hessian sums added in the same portion order
            runs_here.append(sandblaster_newton(models[0], data, client=cluster, gtol=1e-12))
    np.testing.assert_array_equal(runs[0][-1].hess, runs[1][-1].hess)
    for one, many in zip(*runs):
        assert one.stats["n_portions"] == many.stats["n_portions"] == 12  # 6000 rows / 8 -> 750; 6 shards in 2 each
        assert one.nit == many.nit
        np.testing.assert_array_equal(one.x, many.x)
        assert one.fun == many.fun


def test_tiny_portions_warn_that_overhead_will_dominate(client, tmp_path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2100, 2))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=700)
    with pytest.warns(PerformanceWarning, match=r"portion_rows=1 cuts the data into 2,100 portions"):
        evaluator = MegaBatchEvaluator(client, Logistic(2), data, portion_rows=1)
    evaluator.close()


def test_param_shards_without_sharded_state_are_refused(datasets) -> None:
    with pytest.raises(ConfigurationError, match=r"n_param_shards applies to state='sharded' .*got "
                                                 r"n_param_shards=3 with state='local'"):
        sandblaster_lbfgs(Logistic(8), datasets["logistic"], n_param_shards=3)


def test_many_shards_do_not_warn_about_a_portion_rows_nobody_gave(client, tmp_path) -> None:
    """Portions never cross shards: with more than 2,000 shards the default plan has as many
    portions, and a warning that blamed portion_rows would be false."""
    X = np.random.default_rng(0).normal(size=(2100, 2))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=1)
    evaluator = MegaBatchEvaluator(client, Logistic(2), data, cache=False)  # raises if it warns
    assert len(evaluator.portions) == 2100
    evaluator.close()


def test_l1_runs_owlqn_to_the_in_process_and_scikit_learn_optimum(client, datasets) -> None:
    from sklearn.linear_model import LogisticRegression

    from dasklbfgs import minimize as train
    from dasklbfgs.optim import LBFGSOptions, owlqn_minimize

    data = datasets["logistic-ill"]  # column scales 0.1 .. 10: the L1 weights differ per theta coordinate
    X, y = load_all(data)
    l1 = 0.01
    model = Logistic(8, l1=l1)
    local, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(9), model.l1_weights(),
                              LBFGSOptions(**TIGHT))
    reference = LogisticRegression(l1_ratio=1.0, C=1.0 / (X.shape[0] * l1), solver="saga", tol=1e-10,
                                   max_iter=100_000).fit(X, y)
    theirs = np.r_[reference.coef_.ravel(), reference.intercept_]
    objective = lambda w: model.objective(w, X, y)[0] + l1 * np.abs(w[:8]).sum()  # noqa: E731
    support = np.flatnonzero(local.x)
    assert 0 < support.size < 9 and local.x[8] != 0.0  # some coefficients exactly zero, the intercept not
    np.testing.assert_array_equal(support, np.flatnonzero(np.abs(theirs) > 1e-8))
    assert abs(local.fun - objective(theirs)) <= 1e-6 * local.fun
    runs = {}
    for standardize, state in ((False, "local"), (True, "local"), (True, "sharded")):
        shards = {"n_param_shards": 2} if state == "sharded" else {}
        runs[standardize, state] = result = sandblaster_lbfgs(model, data, client=client, standardize=standardize,
                                                              state=state, maxiter=500, **shards, **TIGHT)
        assert result.success, result.message
        assert abs(result.fun - local.fun) <= 1e-6 * local.fun
        assert result.fun == pytest.approx(objective(result.x), rel=1e-12)  # fun counts the L1 term
        np.testing.assert_array_equal(np.flatnonzero(result.x), support)  # exact zeros, mapped back too
    # the vector shards do the pseudo-gradient, alignment and projection: the local mode's iterates
    local_run, sharded_run = runs[True, "local"], runs[True, "sharded"]
    assert sharded_run.nit == local_run.nit and sharded_run.nfev == local_run.nfev
    np.testing.assert_allclose(sharded_run.x, local_run.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sharded_run.jac, local_run.jac, rtol=1e-7, atol=1e-10)
    with pytest.raises(ConfigurationError, match=r"solver 'downpour' does not minimise an l1 penalty.*'sandblaster'"):
        train(model, data, "downpour", client=client)


@pytest.fixture(scope="module")
def wide_sparse(tmp_path_factory) -> ShardedDataset:
    """Sparse logistic rows (a few values a row over 300 columns), 8 shards."""
    import scipy.sparse as sp

    rng = np.random.default_rng(21)
    n, d = 4000, 300
    X = sp.random(n, d, density=0.02, format="csr", random_state=4, data_rvs=lambda k: np.ones(k))
    truth = rng.normal(size=d) * 2
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ truth)))).astype(np.int64)
    return ShardedDataset.create(tmp_path_factory.mktemp("wide") / "d", X, y, shard_rows=500)


def test_an_online_start_then_lbfgs_reaches_scipys_optimum_with_the_same_bits_anywhere(client, wide_sparse) -> None:
    """Online passes of Adagrad per shard, averaged in shard order, then L-BFGS: the optimum is
    scipy's, and the bits are the same whether the passes ran on cached shards or on shards
    read from Zarr by whichever worker."""
    model = Logistic(wide_sparse.n_features, l2=1e-3)
    X, y = wide_sparse.load_rows(0, wide_sparse.n_samples)
    reference = minimize(lambda x: model.objective(x, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B",
                         options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 5000})
    runs = [sandblaster_lbfgs(model, wide_sparse, client=client, online_passes=2, online_learning_rate=0.1,
                              gtol=1e-9, ftol=1e-15, cache=cache) for cache in (True, False)]
    cached, streamed = runs
    np.testing.assert_array_equal(cached.x, streamed.x, strict=True)
    assert cached.success and cached.fun == pytest.approx(reference.fun, rel=1e-10)
    np.testing.assert_allclose(cached.x, reference.x, atol=1e-5)
    online = cached.stats["online"]
    losses = online["progressive_loss"]
    assert online["passes"] == 2 and len(losses) == 2 and losses[1] < losses[0] < np.log(2)  # better than zeros
    assert online == {**streamed.stats["online"], "seconds": online["seconds"]}


def test_online_passes_refuse_what_they_cannot_do(client, wide_sparse, datasets) -> None:
    model = Logistic(wide_sparse.n_features)
    diverged = r"online pass 1 of 1 diverged \(online_learning_rate=1e\+308, progressive loss nan\): lower the rate"
    with pytest.raises(NonFiniteObjectiveError, match=diverged):
        sandblaster_lbfgs(model, wide_sparse, client=client, online_passes=1, online_learning_rate=1e308)
    with pytest.raises(ConfigurationError, match="online_passes steps the whole model .* model_partitions=2"):
        sandblaster_lbfgs(Softmax(8, 3), datasets["multinomial"], client=client, online_passes=1,
                          model_partitions=2)
    with pytest.raises(ConfigurationError, match="online_learning_rate must be"):
        sandblaster_lbfgs(model, wide_sparse, client=client, online_passes=1, online_learning_rate=0)


@pytest.mark.parametrize("standardize", [False, True], ids=["raw", "standardized"])
def test_bounded_coefficients_are_l_bfgs_bs_optimum(client, datasets, standardize) -> None:
    """Bounds on the coefficients (per feature, the intercept free): the projected method's
    optimum is scipy's L-BFGS-B's on the same objective, every bound it meets held exactly."""
    data = datasets["logistic"]
    X, y = load_all(data)
    upper = [0.5, np.inf, 0.2, np.inf, np.inf, 0.1, np.inf, np.inf]
    model = Logistic(8, l2=1e-3, lower_bounds=-0.1, upper_bounds=upper)
    result = sandblaster_lbfgs(model, data, client=client, gtol=1e-9, ftol=1e-15, standardize=standardize)
    lower_all, upper_all = model.bounds()
    reference = minimize(lambda w: model.objective(w, X, y), np.zeros(9), jac=True, method="L-BFGS-B",
                         bounds=list(zip(lower_all, upper_all)), options={"gtol": 1e-12, "ftol": 1e-16})
    assert result.success, result.message
    np.testing.assert_allclose(result.x, reference.x, atol=1e-6)
    on_bounds = np.isclose(reference.x[:8], -0.1) | np.isclose(reference.x[:8], upper)
    assert on_bounds.sum() >= 2 and np.all((result.x[:8] == -0.1) | (result.x[:8] == upper) | ~on_bounds)


def test_solvers_that_do_not_keep_bounds_refuse_them(client, datasets) -> None:
    from dasklbfgs.models.registry import model_for_dataset

    with pytest.raises(ConfigurationError, match=r"solver 'downpour' does not keep bounds on the parameters, and "
                                                 r"LeastSquares\(.*lower_bounds=0.0.*\) has them .*; train it "
                                                 r"with solver 'sandblaster'"):
        from dasklbfgs import minimize as fit

        fit(LeastSquares(8, lower_bounds=0.0), datasets["regression"], "downpour", client=client)
    data = datasets["regression"]
    assert model_for_dataset("least_squares", data, non_negative=True).bounds()[0][:8].tolist() == [0.0] * 8
    with pytest.raises(ConfigurationError, match="non_negative is lower_bounds=0; give one of them, not both"):
        model_for_dataset("least_squares", data, non_negative=True, lower_bounds=-1.0)
    with pytest.raises(ConfigurationError, match=r"bounds \(lower_bounds, upper_bounds, non_negative\) apply to the "
                                                 r"linear models"):
        model_for_dataset("mlp", datasets["multinomial"], upper_bounds=1.0)
