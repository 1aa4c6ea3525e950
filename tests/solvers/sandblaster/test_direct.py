"""Evaluations answered by direct calls to the workers (the fast path) against the task path:
the same bits, the same backups and rescues, errors that reach the caller as themselves."""

from __future__ import annotations

import sys
import time

import cloudpickle
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, get_worker

from dasklbfgs import ShardedDataset, connect
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.sandblaster import MegaBatchEvaluator
from dasklbfgs.solvers.sandblaster.portion_service import PortionService
from tests.solvers.sandblaster.test_sandblaster import SlowOnOneWorker

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _evaluate_both_ways(client, model, data, x, **kwargs):
    """Two evaluations by direct calls and two by tasks; returns the two evaluators' results."""
    out = []
    for direct in (True, False):
        evaluator = MegaBatchEvaluator(client, model, data, direct=direct, **kwargs)
        try:
            results = [evaluator.evaluate(x) for _ in range(2)]
            assert evaluator.stats.direct_evaluations == (2 if direct else 0)
            out.append(results)
        finally:
            evaluator.close()
    return out


@pytest.mark.parametrize("layout", ["dense-weighted", "sparse", "sparse-softmax-weighted", "float32"])
def test_direct_calls_give_the_bits_of_the_tasks(client, tmp_path, layout) -> None:
    """Sparse shards are sent only the parameters they read (their columns' coefficients and
    the intercepts) and answer with the gradient there; the tasks get the whole vector."""
    rng = np.random.default_rng(5)
    n, d = 3000, 40
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-2, 2, size=(n, 1))
    weights = None
    y = rng.normal(size=n)
    model = LeastSquares(d, l2=1e-3)
    if layout.startswith("sparse"):
        X = sp.csr_array(X * (rng.uniform(size=(n, d)) < 0.1))
    elif layout == "float32":
        X = X.astype(np.float32)
    if layout.endswith("weighted"):
        weights = rng.uniform(0.1, 3.0, size=n)
    if "softmax" in layout:
        y, model = rng.integers(0, 3, size=n), Softmax(d, 3, l2=1e-3, fit_intercept=False)
    data = ShardedDataset.create(tmp_path / layout, X, y, sample_weight=weights, shard_rows=700)
    x = rng.normal(size=model.n_params)
    (direct, _), (tasks, _) = _evaluate_both_ways(client, model, data, x, portion_rows=300)
    assert direct[0] == tasks[0]
    np.testing.assert_array_equal(direct[1], tasks[1], strict=True)


def _service(client, worker: str) -> dict[str, int]:
    def read(dask_worker):
        service = dask_worker.plugins[PortionService.name]
        return {"running": service.running, "portions_computed": service.portions_computed}

    return client.run(read, workers=[worker])[worker]


