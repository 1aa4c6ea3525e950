"""Synchronous SGD, EASGD, gossip and neighbour exchange: pure rules, then real clusters."""

from __future__ import annotations

import asyncio
import re
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from dasklbfgs import ShardedDataset, Status, make_dataset
from dasklbfgs.downpour import easgd, gossip_sgd, neighbour_sgd, sync_sgd
from dasklbfgs.errors import ConfigurationError, ConvergenceWarning, WorkerLostError
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.models.sums import SparseSum, as_dense
from dasklbfgs.monitor.events import TOPIC
from dasklbfgs.optim.collective import (
    elastic_difference,
    exchange_weights,
    gossip_peer,
    gossip_pull,
    neighbours,
    push_sum_split,
    torus_shape,
    tree_children,
    tree_parent,
)
from dasklbfgs.optim.updates import make_rule
from dasklbfgs.scoring import evaluate
from dasklbfgs.solvers._replicas.batches import epoch_order
from dasklbfgs.solvers._replicas.wire import ShardLayout
from dasklbfgs.solvers.common_options import replica_rows
from dasklbfgs.solvers.peers.mailbox import PeerMailbox, Stopped
from dasklbfgs.solvers.peers.replica import add_tree_sums, touched_part


@pytest.fixture(scope="module")
def softmax_data(tmp_path_factory):
    return make_dataset("multinomial", tmp_path_factory.mktemp("peers") / "mn", rows=12000, features=10,
                        n_classes=3, shard_rows=3000, seed=1)


# -- the pure rules --------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_tree_reaches_every_replica_once(n) -> None:
    seen = [0]
    for r in range(n):
        for c in tree_children(r, n):
            assert tree_parent(c) == r
            seen.append(c)
    assert sorted(seen) == list(range(n)) and tree_parent(0) is None


def test_ring_and_torus_neighbours() -> None:
    assert neighbours(0, 5, "ring") == [1, 4]
    assert neighbours(0, 2, "ring") == [1] and neighbours(0, 1, "ring") == []
    # 3 x 3 torus: replica 4 is the middle; replica 0 wraps around both ways
    assert neighbours(4, 9, "torus") == [1, 3, 5, 7]
    assert neighbours(0, 9, "torus") == [1, 2, 3, 6]
    assert neighbours(0, 4, "torus") == [1, 2]  # 2 x 2: up = down and left = right
    assert torus_shape(12) == (3, 4) and torus_shape(6, (3, 2)) == (3, 2)
    for n in (4, 6, 9, 12):
        for r in range(n):
            assert all(r in neighbours(k, n, "torus") for k in neighbours(r, n, "torus"))  # symmetric


@pytest.mark.parametrize("n, topology", [(2, "ring"), (5, "ring"), (4, "torus"), (6, "torus"), (9, "torus")])
def test_exchange_weights_are_a_stable_mixing_matrix(n, topology) -> None:
    W = np.zeros((n, n))
    for i in range(n):
        own, near = exchange_weights(i, n, topology)
        W[i, i] = own
        for k, w in near.items():
            W[i, k] = w
    np.testing.assert_allclose(W.sum(axis=1), 1.0)
    np.testing.assert_allclose(W, W.T)
    assert np.linalg.eigvalsh(W).min() >= -1e-12  # no mode grows (raw I + A has eigenvalue -1 on a ring)


def test_gossip_peer_is_uniform_over_the_others() -> None:
    rng = np.random.default_rng(0)
    draws = np.bincount([gossip_peer(rng, 2, 5) for _ in range(4000)], minlength=5)
    assert draws[2] == 0 and np.all(np.abs(draws[[0, 1, 3, 4]] - 1000) < 120)


