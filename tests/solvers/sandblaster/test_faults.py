"""A worker killed (SIGKILL) in the middle of a Sandblaster evaluation."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import cloudpickle
import numpy as np
import pytest

from dasklbfgs import ShardedDataset, connect
from dasklbfgs.models import Logistic
from dasklbfgs.sandblaster import MegaBatchEvaluator, sandblaster_lbfgs
from tests._kills import kill_at_iteration
from tests._torch import TORCH_TESTS, torch_classifier
from tests.solvers.sandblaster.test_sandblaster import SlowOnOneWorker

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SlowLogistic(Logistic):
    """Each portion takes at least 0.3 s, so a kill lands mid-evaluation."""

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.3)
        return super().loss_grad_sum(params, X, y)


@pytest.mark.parametrize("backup_tasks", [True, False])
def test_evaluation_survives_a_killed_worker_bitwise(tmp_path, backup_tasks) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, 3))
    data = ShardedDataset.create(tmp_path / "d", X, (X[:, 0] > 0).astype(np.int64), shard_rows=100)
    x = np.array([0.1, -0.2, 0.3, 0.05])
    with connect(n_workers=2, dashboard_address=None) as client:
        evaluator = MegaBatchEvaluator(client, SlowLogistic(3), data, portion_rows=100, backup_tasks=backup_tasks)
        undisturbed = evaluator.evaluate(x)
        out = {}
        thread = threading.Thread(target=lambda: out.setdefault("r", evaluator.evaluate(x)), daemon=True)
        thread.start()
        time.sleep(0.5)
        victim = sorted(client.scheduler_info()["workers"])[0]
        os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive(), "evaluation hung after the worker was killed"
        loss, grad = out["r"]
        assert loss == undisturbed[0]
        np.testing.assert_array_equal(grad, undisturbed[1])
        evaluator.close()


class PausingLogistic(Logistic):
    """20 ms per portion: an L-BFGS run long enough to kill a worker in the middle."""

    def loss_grad_sum(self, params, X, y):
        time.sleep(0.02)
        return super().loss_grad_sum(params, X, y)


def _pausing_bce(outputs, y):
    """Binary cross-entropy after 20 ms (one block per portion): a torch model as slow as
    PausingLogistic."""
    from torch import nn

    time.sleep(0.02)
    return nn.functional.binary_cross_entropy_with_logits(outputs[:, 0], y.to(outputs.dtype), reduction="none")


def test_a_whole_run_survives_a_killed_worker_bitwise(tmp_path) -> None:
    """The numpy models and a user's torch module alike (its sums made on one intra-op thread)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(2400, 4))
    data = ShardedDataset.create(tmp_path / "d", X, (X @ [1.0, -1.0, 0.5, 0.0] > 0).astype(np.int64),
                                 shard_rows=300)
    models = [PausingLogistic(4, l2=1e-2)]
    if TORCH_TESTS:
        models.append(torch_classifier(4, 1, loss=_pausing_bce, task="classification", l2=1e-2))
    with connect(n_workers=2, dashboard_address=None) as client:
        for model in models:
            client.wait_for_workers(2, timeout=60)  # the killed one's nanny has started it again
            undisturbed = sandblaster_lbfgs(model, data, client=client, maxiter=12, portion_rows=150)
            kill, killed = kill_at_iteration(client, 3, victim=0)
            disturbed = sandblaster_lbfgs(model, data, client=client, maxiter=12, portion_rows=150, callback=kill)
            assert killed and disturbed.nit == undisturbed.nit, model
            np.testing.assert_array_equal(disturbed.x, undisturbed.x)
            assert disturbed.fun == undisturbed.fun


def _logistic_data(path, rows):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(rows, 4))
    return ShardedDataset.create(path, X, (X[:, 0] > 0).astype(np.int64), shard_rows=300)


def _depart(client, worker, how) -> None:
    if how == "kill":
        os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)
    else:
        client.retire_workers([worker])


@pytest.mark.parametrize("how", ["kill", "retire"])
def test_a_helper_holding_backup_copies_can_leave(tmp_path, how) -> None:
    """Backups leave copies of the straggler's shards on the helpers; one helper leaves and
    the following evaluations still give the undisturbed bits."""
    data = _logistic_data(tmp_path / "d", 2400)
    x = np.array([0.1, -0.2, 0.3, 0.05, 0.0])
    with connect(n_workers=3, dashboard_address=None) as client:
        workers = sorted(client.scheduler_info()["workers"])
        reference = MegaBatchEvaluator(client, Logistic(4), data, portion_rows=100, backup_tasks=False)
        expected = reference.evaluate(x)
        reference.close()
        evaluator = MegaBatchEvaluator(client, SlowOnOneWorker(4, workers[0], 0.1), data, portion_rows=100)
        evaluator.evaluate(x)
        helpers = sorted({w for copies in evaluator.cached.copies.values() for w in copies})
        assert helpers, "the straggler's shards were never copied"
        _depart(client, helpers[0], how)
        for _ in range(4):
            loss, grad = evaluator.evaluate(x)
            assert loss == expected[0]
            np.testing.assert_array_equal(grad, expected[1])
        evaluator.close()