def test_a_late_worker_is_backed_up_and_told_to_stop(client, tmp_path) -> None:
    """A straggler's direct call is given up on: its portions are backed up by tasks on the
    idle worker (same bits), and the straggler computes no more of them than it had begun."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1600, 4))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=200)
    x = np.array([0.1, -0.2, 0.3, 0.05, 0.0])
    reference = MegaBatchEvaluator(client, Logistic(4), data, portion_rows=200, backup_tasks=False)
    expected = reference.evaluate(x)
    reference.close()
    slow = sorted(client.scheduler_info()["workers"])[1]
    before = _service(client, slow)["portions_computed"]
    evaluator = MegaBatchEvaluator(client, SlowOnOneWorker(4, slow, 0.4), data, portion_rows=200)
    try:
        loss, grad = evaluator.evaluate(x)
        assert loss == expected[0]
        np.testing.assert_array_equal(grad, expected[1])
        assert evaluator.stats.backups_won > 0 and evaluator.stats.direct_evaluations == 0
        deadline = time.monotonic() + 10
        while _service(client, slow)["running"]:
            assert time.monotonic() < deadline, "the abandoned call kept running"
            time.sleep(0.05)
        # 4 of the 8 portions are the slow worker's: it stopped after the one it was computing
        assert _service(client, slow)["portions_computed"] - before < 4
    finally:
        evaluator.close()


class FailsOnWorkers(Logistic):
    def loss_grad_sum(self, params, X, y):
        try:
            get_worker()
        except ValueError:  # the coordinator's own checks
            return super().loss_grad_sum(params, X, y)
        raise FloatingPointError(f"rows of {len(y)} overflowed")


def test_a_models_error_reaches_the_caller_as_itself(client, tmp_path) -> None:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(600, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=200)
    evaluator = MegaBatchEvaluator(client, FailsOnWorkers(3), data)
    try:
        assert evaluator.direct
        with pytest.raises(FloatingPointError, match=r"rows of \d+ overflowed"):
            evaluator.evaluate(np.zeros(4))
        assert evaluator.stats.restarts == 0  # not mistaken for a lost worker
    finally:
        evaluator.close()


@pytest.mark.parametrize("direct_to_workers, direct", [(False, False), (None, True)])
def test_a_plain_client_calls_the_workers_it_reaches_and_one_that_says_no_uses_tasks(
        client, tmp_path, direct_to_workers, direct) -> None:
    """``direct_to_workers=False`` says the workers may be out of the client's reach: tasks.
    Dask's default, ``None`` (``Client(cluster)``, ``Client("tcp://...")``, as most users make
    one), leaves the choice: the workers answer a direct call, so the evaluations call them."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(600, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=200)
    x = np.array([0.2, -0.1, 0.3, 0.0])
    expected = MegaBatchEvaluator(client, Logistic(3), data)
    with Client(client.scheduler.address, direct_to_workers=direct_to_workers) as plain:
        evaluator = MegaBatchEvaluator(plain, Logistic(3), data)
        try:
            assert bool(evaluator.direct) is direct
            loss, grad = evaluator.evaluate(x)
            assert evaluator.stats.direct_evaluations == (1 if direct else 0)
        finally:
            evaluator.close()
    try:
        assert expected.direct
        reference = expected.evaluate(x)
        assert loss == reference[0]
        np.testing.assert_array_equal(grad, reference[1])
    finally:
        expected.close()