def test_mixing_rules() -> None:
    x, center = np.array([1.0, 3.0]), np.array([0.0, 1.0])
    d = elastic_difference(x, center, 0.25)
    np.testing.assert_allclose(d, [0.25, 0.5])
    np.testing.assert_allclose((x - d) + (center + d), x + center)  # the exchange conserves the sum
    np.testing.assert_allclose(gossip_pull(x, center), [0.5, 2.0])
    numerator = np.array([2.0, 4.0])
    share, weight = push_sum_split(numerator, 1.0)
    np.testing.assert_allclose(numerator + share, [2.0, 4.0])
    assert weight == 0.5 and share is not numerator


def test_mailbox_waits_wakes_and_times_out() -> None:
    box = PeerMailbox(3)
    threading.Timer(0.05, lambda: asyncio.run(box.put(("up", 0, 7), (1.0, np.ones(2), 5)))).start()
    loss, sums, n = box.take(("up", 0, 7), timeout=5)
    assert (loss, n) == (1.0, 5) and box.messages_in == 1 and box.bytes_in == 16
    with pytest.raises(WorkerLostError, match=r"replica 3 waited 0 s for \('down', 4\) from a peer"):
        box.take(("down", 4), timeout=0.05)
    threading.Timer(0.05, box.request_stop_now, args=("max_steps (10) reached",)).start()
    with pytest.raises(Stopped, match=r"max_steps \(10\) reached"):
        box.take(("down", 5), timeout=5)
    # a synchronous step does not stop half-way: it waits on
    with pytest.raises(WorkerLostError, match=r"waited 0 s for \('down', 5\)"):
        box.take(("down", 5), timeout=0.05, stoppable=False)
    asyncio.run(box.abort())
    with pytest.raises(Stopped, match=r"max_steps \(10\) reached"):  # ... unless the run is aborted (a peer was lost)
        box.take(("down", 5), timeout=5, stoppable=False)
    assert asyncio.run(box.deliver(1, np.zeros(3))) is True
    assert [sender for sender, _ in box.drain()] == [1] and box.drain() == []


# -- on a real cluster ------------------------------------------------------------------------

def _steps(client, run_id):
    return [m for _, m in client.get_events(TOPIC) if m["run"] == run_id and m["kind"] == "step"]


@pytest.mark.parametrize("method, options", [
    (sync_sgd, {}),
    (easgd, {"tau": 4, "n_param_shards": 2}),
    (easgd, {"tau": 2, "optimizer": "momentum", "optimizer_options": {"beta": 0.5, "nesterov": True},
             "learning_rate": 0.1}),
    (gossip_sgd, {}),
    (gossip_sgd, {"push_sum": True}),
    (neighbour_sgd, {"topology": "ring"}),
    (neighbour_sgd, {"topology": "torus"}),
], ids=["sync", "easgd", "easgd-nesterov", "gossip", "push-sum", "ring", "torus"])
def test_each_method_learns_the_softmax_problem(client, softmax_data, method, options) -> None:
    model = Softmax(10, 3, l2=1e-3)
    test = softmax_data["test"]
    before = evaluate(model, np.zeros(model.n_params), test)
    options = {"learning_rate": 0.2, **options}
    result = method(model, softmax_data["train"], client=client, n_replicas=4, batch_size=50, epochs=2,
                    eval_data=test, eval_every=100, **options)
    assert result.success, result.message
    assert result.nit == 4 * 2 * 60 and result.stats["steps_per_replica"] == [120] * 4
    after = evaluate(model, result.x, test)
    assert after["objective"] < before["objective"] - 0.15
    assert after["accuracy"] > 0.7  # Sandblaster's optimum scores about 0.76 here
    assert len(result.replicas) == 4 and all(r["x"].shape == (model.n_params,) for r in result.replicas)
    assert any("eval_accuracy" in h for h in result.history[:-1])  # scored during the run
    events = _steps(client, result.run_id)
    assert events[-1]["finished"] and events[-1]["solver"] == result.stats["method"]
    if method is not easgd:
        assert result.stats["messages_between_replicas"] > 0