def test_shard_copies_made_after_a_departure_never_reuse_a_key(tmp_path) -> None:
    """A copy dropped with its worker must not lend its key to the next copy of that shard
    (Dask would answer with the old, cancelled or still-live, key: a crash in who_has)."""
    data = _logistic_data(tmp_path / "d", 1200)
    x = np.array([0.1, -0.2, 0.3, 0.05, 0.0])
    with connect(n_workers=4, dashboard_address=None) as client:
        evaluator = MegaBatchEvaluator(client, Logistic(4), data, portion_rows=100, backup_tasks=False)
        expected = evaluator.evaluate(x)
        holder = client.who_has([evaluator.cached.shards[0]])[evaluator.cached.shards[0].key][0]
        first, second, third = [w for w in sorted(client.scheduler_info()["workers"]) if w != holder]
        evaluator.cached.keep_copy(0, first)
        evaluator.cached.keep_copy(0, second)
        client.retire_workers([first])
        assert evaluator.evaluate(x)[0] == expected[0]
        evaluator.cached.keep_copy(0, third)
        for _ in range(2):
            loss, grad = evaluator.evaluate(x)
            assert loss == expected[0]
            np.testing.assert_array_equal(grad, expected[1])
        assert set(evaluator.cached.copies[0]) == {second, third}
        assert len({f.key for f in evaluator.cached.copies[0].values()}) == 2
        evaluator.close()


def test_a_dataset_deleted_during_a_streaming_run_is_named(tmp_path) -> None:
    import shutil

    from dasklbfgs.errors import NotADatasetError

    data = _logistic_data(tmp_path / "d", 1200)

    def delete_at_iteration_2(intermediate):
        if intermediate.step == 2:
            shutil.rmtree(tmp_path / "d")

    with connect(n_workers=2, dashboard_address=None) as client:
        with pytest.raises(NotADatasetError, match=r"no dataset at '.*/d' any more"):
            sandblaster_lbfgs(Logistic(4), data, client=client, cache=False, maxiter=10,
                              callback=delete_at_iteration_2)


def _shard_counts(client, evaluator) -> dict[str, int]:
    where = client.who_has(evaluator.cached.shards)
    counts = {w: 0 for w in client.scheduler_info()["workers"]}
    for shard in evaluator.cached.shards:
        counts[min(where[shard.key])] += 1
    return counts


def test_shards_move_to_a_worker_that_joins(tmp_path) -> None:
    """A worker added to the cluster gets shards (moved, not copied: the old holder drops
    them) within a few evaluations and computes their portions; the sums keep their bits."""
    data = _logistic_data(tmp_path / "d", 2400)  # 8 shards
    x = np.array([0.1, -0.2, 0.3, 0.05, 0.0])
    with connect(n_workers=2, dashboard_address=None) as client:
        evaluator = MegaBatchEvaluator(client, Logistic(4), data, portion_rows=100, backup_tasks=False)
        expected = evaluator.evaluate(x)
        before = set(client.scheduler_info()["workers"])
        client.cluster.scale(4)
        client.wait_for_workers(4)
        [*joined] = set(client.scheduler_info()["workers"]) - before
        for _ in range(100):  # each evaluation finishes the moves whose copies have arrived
            loss, grad = evaluator.evaluate(x)
            assert loss == expected[0]
            np.testing.assert_array_equal(grad, expected[1])
            if evaluator.stats.shards_moved == 4 and set(joined) <= set(evaluator.placement):
                break
            time.sleep(0.05)
        assert sorted(_shard_counts(client, evaluator).values()) == [2, 2, 2, 2]
        assert evaluator.stats.shards_moved == 4
        assert set(joined) <= set(evaluator.placement)
        evaluator.close()


def test_a_run_uses_a_worker_added_midway_and_keeps_its_bits(tmp_path) -> None:
    data = _logistic_data(tmp_path / "d", 2400)
    model = PausingLogistic(4, l2=1e-2)
    with connect(n_workers=2, dashboard_address=None) as client:
        undisturbed = sandblaster_lbfgs(model, data, client=client, maxiter=10)

        def add_a_worker_at_iteration_2(intermediate):
            if intermediate.step == 2:
                client.cluster.scale(3)
                client.wait_for_workers(3)

        grown = sandblaster_lbfgs(model, data, client=client, maxiter=10, callback=add_a_worker_at_iteration_2)
    assert grown.nit == undisturbed.nit
    np.testing.assert_array_equal(grown.x, undisturbed.x)
    assert grown.stats["shards_moved"] >= 2
