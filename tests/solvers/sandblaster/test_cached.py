"""A dataset's shards kept in the workers' memory across fits (dasklbfgs.cached): read once,
the same bits as a run that loads them itself, released for certain at the end."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, get_task_stream

import dasklbfgs
from dasklbfgs import ShardedDataset, minimize
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import Logistic
from tests.solvers.test_leftovers import _actors, _keys, _left_behind


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 6))
    y = (X[:, 0] - X[:, 1] + rng.normal(size=2000) > 0).astype(np.int64)
    return ShardedDataset.create(tmp_path_factory.mktemp("cached") / "d", X, y, shard_rows=500)


def _shard_loads(stream) -> int:
    """Shards read from the store (a backup's or a move's copy is taken from a worker)."""
    return sum(task["key"].startswith(("sandblaster-shard-", "sandblaster-load-")) and "-copy-" not in task["key"]
               for task in stream.data)


def test_fits_on_a_cached_dataset_read_its_shards_once_and_keep_their_bits(client, data) -> None:
    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    own = minimize(Logistic(6, l2=1e-2), data, client=client)
    with get_task_stream(client) as stream, dasklbfgs.cached(data, client=client) as shards:
        assert shards.n_samples == 2000 and not shards.closed
        fits = [minimize(Logistic(6, l2=l2), shards, eval_data=shards, score=True) for l2 in (1e-2, 1e-3)]
        held_out = dasklbfgs.evaluate(Logistic(6), fits[0].x, shards, metrics=["log_loss", "roc_auc"])
    assert _shard_loads(stream) == data.n_shards  # loaded once, for both fits and the evaluation
    assert fits[0].nit == own.nit and np.array_equal(fits[0].x, own.x)  # the same bits as loading them itself
    assert fits[1].nit != fits[0].nit
    assert fits[0].stats["inverse_hessian_scale"] > 0  # the curvature a warm-started run next to it starts with
    on_store = dasklbfgs.evaluate(Logistic(6), fits[0].x, data, client=client,
                                  metrics=["log_loss", "roc_auc", "accuracy"])
    assert held_out["log_loss"] == pytest.approx(on_store["log_loss"], rel=1e-12)
    assert held_out["roc_auc"] == on_store["roc_auc"]
    assert fits[0].scores["train"]["log_loss"] == pytest.approx(on_store["log_loss"], rel=1e-12)
    assert fits[0].history[-1]["eval_accuracy"] == on_store["accuracy"]  # held-out scoring on the cached shards
    assert shards.closed
    assert _left_behind(client, keys_before, actors_before) == ([], [])  # released at the end


def test_the_objective_on_a_cached_dataset_is_the_models_in_process(client, data) -> None:
    model = Logistic(6, l2=0.1)
    X, y = data.load_rows(0, data.n_samples)
    params = np.random.default_rng(0).normal(size=model.n_params)
    with dasklbfgs.cached(data, client=client) as shards:
        f, g = shards.objective(model, params)
    expected_f, expected_g = model.objective(params, X, y)
    assert f == pytest.approx(expected_f, rel=1e-12)
    np.testing.assert_allclose(g, expected_g, rtol=1e-10, atol=1e-14)


def test_a_cached_dataset_is_refused_once_closed_or_on_another_client(client, data) -> None:
    keys_before, actors_before = client.run_on_scheduler(_keys), client.run(_actors)
    with pytest.raises(RuntimeError, match="raised in the block"), dasklbfgs.cached(data, client=client) as shards:
        raise RuntimeError("raised in the block")
    assert shards.closed  # released although the block raised
    assert _left_behind(client, keys_before, actors_before) == ([], [])
    with pytest.raises(ConfigurationError, match=r"the cached dataset '.*' was closed: its shards are no longer"):
        minimize(Logistic(6), shards, client=client)
    with pytest.raises(ConfigurationError, match=r"the cached dataset '.*' was closed"):
        minimize(Logistic(6), data, client=client, eval_data=shards)  # held-out data, closed: refused at once
    with dasklbfgs.cached(data, client=client) as shards, Client(client.scheduler.address) as other:
        with pytest.raises(ConfigurationError, match=r"holds its shards on the cluster of another client \(tcp://"):
            minimize(Logistic(6), shards, client=other)
        with pytest.raises(ConfigurationError, match=r"holds its shards on the cluster of another client"):
            dasklbfgs.regularization_path(Logistic(6), shards, l2=[0.1], client=other)
        assert dasklbfgs.ShardedDataset.open(data.url).n_samples == shards.n_samples