def _reference_sync_sgd(model, data, n_replicas, batch_size, epochs, seed, rule):
    """Single-process large-batch SGD: step t's batch is the union of the replicas' batches t."""
    X, y = data.load_rows(0, data.n_samples)
    rows = replica_rows(data.n_samples, n_replicas)
    per_epoch = [-(-(b - a) // batch_size) for a, b in rows]
    w = np.zeros(model.n_params)
    state = rule.init(w)
    for t in range(epochs * max(per_epoch)):
        index = []
        for r, (a, b) in enumerate(rows):
            if t < epochs * per_epoch[r]:
                epoch, k = divmod(t, per_epoch[r])
                order = epoch_order(b - a, seed, r, epoch)
                index.append(a + np.sort(order[k * batch_size:(k + 1) * batch_size]))
        index = np.concatenate(index)
        _, g = model.objective(w, X[index], y[index])
        delta, state = rule.update(g, state)
        w = w + delta
    return w


@pytest.mark.parametrize("n_replicas", [1, 3])
def test_sync_sgd_equals_single_process_large_batch_sgd(client, tmp_path, n_replicas) -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1001, 4))
    y = rng.integers(0, 3, 1001)
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=250)
    model = Softmax(4, 3, l2=1e-2)
    # 1001 rows over 3 replicas: 333, 334, 334 rows, so replica 0 runs out of batches first
    with pytest.warns(ConvergenceWarning, match=r"sync did not succeed \(NO_PROGRESS\): all replicas finished their "
                      r"epochs, but the objective on 1,00[01] training rows went from 1\.09\d+ at the start to "):
        # random labels: nothing to learn, and the run ends honestly without success
        result = sync_sgd(model, data, client=client, n_replicas=n_replicas, batch_size=40, epochs=2, seed=5,
                          optimizer="momentum", learning_rate=0.3, eval_data=data, eval_every=5)
    assert result.status == Status.NO_PROGRESS and not result.success
    expected = _reference_sync_sgd(model, data, n_replicas, 40, 2, 5, make_rule("momentum", learning_rate=0.3))
    np.testing.assert_allclose(result.x, expected, rtol=1e-10, atol=1e-12)
    for replica in result.replicas:  # every replica took the same steps
        np.testing.assert_allclose(replica["x"], expected, rtol=1e-10, atol=1e-12)
    assert result.stats["chosen_replica"] is None  # no replica is chosen: all are equal
    # the start barrier and each of the 18 steps send one message up and one down each tree
    # edge; the coordinator's reads of published parameters for scoring are not counted
    assert result.stats["messages_between_replicas"] == 2 * (n_replicas - 1) * (1 + 18)


def _reference_local_sgd(model, X, y, rows, batch_size, epochs, seed, replica, rate):
    a, b = rows
    w, rule = np.zeros(model.n_params), make_rule("sgd", learning_rate=rate)
    for epoch in range(epochs):
        order = epoch_order(b - a, seed, replica, epoch)
        for start in range(0, b - a, batch_size):
            index = a + np.sort(order[start:start + batch_size])
            _, g = model.objective(w, X[index], y[index])
            w = w + rule.update(g, {})[0]
    return w


def test_easgd_with_alpha_zero_is_independent_sgd(client, softmax_data) -> None:
    train = softmax_data["train"]
    model = Softmax(10, 3, l2=1e-3)
    with pytest.warns(ConvergenceWarning, match=r"the objective on 1,000 training rows went from 1\.099 at the start "
                      r"to 1\.099: the run made no progress; raise learning_rate or train longer"):
        result = easgd(model, train, client=client, n_replicas=2, batch_size=100, epochs=1, seed=4, alpha=0.0,
                       tau=3, learning_rate=0.2)  # the center, the result, never moves: no progress
    X, y = train.load_rows(0, train.n_samples)
    rows = replica_rows(train.n_samples, 2)
    for r, replica in enumerate(result.replicas):
        expected = _reference_local_sgd(model, X, y, rows[r], 100, 1, 4, r, 0.2)
        np.testing.assert_array_equal(replica["x"], expected)
    np.testing.assert_array_equal(result.x, np.zeros(model.n_params))  # the center never moved
    assert result.stats["center_exchanges"] == 2 * 20  # every 3rd of 60 steps, on both replicas


