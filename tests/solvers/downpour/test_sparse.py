"""Row-sparse pushes and fetches for models with an embedding table."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.downpour import ParameterShard, downpour_sgd, param_bounds
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import EmbeddingLM, Logistic, Softmax
from dasklbfgs.models.embedding import RowTable
from dasklbfgs.optim.updates import ftrl_step, make_rule
from dasklbfgs.solvers._replicas.batches import epoch_order
from dasklbfgs.solvers._replicas.wire import Wire

TABLE = RowTable(0, 10, 3)  # 30 table entries, then 7 dense ones


def test_shard_bounds_fall_on_row_boundaries_inside_the_table() -> None:
    bounds = param_bounds(37, 3, TABLE)
    assert bounds == [(0, 12), (12, 24), (24, 37)]
    assert param_bounds(37, 3) == [(0, 12), (12, 24), (24, 37)]
    assert param_bounds(100, 3, RowTable(0, 10, 4)) == [(0, 32), (32, 66), (66, 100)]  # 66: past the table
    with pytest.raises(ConfigurationError, match="3 parameter shards cannot split 9 parameters on row boundaries of 8"):
        param_bounds(9, 3, RowTable(0, 1, 8))


@pytest.mark.parametrize("rule, hyper", [("adagrad", {"learning_rate": 0.3}), ("sgd", {"learning_rate": 0.3})])
def test_sparse_and_dense_pushes_give_the_same_parameters(rule, hyper) -> None:
    bounds = param_bounds(37, 2, TABLE)
    wire = Wire(bounds, "float64", TABLE)
    rng = np.random.default_rng(0)
    start = rng.normal(size=37)

    async def scenario():
        dense = [ParameterShard(i, a, b, start[a:b], rule, hyper, TABLE) for i, (a, b) in enumerate(bounds)]
        sparse = [ParameterShard(i, a, b, start[a:b], rule, hyper, TABLE) for i, (a, b) in enumerate(bounds)]
        for step in range(5):
            rows = np.sort(rng.choice(10, size=3, replace=False))
            grad = np.zeros(37)
            grad[30:] = rng.normal(size=7)
            for r in rows:
                grad[r * 3 : r * 3 + 3] = rng.normal(size=3)
            for shard, payload in zip(dense, Wire(bounds, "float64").payloads(grad, None)):
                await shard.push(payload, step, 0, 1, 0.0)
            for shard, payload in zip(sparse, wire.payloads(grad, rows)):
                await shard.push(payload, step, 0, 1, 0.0)
        values = [np.concatenate([(await s.fetch())[0] for s in shards]) for shards in (dense, sparse)]
        stats = [await s.stats() for s in sparse]
        return values, stats

    (dense_values, sparse_values), stats = asyncio.run(scenario())
    np.testing.assert_array_equal(sparse_values, dense_values)
    assert not np.array_equal(dense_values, start)
    assert sum(s["bytes_in"] for s in stats) < sum(s["dense_bytes_in"] for s in stats)


def _pushes_leaving_row_0_after_the_first() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Six gradients on TABLE's layout and the rows each touches: row 0 only in the first
    (all 1.0, so its |z| = 1 is within the threshold S l1 = 0.25 S from S = 4), three of
    rows 1-9 in the others (large, to stay above it), the dense rest in all."""
    rng = np.random.default_rng(1)
    grads, touched = [], []
    for step in range(6):
        rows = np.array([0]) if step == 0 else np.sort(rng.choice(np.arange(1, 10), size=3, replace=False))
        grad = np.zeros(37)
        grad[30:] = rng.normal(size=7)
        for r in rows:
            grad[r * 3 : r * 3 + 3] = 1.0 if r == 0 else rng.normal(scale=4.0, size=3)
        grads.append(grad)
        touched.append(rows)
    return grads, touched