def test_workers_answering_directly_can_still_be_retired(tmp_path) -> None:
    """The service is a worker plugin, not an actor: Dask retires its workers (their shards
    copied out), and the evaluations go on with the same bits."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1200, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=150)
    x = np.array([0.2, -0.1, 0.3, 0.0])
    with connect(n_workers=3, dashboard_address=None) as client:
        evaluator = MegaBatchEvaluator(client, Logistic(3), data, backup_tasks=False)
        expected = evaluator.evaluate(x)
        leaving = sorted(client.scheduler_info()["workers"])[0]
        client.retire_workers([leaving])
        assert leaving not in client.scheduler_info(n_workers=-1)["workers"]
        for _ in range(3):
            loss, grad = evaluator.evaluate(x)
            assert loss == expected[0]
            np.testing.assert_array_equal(grad, expected[1])
        assert evaluator.stats.direct_evaluations == 4
        assert leaving not in evaluator.placement
        evaluator.close()


def test_a_worker_that_cannot_answer_directly_has_its_portions_computed_by_tasks(client, tmp_path) -> None:
    """A worker without the service's handler (a worker closing tears its plugins down before
    it stops listening) answers nothing: its portions go to tasks, with the same bits."""
    from dasklbfgs.solvers.sandblaster.portion_service import HANDLER

    rng = np.random.default_rng(8)
    X = rng.normal(size=(1200, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=150)
    x = np.array([0.2, -0.1, 0.3, 0.0])
    evaluator = MegaBatchEvaluator(client, Logistic(3), data, backup_tasks=False)  # no race with backups
    mute = sorted(client.scheduler_info()["workers"])[0]
    try:
        expected = evaluator.evaluate(x)
        assert evaluator.stats.direct_evaluations == 1
        client.run(lambda dask_worker: dask_worker.handlers.pop(HANDLER) and None, workers=[mute])
        loss, grad = evaluator.evaluate(x)
        assert loss == expected[0]
        np.testing.assert_array_equal(grad, expected[1])
        assert evaluator.stats.direct_evaluations == 1  # this one needed tasks
        assert mute in evaluator.placement  # its shards' portions, computed there by tasks
    finally:
        def restore(dask_worker):
            service = dask_worker.plugins[PortionService.name]
            dask_worker.handlers[HANDLER] = service.portion_sums

        client.run(restore, workers=[mute])
        evaluator.close()


def test_direct_calls_use_every_thread_of_a_worker_with_the_same_bits(tmp_path) -> None:
    rng = np.random.default_rng(9)
    X = rng.normal(size=(2000, 5)) * 10.0 ** rng.uniform(-3, 3, size=(2000, 1))
    data = ShardedDataset.create(tmp_path / "d", X, rng.normal(size=2000), shard_rows=500)
    model = LeastSquares(5, l2=1e-3)
    x = rng.normal(size=model.n_params)
    with connect(n_workers=1, threads_per_worker=2, dashboard_address=None) as threaded:
        (direct, _), (tasks, _) = _evaluate_both_ways(threaded, model, data, x, portion_rows=125)
    assert direct[0] == tasks[0]
    np.testing.assert_array_equal(direct[1], tasks[1], strict=True)


def test_parameters_too_large_to_send_to_every_worker_go_by_tasks(client, tmp_path, monkeypatch) -> None:
    """Past ``DIRECT_UPLOAD_BYTES`` of parameters per evaluation (a wide model on many workers)
    the evaluation scatters them once and goes by tasks: the same bits."""
    from dasklbfgs.solvers.sandblaster import direct_calls

    rng = np.random.default_rng(10)
    X = rng.normal(size=(800, 30))
    data = ShardedDataset.create(tmp_path / "d", X, rng.normal(size=800), shard_rows=200)
    model = LeastSquares(30, l2=1e-3)
    x = rng.normal(size=model.n_params)
    evaluator = MegaBatchEvaluator(client, model, data)
    try:
        expected = evaluator.evaluate(x)
        assert evaluator.stats.direct_evaluations == 1
        monkeypatch.setattr(direct_calls, "DIRECT_UPLOAD_BYTES", x.nbytes)  # one copy fits, two do not
        loss, grad = evaluator.evaluate(x)
        assert evaluator.stats.direct_evaluations == 1 and evaluator.stats.evaluations == 2
        assert loss == expected[0]
        np.testing.assert_array_equal(grad, expected[1])
    finally:
        evaluator.close()


def test_wide_sparse_shards_are_sent_only_their_parameters(client, tmp_path, monkeypatch) -> None:
    """A wide sparse model whose whole parameter vector exceeds ``DIRECT_UPLOAD_BYTES`` still
    evaluates by direct calls: each worker gets only its shards' columns' coefficients, a
    few percent of the vector, and the bits are the tasks'."""
    from dasklbfgs.solvers.sandblaster import direct_calls

    rng = np.random.default_rng(11)
    wide, n = 2**18, 2000
    X = sp.random_array((n, wide), density=20 / wide, format="csr", rng=rng)
    data = ShardedDataset.create(tmp_path / "wide", X, (rng.uniform(size=n) < 0.3).astype(float), shard_rows=500)
    model = Logistic(wide, l2=1e-4)
    x = rng.normal(scale=0.01, size=model.n_params)
    monkeypatch.setattr(direct_calls, "DIRECT_UPLOAD_BYTES", x.nbytes // 4)  # not even one whole copy
    (direct, _), (tasks, _) = _evaluate_both_ways(client, model, data, x)
    assert direct[0] == tasks[0]
    np.testing.assert_array_equal(direct[1], tasks[1], strict=True)