def test_easgd_pulls_replicas_toward_the_center(client, softmax_data) -> None:
    model = Softmax(10, 3, l2=1e-3)
    result = easgd(model, softmax_data["train"], client=client, n_replicas=2, batch_size=100, rho=2.0,
                   tau=1, learning_rate=0.2)
    spread = max(np.linalg.norm(r["x"] - result.x) for r in result.replicas)
    assert result.stats["center_exchanges"] == 120 and spread < 0.2 * np.linalg.norm(result.x)


@pytest.mark.parametrize("push_sum", [False, True])
def test_gossip_keeps_replicas_near_consensus_on_a_quadratic(client, tmp_path, push_sum) -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4000, 5))
    truth = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
    y = X @ truth + 0.1 * rng.standard_normal(4000)
    data = ShardedDataset.create(tmp_path / "q", X, y, shard_rows=1000)
    result = gossip_sgd(LeastSquares(5), data, client=client, n_replicas=4, batch_size=20, epochs=3,
                        learning_rate=0.1, push_sum=push_sum)
    xs = np.array([r["x"] for r in result.replicas])
    consensus = xs.mean(axis=0)
    assert np.max(np.linalg.norm(xs - consensus, axis=1)) < 0.02 * np.linalg.norm(consensus)
    optimum = np.linalg.lstsq(np.c_[X, np.ones(4000)], y, rcond=None)[0]
    # constant-rate SGD on 20-row batches stays within its noise of the least-squares
    # optimum: measured max |x - x*| 0.003-0.006 over four runs; a quarter of that bound
    # would be a wrong method
    np.testing.assert_allclose(result.x, optimum, atol=0.02)
    exchanges = sum(result.stats["exchanges_per_replica"])
    # a pull is skipped while the drawn peer has not published yet (it is still starting)
    assert exchanges == 4 * 3 * 50 if push_sum else 0.9 * 4 * 3 * 50 <= exchanges <= 4 * 3 * 50


def test_neighbour_exchange_returns_the_best_held_out_replica(client, softmax_data) -> None:
    model = Softmax(10, 3, l2=1e-3)
    result = neighbour_sgd(model, softmax_data["train"], client=client, n_replicas=4, batch_size=50,
                           learning_rate=0.05, eval_data=softmax_data["test"])
    scores = [r["eval_objective"] for r in result.replicas]
    chosen = result.stats["chosen_replica"]
    assert chosen == int(np.argmin(scores))
    np.testing.assert_array_equal(result.x, result.replicas[chosen]["x"])
    assert len({round(s, 12) for s in scores}) > 1  # replicas are not kept equal
    # every replica sent its gradient to its 2 ring neighbours after each of its 60 steps
    assert result.stats["exchanges_per_replica"] == [120] * 4
    assert sum(result.stats["received_per_replica"]) > 0


def test_max_steps_and_callback_stop_every_method(client, softmax_data) -> None:
    model = Softmax(10, 3)
    for method in (sync_sgd, easgd, gossip_sgd, neighbour_sgd):
        result = method(model, softmax_data["train"], client=client, n_replicas=2, batch_size=10, epochs=3,
                        max_steps=200, learning_rate=0.05)
        assert result.status == Status.COMPLETED and result.success, method
        assert re.fullmatch(r"max_steps \(200\) reached; the objective on 1,000 training rows fell from 1\.099 at the "
                            r"start to 0\.\d+", result.message), result.message
        assert result.nit == 200 and result.stats["steps_per_replica"] == [100, 100], method  # no overshoot

    def stop(entry):
        raise StopIteration

    result = gossip_sgd(model, softmax_data["train"], client=client, n_replicas=2, batch_size=10, epochs=3,
                        callback=stop)
    assert result.status == 99 and result.nit < 2 * 3 * 960