def test_ftrl_with_a_model_l1_takes_row_sparse_pushes_and_fetches_exactly() -> None:
    """The shard keeps z, n and the step count S and reads parameters as their closed form at
    S l1: row-sparse pushes and row fetches give what dense pushes (zeros elsewhere) give,
    and what FTRL with the threshold S l1 over the whole vector gives, also on a row no push
    carries after the first, which the growing threshold sets to exactly 0. Equal as floats
    (``assert_array_equal``): a zero gradient leaves z and n unchanged, and the closed form is
    the same elementwise arithmetic on the same numbers; only the sign of a zero may differ
    (dense pushes turn z = -0.0 into 0.0)."""
    bounds = param_bounds(37, 2, TABLE)
    wire = Wire(bounds, "float64", TABLE)
    hyper = {"learning_rate": 0.5, "beta": 1.0, "l1": 0.0, "l2": 0.0}  # FTRL's own l1 stays 0 under a model's
    l1 = np.r_[np.full(30, 0.25), np.zeros(7)]  # the model's: 0 on the dense rest (intercepts)
    grads, touched = _pushes_leaving_row_0_after_the_first()

    def new_shards():
        return [ParameterShard(i, a, b, np.zeros(b - a), "ftrl", hyper, TABLE, l1[a:b])
                for i, (a, b) in enumerate(bounds)]

    async def scenario():
        dense, sparse = new_shards(), new_shards()
        dense_seen, sparse_seen = [], []
        for step, (grad, rows) in enumerate(zip(grads, touched)):
            for shard, payload in zip(dense, Wire(bounds, "float64").payloads(grad, None)):
                await shard.push(payload, step, 0, 1, 0.0)
            dense_seen.append(np.concatenate([(await s.fetch())[0] for s in dense]))
            fetched = np.full(37, np.nan)
            ask = wire.split_rows(np.array([0, 5, 9]))
            replies = [(await s.push(p, step, 0, 1, 0.0, fetch=True, fetch_rows=r))[2]
                       for s, p, r in zip(sparse, wire.payloads(grad, rows), ask)]
            wire.apply_fetched(fetched, replies)
            sparse_seen.append(fetched)
        states = [[await s.get_state() for s in shards] for shards in (dense, sparse)]
        restored = new_shards()
        for shard, state in zip(restored, states[1]):
            await shard.set_state(state)
        full = [np.concatenate([(await s.fetch())[0] for s in shards]) for shards in (dense, sparse, restored)]
        return dense_seen, sparse_seen, states, full

    dense_seen, sparse_seen, (dense_states, sparse_states), full = asyncio.run(scenario())
    state, expected = make_rule("ftrl", **hyper).init(np.zeros(37)), np.zeros(37)
    for step, grad in enumerate(grads):  # FTRL on the whole vector, threshold S l1
        expected, state = ftrl_step(grad, state, expected, **{**hyper, "l1": l1 * (step + 1)})
        np.testing.assert_array_equal(dense_seen[step], expected)
        asked = ~np.isnan(sparse_seen[step])
        assert asked.sum() == 9 + 7  # rows 0, 5, 9 and the dense rest
        np.testing.assert_array_equal(sparse_seen[step][asked], expected[asked])
    assert np.all(dense_seen[2][:3] != 0.0) and np.all(dense_seen[3][:3] == 0.0)  # row 0: pushed once, 0 at S = 4
    assert np.count_nonzero(expected[3:30]) > 0
    for values in full:
        np.testing.assert_array_equal(values, expected)
    for dense_state, sparse_state in zip(dense_states, sparse_states):
        np.testing.assert_array_equal(sparse_state["values"], dense_state["values"])
        for key in ("z", "n"):
            np.testing.assert_array_equal(sparse_state["optimizer_state"][key], dense_state["optimizer_state"][key])
        assert sparse_state["steps"] == dense_state["steps"] == 6


