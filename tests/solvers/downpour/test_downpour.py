"""Downpour SGD with real parameter-shard actors and replica tasks on a LocalCluster."""

from __future__ import annotations

import asyncio
import os
import re
import uuid

import numpy as np
import pytest

from dasklbfgs import ShardedDataset, make_dataset
from dasklbfgs._actors import OnWorkerLoop, remote_first
from dasklbfgs.checkpoint_store import read_checkpoint
from dasklbfgs.data.location import Location
from dasklbfgs.downpour import ParameterShard, downpour_sgd, param_bounds
from dasklbfgs.errors import ConfigurationError, ConvergenceWarning, ModelDataMismatchError
from dasklbfgs.models import MLP, Logistic, Softmax
from dasklbfgs.models.persist import model_config
from dasklbfgs.optim import LBFGSOptions, owlqn_minimize
from dasklbfgs.optim.updates import sgd
from dasklbfgs.sandblaster import sandblaster_lbfgs
from dasklbfgs.scoring import evaluate
from dasklbfgs.solvers._replicas.batches import epoch_order
from dasklbfgs.solvers.common_options import replica_rows
from dasklbfgs.solvers.downpour.shard_checkpoint import read_shard_states, write_shard_states
from tests._checkpoint_faults import FAILURE_IDS, FAILURES, InjectedFailure, fail_writes, tree_bytes
from tests._datasets import load_all


@pytest.fixture(scope="module")
def softmax_data(tmp_path_factory):
    return make_dataset("multinomial", tmp_path_factory.mktemp("dp") / "mn", rows=12000, features=10,
                        n_classes=3, shard_rows=3000, seed=1)