def test_a_peer_run_is_judged_by_its_start(client, softmax_data) -> None:
    """A rate that trains completes with success, both objectives in the message; plain SGD
    at a rate of 1000 explodes from its first steps and is stopped as diverged, with a warning."""
    model = Softmax(10, 3)
    healthy = gossip_sgd(model, softmax_data["train"], client=client, n_replicas=2, batch_size=50, epochs=1,
                         learning_rate=0.2)
    assert healthy.status == Status.COMPLETED and healthy.success
    expected = evaluate(model, healthy.x, softmax_data["train"])["objective"]  # on all rows: below the start too
    start = float(np.log(3))
    assert expected < start
    assert re.fullmatch(r"all replicas finished their epochs; the objective on 1,000 training rows fell from 1\.099 "
                        r"at the start to 0\.\d+", healthy.message), healthy.message
    with pytest.warns(ConvergenceWarning, match=r"gossip did not succeed \(DIVERGED\): the (mini-batch|held-out) "
                                                r"loss (reached \S+ at global step \d+, more than 100|stayed above 4) "
                                                r"times the loss"):
        exploded = gossip_sgd(model, softmax_data["train"], client=client, n_replicas=2, batch_size=50, epochs=5,
                              learning_rate=1e3)
    assert exploded.status == Status.DIVERGED and not exploded.success
    assert exploded.nit < 2 * 5 * 60 / 3  # 2 replicas x 5 epochs x 60 batches: stopped well before


@pytest.mark.parametrize("method", [sync_sgd, gossip_sgd, neighbour_sgd])
def test_non_finite_loss_stops_the_run(client, tmp_path, method) -> None:
    X = np.ones((400, 2))
    data = ShardedDataset.create(tmp_path / "d", X, np.full(400, 1e200), shard_rows=200)
    with pytest.warns(ConvergenceWarning, match=r"did not succeed \(NON_FINITE\): .*non-finite loss"):
        result = method(LeastSquares(2), data, client=client, n_replicas=2, batch_size=10, learning_rate=0.1)
    assert result.status == 3 and not result.success
    assert "non-finite loss" in result.message and result.nit == 0
    assert np.all(np.isfinite(result.x))