def test_sparse_fetch_returns_the_requested_rows_and_the_dense_rest() -> None:
    bounds = param_bounds(37, 2, TABLE)
    wire = Wire(bounds, "float32", TABLE)
    values = np.arange(37, dtype=np.float64)

    async def scenario():
        shards = [ParameterShard(i, a, b, values[a:b], "sgd", {"learning_rate": 1.0}, TABLE)
                  for i, (a, b) in enumerate(bounds)]
        rows = wire.split_rows(np.array([1, 7]))
        return [(await s.fetch("float32", r))[0] for s, r in zip(shards, rows)]

    replies = asyncio.run(scenario())
    local = np.full(37, -1.0)
    wire.apply_fetched(local, replies)
    expected = np.full(37, -1.0)
    expected[[3, 4, 5, 21, 22, 23]] = values[[3, 4, 5, 21, 22, 23]]
    expected[30:] = values[30:]
    np.testing.assert_array_equal(local, expected)
    assert replies[0][1].dtype == np.float32


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny next-word task: word ids follow a fixed transition table, some words rare."""
    rng = np.random.default_rng(3)
    vocab, n = 60, 3000
    nxt = rng.integers(0, vocab, size=vocab)
    words = [0]
    for _ in range(n + 2):
        words.append(int(nxt[words[-1]]) if rng.random() < 0.8 else int(rng.integers(0, vocab)))
    words = np.array(words)
    X = np.stack([words[:-2][:n], words[1:-1][:n]], axis=1).astype(np.int32)
    y = words[2:][:n]
    return ShardedDataset.create(tmp_path_factory.mktemp("lm") / "lm", X, y, shard_rows=1000,
                                 attrs={"vocab_size": vocab})


def test_sparse_downpour_matches_dense_downpour_and_moves_fewer_bytes(client, corpus) -> None:
    model = EmbeddingLM(60, 16, 2, 8)
    kwargs = dict(client=client, n_replicas=1, n_param_shards=2, batch_size=20, learning_rate=0.3, epochs=1,
                  seed=2, max_steps=60)
    sparse = downpour_sgd(model, corpus, sparse=True, **kwargs)
    dense = downpour_sgd(model, corpus, sparse=False, **kwargs)
    np.testing.assert_array_equal(sparse.x, dense.x)
    assert sparse.stats["sparse"] and not dense.stats["sparse"]
    assert dense.stats["bytes_in"] == dense.stats["dense_bytes_in"]
    assert sparse.stats["bytes_in"] < 0.9 * sparse.stats["dense_bytes_in"]
    assert sparse.stats["bytes_out"] < 0.9 * sparse.stats["dense_bytes_out"]


def test_two_replicas_with_sparse_pushes_reduce_the_loss(client, corpus) -> None:
    model = EmbeddingLM(60, 16, 2, 16)
    start = model.objective(model.init_params(0), *corpus.load_rows(0, corpus.n_samples))[0]
    result = downpour_sgd(model, corpus, client=client, n_replicas=2, n_param_shards=2, batch_size=32,
                          learning_rate=0.3, epochs=3, n_fetch=2, n_push=2)
    end = model.objective(result.x, *corpus.load_rows(0, corpus.n_samples))[0]
    assert result.success and result.stats["sparse"]
    assert end < 0.7 * start


@pytest.mark.parametrize("l1, optimizer", [(0.0, "adagrad"), (2e-4, "ftrl")])
def test_a_linear_model_on_sparse_data_pushes_only_the_features_batches_touch(client, tmp_path, l1,
                                                                              optimizer) -> None:
    """Wide sparse data (each row a few of 3000 features): pushes and fetches carry the
    touched feature rows of W only, and the parameters are the dense pushes' exactly, also
    with the model's l1 under FTRL (its threshold grows on rows no push carries; the shards
    apply it when rows are read). Equal as floats: one replica fetching every step reads the
    rows its batch touches as the dense run has them, and a zero gradient leaves z, n alone."""
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(2000, 3000, density=0.002, format="csr", random_state=0)
    y = (X @ rng.normal(size=(3000, 3))).argmax(axis=1)
    data = ShardedDataset.create(tmp_path / "wide", X, y, shard_rows=1000)
    model = Softmax(3000, 3, l1=l1)
    kwargs = dict(client=client, n_replicas=1, n_param_shards=2, batch_size=20, learning_rate=0.5, epochs=1,
                  seed=1, max_steps=60, optimizer=optimizer)
    sparse = downpour_sgd(model, data, **kwargs)  # on by default: a row table on this data
    dense = downpour_sgd(model, data, sparse=False, **kwargs)
    np.testing.assert_array_equal(sparse.x, dense.x)
    assert sparse.stats["sparse"] and not dense.stats["sparse"]
    assert sparse.stats["bytes_in"] < 0.1 * sparse.stats["dense_bytes_in"]  # ~8 of 3000 rows a batch
    assert sparse.stats["bytes_out"] < 0.1 * sparse.stats["dense_bytes_out"]
    if l1:  # some features the batches touched were set to exactly 0 by the threshold, others not
        batches_read = epoch_order(2000, 1, 0, 0)[: sparse.nit * 20]  # replica 0's rows in its first epoch
        touched_rows = sparse.x[:9000].reshape(3000, 3)[np.unique(X.tocsr()[batches_read].indices)]
        zeroed = np.all(touched_rows == 0.0, axis=1)
        assert 0 < zeroed.sum() < len(zeroed), (zeroed.sum(), len(zeroed))
    assert model.row_table_for(ShardedDataset.create(tmp_path / "dense", X.toarray(), y, shard_rows=1000)) is None
    assert Softmax(3000, 3, l2=1e-3).row_table_for(data) is None  # l2 reaches every row: dense pushes


def test_a_wide_models_shards_start_without_a_large_task_graph(client, tmp_path) -> None:
    """2^22 features: each shard's 16 MiB slice of the start goes to its worker ahead of the
    actor, not inside the task (Dask warns about graphs over 10 MB, and slows down on them)."""
    import warnings

    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.csr_matrix((rng.normal(size=200 * 40), rng.integers(0, 2**22, 200 * 40), np.arange(0, 200 * 40 + 1, 40)),
                      shape=(200, 2**22))  # 40 a row (scipy's sp.random takes a minute at this width)
    data = ShardedDataset.create(tmp_path / "wide", X, np.arange(200) % 2, shard_rows=100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = downpour_sgd(Logistic(2**22), data, client=client, n_replicas=1, n_param_shards=2, batch_size=50,
                              epochs=1, optimizer="adagrad")
    assert result.x.shape == (2**22 + 1,)
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message) for w in caught]


def test_sparse_option_errors(client, corpus, tmp_path) -> None:
    with pytest.raises(ConfigurationError, match="sparse=True needs an update rule .* 'momentum' is not one"):
        downpour_sgd(EmbeddingLM(60, 4, 2, 4), corpus, client=client, sparse=True, optimizer="momentum")
    with pytest.raises(ConfigurationError, match="overlap=True needs dense transfer"):
        downpour_sgd(EmbeddingLM(60, 4, 2, 4), corpus, client=client, overlap=True, sparse=True)
    data = ShardedDataset.create(tmp_path / "s", np.zeros((40, 2)), np.arange(40) % 2, shard_rows=20)
    with pytest.raises(ConfigurationError, match="sparse=True needs a model with a row table .* has none on this data"):
        downpour_sgd(Softmax(2, 2), data, client=client, sparse=True, batch_size=4)