def test_shard_round_trip_without_a_cluster() -> None:
    async def scenario():
        shard = ParameterShard(0, 2, 5, np.array([1.0, 2.0, 3.0]), "sgd", {"learning_rate": 0.5})
        values, version, stop = await shard.fetch()
        version, _, fetched = await shard.push(np.array([2.0, 0.0, -2.0]), version, replica=3, steps=2,
                                               loss_sum=1.5, fetch=True)
        np.testing.assert_array_equal(fetched, [0.0, 2.0, 4.0])
        as32, _, _ = await shard.fetch("float32")
        assert as32.dtype == np.float32
        state = await shard.get_state()
        clone = ParameterShard(0, 2, 5, np.zeros(3), "sgd", {"learning_rate": 0.5})
        await clone.set_state(state)
        return values, version, await clone.fetch(), await shard.stats()

    values, version, (cloned, cloned_version, _), stats = asyncio.run(scenario())
    np.testing.assert_array_equal(values, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(cloned, [0.0, 2.0, 4.0])
    assert version == cloned_version == 1
    assert stats["steps"] == 2 and stats["pushes_by_replica"] == {3: 1} and stats["staleness"] == {0: 1}


def test_calls_start_with_the_remote_shards_and_come_back_in_shard_order() -> None:
    """A replica's calls go out remote shards first (the in-process shard's update would hold
    up their requests on the event loop they share) and are returned in the shards' order."""
    local = OnWorkerLoop(object(), asyncio.new_event_loop(), "shard-1")
    started = []

    def call(i, handle):
        started.append(i)
        return f"reply {i}"

    assert remote_first(["remote 0", local, "remote 2"], call) == ["reply 0", "reply 1", "reply 2"]
    assert started == [0, 2, 1]
    local._loop.close()


def test_one_replica_matches_sequential_sgd_exactly(client, softmax_data) -> None:
    train = softmax_data["train"]
    model = Softmax(10, 3, l2=1e-3)
    result = downpour_sgd(model, train, client=client, n_replicas=1, n_param_shards=3, batch_size=100,
                          optimizer="sgd", learning_rate=0.2, local_learning_rate=0.0, epochs=2, seed=7)
    # The same loop in this process: same batches, same rule, same arithmetic.
    X, y = train.load_rows(0, train.n_samples)
    rule, w = sgd(0.2), np.zeros(model.n_params)
    state = rule.init(w)
    for epoch in range(2):
        order = epoch_order(train.n_samples, 7, 0, epoch)
        for start in range(0, train.n_samples, 100):
            index = np.sort(order[start:start + 100])
            _, g = model.objective(w, X[index], y[index])
            delta, state = rule.update(g, state)
            w = w + delta
    assert result.nit == 2 * 120
    np.testing.assert_array_equal(result.x, w)


def test_two_replicas_reach_sandblaster_accuracy(client, softmax_data) -> None:
    train, test = softmax_data["train"], softmax_data["test"]
    model = Softmax(10, 3, l2=1e-4)
    result = downpour_sgd(model, train, client=client, n_replicas=2, n_param_shards=2, batch_size=64,
                          learning_rate=0.2, epochs=3, eval_data=test, eval_every=100)
    reference = sandblaster_lbfgs(model, train, client=client)
    target = evaluate(model, reference.x, test)["accuracy"]
    assert result.success, result.message
    assert result.history[-1]["eval_accuracy"] >= target - 0.02
    assert sum(result.stats["steps_per_replica"]) == result.nit
    assert all(s > 0 for s in result.stats["steps_per_replica"])
    assert result.stats["pushes_per_shard"] == [result.nit, result.nit]
    assert sum(result.stats["staleness"].values()) == 2 * result.nit
    assert max(map(int, result.stats["staleness"])) >= 1  # two replicas really did overlap
    assert result.stats["bytes_in"] == result.nit * model.n_params * 8
    assert [h for h in result.history if "eval_accuracy" in h]
    assert result.history[-1]["step"] == result.nit


def test_defer_eval_scores_after_training(client, softmax_data) -> None:
    train, test = softmax_data["train"], softmax_data["test"]
    model = Softmax(10, 3, l2=1e-4)
    seen = []
    result = downpour_sgd(model, train, client=client, n_replicas=2, batch_size=64, learning_rate=0.2, epochs=2,
                          eval_data=test, eval_every=60, defer_eval=True, callback=lambda e: seen.append(dict(e)))
    scored = [h for h in result.history if "eval_accuracy" in h]
    assert len(scored) >= 3  # every 60 of about 375 global steps, and the end
    assert not any("eval_accuracy" in e for e in seen)  # nothing was scored during the run
    times = [h["time"] for h in scored]
    assert times == sorted(times) and times[-1] <= result.stats["wall_seconds"]
    # the last entry is the final parameters, scored like any held-out evaluation
    assert result.history[-1]["eval_accuracy"] == evaluate(model, result.x, test)["accuracy"]
    # scored parameters of a run that learns: below the start's held-out objective (log 3 at
    # zeros; the first and the last scores of noisy SGD near its optimum may come in any order)
    start = evaluate(model, np.zeros(model.n_params), test)["objective"]
    assert max(h["eval_objective"] for h in scored) < 0.9 * start


def test_max_steps_callback_and_warmstart(client, softmax_data) -> None:
    train = softmax_data["train"]
    model = Softmax(10, 3)
    capped = downpour_sgd(model, train, client=client, epochs=50, max_steps=120, batch_size=50,
                          warmstart_steps=40)
    assert capped.success and "max_steps (120) reached" in capped.message
    assert 120 <= capped.nit <= 130
    seen = []

    def stop_early(intermediate_result):
        seen.append(intermediate_result.step)
        if intermediate_result.step > 30:
            raise StopIteration

    stopped = downpour_sgd(model, train, client=client, epochs=50, batch_size=50, callback=stop_early,
                           optimizer="sgd", learning_rate=0.05)
    assert stopped.status == 99 and not stopped.success and stopped.nit < 2000


def test_checkpoint_and_resume(client, softmax_data, tmp_path) -> None:
    train = softmax_data["train"]
    model = Softmax(10, 3)
    path = tmp_path / "ckpt"
    first = downpour_sgd(model, train, client=client, n_replicas=1, epochs=1, batch_size=100,
                         checkpoint_path=path, checkpoint_every=20, optimizer="adagrad")
    assert first.nit == 120 and path.exists()
    resumed = downpour_sgd(model, train, client=client, n_replicas=1, epochs=2, batch_size=100,
                           checkpoint_path=path, resume=True)
    assert resumed.stats["steps_this_run"] == 120 and resumed.nit == 240
    straight = downpour_sgd(model, train, client=client, n_replicas=1, epochs=2, batch_size=100)
    np.testing.assert_allclose(resumed.x, straight.x, rtol=1e-12, atol=1e-14)
    with pytest.raises(ModelDataMismatchError, match=r"checkpoint .* is of model"):
        downpour_sgd(Softmax(10, 3, l2=1.0), train, client=client, n_replicas=1, checkpoint_path=path, resume=True)
    with pytest.raises(ModelDataMismatchError, match=r"was trained with optimizer 'adagrad', not 'sgd'"):
        downpour_sgd(model, train, client=client, n_replicas=1, optimizer="sgd", checkpoint_path=path, resume=True)



@pytest.fixture(scope="module")
def logistic_data(tmp_path_factory):
    return make_dataset("logistic", tmp_path_factory.mktemp("dp") / "lg", rows=5000, features=6, shard_rows=2500,
                        seed=3)["train"]


def test_ftrl_minimises_the_models_l1_with_exact_zeros_and_resumes(client, logistic_data, tmp_path) -> None:
    """optimizer="ftrl" takes a model with l1: the shards' threshold is the model's l1 (0 on
    the intercept) times the steps accrued, so the run approaches the OWL-QN optimum with the
    same exact zeros; z and n are checkpointed, and a resumed run continues bit for bit."""
    X, y = load_all(logistic_data)
    l1 = 0.1
    model = Logistic(6, l1=l1)
    objective = lambda w: model.objective(w, X, y)[0] + l1 * np.abs(w[:6]).sum()  # noqa: E731
    best, _ = owlqn_minimize(lambda w: model.objective(w, X, y), np.zeros(7), model.l1_weights(),
                             LBFGSOptions(gtol=1e-10, ftol=1e-14, maxiter=500))
    zeros = best.x == 0.0
    assert 0 < zeros.sum() < 6 and best.x[6] != 0.0
    kw = dict(client=client, n_replicas=1, n_param_shards=2, batch_size=50, optimizer="ftrl", learning_rate=0.5)
    path = tmp_path / "ckpt"
    first = downpour_sgd(model, logistic_data, epochs=1, checkpoint_path=path, checkpoint_every=50, **kw)
    states, attrs = read_shard_states(path, model_config=model_config(model), rule="ftrl")
    assert first.nit == 100 and attrs["optimizer_keys"] == ["n", "z"]
    assert all(np.all(s["optimizer_state"]["n"] > 0) for s in states)
    resumed = downpour_sgd(model, logistic_data, epochs=2, checkpoint_path=path, resume=True, **kw)
    straight = downpour_sgd(model, logistic_data, epochs=2, **kw)
    np.testing.assert_allclose(resumed.x, straight.x, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(straight.x == 0.0, zeros)  # exact zeros where the optimum has them
    for run in (first, straight):  # within 0.5% of the optimum (from 0.693 at zero)
        assert objective(run.x) <= 1.005 * best.fun


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimizer": "adagrad"}, r"solver 'downpour' does not minimise an l1 penalty with optimizer='adagrad', "
         r"and Logistic\(.*l1=0.1.*\) has one; pass optimizer='ftrl' or set l1=0 \(l1 is minimised by solver "
         r"'sandblaster', 'newton' or 'downpour' with optimizer='ftrl'\)"),
        ({"optimizer": "ftrl", "optimizer_options": {"l1": 0.5}},
         r"downpour: FTRL takes its l1 from the model.*l1=0.5"),
        ({"optimizer": "ftrl", "optimizer_options": {"beta": 0}}, r"beta must be a positive number, got 0"),
    ],
)
def test_l1_errors(client, logistic_data, kwargs, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        downpour_sgd(Logistic(6, l1=0.1), logistic_data, client=client, **kwargs)


def _shard_states(pushes: int) -> list[dict]:
    """``get_state`` of two adagrad parameter shards after ``pushes`` pushes each (no cluster)."""
    async def scenario():
        rng = np.random.default_rng(pushes)
        shards = [ParameterShard(0, 0, 4, np.zeros(4), "adagrad", {"learning_rate": 0.1}),
                  ParameterShard(1, 4, 7, np.zeros(3), "adagrad", {"learning_rate": 0.1})]
        for shard in shards:
            version = 0
            for _ in range(pushes):
                version, _, _ = await shard.push(rng.normal(size=shard.stop - shard.start), version, replica=0,
                                                 steps=1, loss_sum=1.0)
        return [await shard.get_state() for shard in shards]

    return asyncio.run(scenario())


@pytest.mark.parametrize(("where", "n"), FAILURES, ids=FAILURE_IDS)
def test_a_failed_checkpoint_write_leaves_the_previous_one_intact(tmp_path, monkeypatch, where, n) -> None:
    """The next checkpoint's write fails at a chosen step (an array, the final renames): the
    previous checkpoint is still there, bit for bit, and nothing a later load could pick up
    is left beside it."""
    path = tmp_path / "ckpt"
    config = model_config(Softmax(2, 3))
    write = dict(model_config=config, rule="adagrad", hyper={"learning_rate": 0.1})
    before, after = _shard_states(2), _shard_states(5)
    assert len(before[0]["optimizer_state"]) == 1  # 2 shards x (values + accumulator) = 4 arrays
    write_shard_states(path, before, **write, extra={"steps": 4})
    files = tree_bytes(path)
    _, attrs = read_checkpoint(path, kind="downpour")

    with monkeypatch.context() as patched:
        fail_writes(patched, path, where, n)
        with pytest.raises(InjectedFailure, match=r"failed"):
            write_shard_states(path, after, **write, extra={"steps": 10})

    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    assert tree_bytes(path) == files
    states, loaded_attrs = read_shard_states(path, model_config=config, rule="adagrad")
    assert loaded_attrs == attrs and loaded_attrs["steps"] == 4
    for loaded, saved in zip(states, before, strict=True):
        assert {k: loaded[k] for k in ("index", "start", "stop", "version", "steps", "steps_by_replica")} == \
            {k: saved[k] for k in ("index", "start", "stop", "version", "steps", "steps_by_replica")}
        np.testing.assert_array_equal(loaded["values"], saved["values"], strict=True)
        assert loaded["optimizer_state"].keys() == saved["optimizer_state"].keys()
        for key, value in saved["optimizer_state"].items():
            np.testing.assert_array_equal(loaded["optimizer_state"][key], value, strict=True)
    write_shard_states(path, after, **write, extra={"steps": 10})  # the next write goes through
    states, _ = read_shard_states(path, model_config=config, rule="adagrad")
    np.testing.assert_array_equal(states[1]["values"], after[1]["values"], strict=True)
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_non_finite_loss_stops_the_run(client, tmp_path) -> None:
    X = np.ones((400, 2))
    data = ShardedDataset.create(tmp_path / "d", X, np.full(400, 1e200), shard_rows=200)
    from dasklbfgs.models import LeastSquares

    with pytest.warns(ConvergenceWarning, match=r"downpour did not succeed \(NON_FINITE\): .*non-finite loss"):
        result = downpour_sgd(LeastSquares(2), data, client=client, n_replicas=2, batch_size=10, optimizer="sgd")
    assert result.status == 3 and not result.success
    assert "non-finite loss" in result.message
    assert np.all(np.isfinite(result.x)) and result.nit == 0


def test_helpers() -> None:
    assert param_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert replica_rows(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    a, b = epoch_order(50, 1, 0, 0), epoch_order(50, 1, 0, 1)
    assert sorted(a) == list(range(50)) and not np.array_equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_param_shards": 40}, ConfigurationError, r"n_param_shards \(40\) is larger than the model's 33 parameters"),
        ({"n_replicas": 0}, ConfigurationError, r"n_replicas must be an integer >= 1, got 0"),
        ({"n_replicas": 12001}, ConfigurationError, r"n_replicas \(12001\) is larger than the dataset.s 12000 rows"),
        ({"batch_size": 7000}, ConfigurationError, r"batch_size \(7000\) is larger than a replica.s data \(6000 rows"),
        ({"n_fetch": 0}, ConfigurationError, r"n_fetch must be an integer >= 1, got 0"),
        ({"n_push": -1}, ConfigurationError, r"n_push must be an integer >= 1, got -1"),
        ({"learning_rate": 0}, ConfigurationError, r"learning_rate must be a positive number, got 0"),
        ({"optimizer": "adam"}, ConfigurationError, r"optimizer must be one of"),
        ({"eval_every": 10}, ConfigurationError, r"eval_every needs eval_data"),
        ({"defer_eval": "yes"}, ConfigurationError, r"defer_eval must be True or False, got 'yes'"),
        ({"resume": True}, ConfigurationError, r"resume=True needs checkpoint_path"),
        ({"x0": np.zeros(2)}, ModelDataMismatchError, r"x0 must have shape \(33,\)"),
    ],
)
def test_errors(client, softmax_data, kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        downpour_sgd(Softmax(10, 3), softmax_data["train"], client=client, **kwargs)


def test_label_mismatch(client, softmax_data) -> None:
    with pytest.raises(ModelDataMismatchError, match=r"Logistic needs integer labels in 0..1"):
        downpour_sgd(Logistic(10), softmax_data["train"], client=client)


def test_overlapped_pushes_train_with_one_more_step_of_staleness(client, softmax_data) -> None:
    """One replica, pushes left in flight: each gradient is computed one update late, so the
    shard sees staleness 1 on every push after the first, and the model still trains."""
    train, test = softmax_data["train"], softmax_data["test"]
    model = Softmax(10, 3, l2=1e-4)
    result = downpour_sgd(model, train, client=client, n_replicas=1, n_param_shards=2, batch_size=64,
                          learning_rate=0.2, epochs=2, overlap=True, eval_data=test)
    in_lockstep = downpour_sgd(model, train, client=client, n_replicas=1, n_param_shards=2, batch_size=64,
                               learning_rate=0.2, epochs=2, eval_data=test)
    assert result.success and result.nit == in_lockstep.nit
    assert in_lockstep.stats["staleness"] == {"0": 2 * in_lockstep.nit}
    assert result.stats["staleness"]["1"] >= 2 * (result.nit - 2)  # 2 shards, each push
    assert result.history[-1]["eval_accuracy"] >= in_lockstep.history[-1]["eval_accuracy"] - 0.02
    assert not np.array_equal(result.x, in_lockstep.x)
    with pytest.raises(ConfigurationError, match="overlap must be True or False, got 'yes'"):
        downpour_sgd(model, train, client=client, overlap="yes")


def test_an_exploding_adagrad_run_is_stopped_as_diverged(client, softmax_data, tmp_path) -> None:
    """Adagrad's steps are bounded, so an absurd rate makes the loss explode without ever
    becoming non-finite: the run stops with DIVERGED, warns and says what to lower; a sane
    rate runs on and completes, judged by the objective it reached."""
    from dasklbfgs import Status

    kw = dict(n_replicas=2, n_param_shards=2, batch_size=50, checkpoint_path=tmp_path / "ckpt")
    # 10 epochs = 800 global steps, which replicas this small run in about a second: the
    # coordinator judges at its polls (every 50 ms), so it must stop the run well before.
    with pytest.warns(ConvergenceWarning, match=r"downpour did not succeed \(DIVERGED\)"):
        result = downpour_sgd(Softmax(10, 3), softmax_data["train"], client=client, eval_data=softmax_data["test"],
                              eval_every=20, learning_rate=1e4, epochs=10, **kw)
    assert result.status == Status.DIVERGED and not result.success
    assert re.fullmatch(r"the (mini-batch|held-out) loss (reached \S+ at global step \d+, more than 100 times the "
                        r"loss at the start \(1\.099\)|stayed above 4 times the loss at the start \(1\.099\) for 3 "
                        r"polls, at \S+ at global step \d+): the run diverged and was stopped; lower learning_rate",
                        result.message), result.message
    assert result.nit < 2 * 10 * 40 / 4  # stopped early, not after its epochs
    assert not os.path.exists(tmp_path / "ckpt")  # no checkpoint of exploded parameters
    sane = downpour_sgd(Softmax(10, 3), softmax_data["train"], client=client, eval_data=softmax_data["test"],
                        eval_every=20, learning_rate=0.2, epochs=3, **{**kw, "checkpoint_path": None})
    assert sane.status == Status.COMPLETED and sane.success, sane.message
    assert re.fullmatch(r"all replicas finished their epochs; the objective on 1,000 training rows fell from "
                        r"1\.099 at the start to 0\.\d+", sane.message), sane.message
    # partitioned replicas: no worker holds the whole model, the start is the first push's loss
    with pytest.warns(ConvergenceWarning, match=r"\(DIVERGED\)"):
        partitioned = downpour_sgd(MLP(10, (4,), 3), softmax_data["train"], client=client, learning_rate=1e4,
                                   epochs=10, model_partitions=2, **{**kw, "n_replicas": 1, "checkpoint_path": None})
    assert partitioned.status == Status.DIVERGED, partitioned.message
    assert re.search(r"(more than 100|stayed above 4) times the loss at the start \((1\.\d+)\)", partitioned.message)


def test_checkpoint_on_s3_resumes_like_a_local_one(client, softmax_data, s3, tmp_path) -> None:
    """The parameter shards' checkpoint at a URL (the storage_options of a Location), read
    back on resume: the same parameters as resuming from a local checkpoint."""
    train = softmax_data["train"]
    model = Softmax(10, 3)
    kw = dict(client=client, n_replicas=1, batch_size=100, optimizer="adagrad")
    url = Location.of(f"{s3[0]}/downpour-{uuid.uuid4().hex[:6]}", s3[1])
    resumed = []
    for where in (tmp_path / "ckpt", url):
        first = downpour_sgd(model, train, epochs=1, checkpoint_path=where, checkpoint_every=60, **kw)
        assert first.nit == 120
        resumed.append(downpour_sgd(model, train, epochs=2, checkpoint_path=where, resume=True, **kw))
    states, attrs = read_shard_states(url, model_config=model_config(model), rule="adagrad")
    assert attrs["steps"] == 240 and len(states) == 2
    assert resumed[1].stats["steps_this_run"] == 120 and resumed[1].nit == 240
    np.testing.assert_array_equal(resumed[1].x, resumed[0].x)