@pytest.mark.parametrize("method, kwargs, match", [
    (easgd, {"tau": 0}, r"tau must be an integer >= 1, got 0"),
    (easgd, {"alpha": 0.5, "rho": 1.0}, r"give alpha \(0.5\) or rho \(1.0\), not both"),
    (easgd, {"alpha": 1.5}, r"alpha must be a number in \[0, 1\) or None, got 1.5"),
    (easgd, {"rho": -1}, r"rho must be a non-negative number or None, got -1"),
    (easgd, {"rho": 20.0, "learning_rate": 0.1},
     r"rho \(20.0\) times learning_rate \(0.1\) gives the moving rate alpha = 2.0, which must be below 1"),
    (easgd, {"n_param_shards": 40}, r"n_param_shards \(40\) is larger than the model's 33 parameters"),
    (neighbour_sgd, {"topology": "star"}, r"topology must be one of \('ring', 'torus'\), got 'star'"),
    (neighbour_sgd, {"topology": "torus", "n_replicas": 5}, r"5 replicas is not one: use topology='ring'"),
    (neighbour_sgd, {"topology": "torus", "torus_shape": (2, 3)}, r"torus_shape \(2, 3\) does not lay out 4"),
    (neighbour_sgd, {"torus_shape": (2, 2)}, r"torus_shape \(2, 2\) is only for topology='torus'"),
    (gossip_sgd, {"push_sum": "yes"}, r"push_sum must be True or False, got 'yes'"),
    (sync_sgd, {"wait_timeout": 0}, r"wait_timeout must be a positive number, got 0"),
    (sync_sgd, {"n_replicas": 0}, r"n_replicas must be an integer >= 1, got 0"),
    (sync_sgd, {"optimizer": "adam"}, r"optimizer must be one of"),
    (gossip_sgd, {"learning_rate": -1}, r"learning_rate must be a positive number, got -1"),
    (gossip_sgd, {"batch_size": 7000}, r"batch_size \(7000\) is larger than a replica's data"),
    (sync_sgd, {"eval_every": 5}, r"eval_every needs eval_data"),
    (easgd, {"defer_eval": 1}, r"defer_eval must be True or False, got 1"),
])
def test_errors(client, softmax_data, method, kwargs, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        method(Softmax(10, 3), softmax_data["train"], client=client, **kwargs)


def test_minimize_passes_every_option_the_method_takes_and_refuses_others(client, softmax_data) -> None:
    from dasklbfgs import minimize

    with pytest.raises(ConfigurationError, match=r"wait_timeout must be a positive number, got -1"):
        minimize(Softmax(10, 3), softmax_data["train"], "sync", client=client, wait_timeout=-1)
    with pytest.raises(ConfigurationError, match=r"beta"):
        minimize(Softmax(10, 3), softmax_data["train"], "gossip", client=client, optimizer="momentum",
                 optimizer_options={"beta": 2.0})
    with pytest.raises(ConfigurationError, match=r"gossip does not take option 'tau'"):
        minimize(Softmax(10, 3), softmax_data["train"], "gossip", client=client, tau=5)


def test_push_sum_conserves_the_total_weight_when_replicas_finish_apart(client, tmp_path) -> None:
    rng = np.random.default_rng(2)
    X = rng.standard_normal((1003, 3))
    y = X @ np.array([1.0, -1.0, 2.0])
    data = ShardedDataset.create(tmp_path / "d", X, y, shard_rows=250)
    # 1003 rows over 3 replicas: 334, 334 and 335 rows; 167-row batches make 2, 2 and 3
    # steps an epoch, so replica 2 keeps sending shares after the others have finished
    result = gossip_sgd(LeastSquares(3), data, client=client, n_replicas=3, batch_size=167, epochs=10,
                        learning_rate=0.05, push_sum=True)
    assert [r["steps"] for r in result.replicas] == [20, 20, 30]
    # shares sent to a replica that had finished came back: the weights still add up to
    # the number of replicas (nothing was dropped), and none underflowed
    weights = [r["weight"] for r in result.replicas]
    assert sum(weights) == pytest.approx(3.0, rel=1e-12) and min(weights) > 1e-3


# -- sparse rows: compact messages ------------------------------------------------------------

def _planted_sparse(n=1200, d=4096, density=0.002, seed=8):
    """CSR rows with ~8 values each among ``d`` columns and a planted logistic label."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    y = (X @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0).astype(float)
    return X, y


def test_compact_tree_sums_and_neighbour_gradients_are_the_dense_bits() -> None:
    """What sync SGD sends up and down its tree, and what a neighbour sends, densify to the
    dense path's bits: the same parameters follow, only fewer bytes travel."""
    X, y = _planted_sparse()
    model = Logistic(X.shape[1], l2=0.0)
    params = np.random.default_rng(1).normal(size=model.n_params)
    cuts = [(0, 20), (20, 40), (40, 40), (40, 61)]  # one replica out of rows (the empty part)
    compact, dense = [], []
    for a, b in cuts:
        loss, sums = (model.portion_loss_grad_sum(params, X[a:b], y[a:b]) if b > a
                      else (0.0, SparseSum.zero(model.n_sums)))
        compact.append((loss, sums, b - a))
        dense.append((*model.sums_of(params, X[a:b], y[a:b]), b - a))
    loss, sums, n = add_tree_sums(compact)
    dense_loss, dense_sums, dense_n = add_tree_sums(dense)
    assert isinstance(sums, SparseSum) and sums.nbytes * 5 < dense_sums.nbytes
    assert (loss, n) == (dense_loss, dense_n) and np.array_equal(as_dense(sums), dense_sums)
    assert np.array_equal(np.signbit(as_dense(sums)), np.signbit(dense_sums))
    # a neighbour's message: the batch's gradient is zero outside the columns it touched
    layout = ShardLayout(0, model.n_params, model.row_table_for(SimpleNamespace(is_sparse=True)))
    _, gradient = model.objective(params, X[:20], y[:20])
    message = touched_part(gradient, layout, model.touched_rows(X[:20]))
    assert isinstance(message, SparseSum) and message.nbytes * 5 < gradient.nbytes
    assert np.array_equal(as_dense(message), gradient)
    assert touched_part(gradient, layout, np.arange(X.shape[1])) is gradient  # every row touched: dense is smaller


@pytest.fixture(scope="module")
def stored_both_ways(tmp_path_factory):
    """The same rows stored sparse (CSR shards) and dense."""
    X, y = _planted_sparse()
    home = tmp_path_factory.mktemp("sparse-peers")
    return (ShardedDataset.create(home / "sparse", X, y, shard_rows=300),
            ShardedDataset.create(home / "dense", X.toarray(), y, shard_rows=300))


@pytest.mark.parametrize("l2", [0.0, 1e-2])
def test_sync_sgd_on_sparse_rows_sends_compact_sums_and_takes_the_dense_steps(client, stored_both_ways, l2) -> None:
    sparse, dense = stored_both_ways
    model = Logistic(sparse.n_features, l2=l2)
    runs = [sync_sgd(model, data, client=client, n_replicas=2, batch_size=20, epochs=1, seed=3, learning_rate=0.5)
            for data in (sparse, dense)]
    for x_sparse, x_dense in zip([r["x"] for r in runs[0].replicas], [r["x"] for r in runs[1].replicas]):
        # CSR and dense kernels round differently: not bitwise, but far below any step
        np.testing.assert_allclose(x_sparse, x_dense, rtol=0, atol=1e-12)
    assert np.abs(runs[1].x).max() > 0.01  # the steps moved the parameters
    sent_sparse, sent_dense = (sum(r.stats["bytes_sent_per_replica"]) for r in runs)
    # 30 steps, each one message up and one down: ~300 of 4097 coordinates a step travel
    # compact (12 bytes each), the dense sums' 32 KiB each way; even with an l2 penalty
    assert sent_dense == 2 * 30 * 8 * model.n_params
    assert 5 * sent_sparse < sent_dense


def test_neighbours_on_sparse_rows_send_compact_gradients(client, stored_both_ways) -> None:
    sparse, dense = stored_both_ways
    model = Logistic(sparse.n_features)
    runs = [neighbour_sgd(model, data, client=client, n_replicas=2, batch_size=20, epochs=1, seed=3,
                          learning_rate=0.5) for data in (sparse, dense)]
    # the exchange is asynchronous (when a neighbour's gradient lands varies run to run), so
    # the runs are compared by what they learn; the message's bits are tested without a cluster
    assert all(r.stats["exchanges_per_replica"] == [30, 30] for r in runs)
    X, y = sparse.load_rows(0, sparse.n_samples)
    before = model.objective(np.zeros(model.n_params), X, y)[0]
    losses = [model.objective(r.x, X, y)[0] for r in runs]
    assert max(losses) < before - 0.005 and abs(losses[0] - losses[1]) < 0.1 * (before - min(losses))
    sent_sparse, sent_dense = (sum(r.stats["bytes_sent_per_replica"]) for r in runs)
    assert sent_dense == 2 * 30 * 8 * model.n_params and 5 * sent_sparse < sent_dense
