"""Sparse X: CSR shards in Zarr, read back as scipy.sparse, never densified, checked on the
way in; the linear models and Sandblaster compute on them as on dense rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dask.sizeof import sizeof

from dasklbfgs import MLP, LeastSquares, Logistic, ShardedDataset, Softmax, sandblaster_lbfgs
from dasklbfgs.cli.format import format_description
from dasklbfgs.errors import ConfigurationError, CorruptDatasetError, InvalidDataError, ModelDataMismatchError
from dasklbfgs.models.compact_rows import CompactColumns

N, D = 1000, 300


def sparse_X(density: float = 0.02, seed: int = 0, n: int = N, d: int = D, dtype=np.float64) -> sp.csr_array:
    """About ``density * n * d`` uniform non-zeros at random places (drawn directly: scipy's
    ``sparse.random`` draws from all ``n * d`` cells, slow for wide matrices)."""
    rng = np.random.default_rng(seed)
    k = int(density * n * d)
    rows, cols = rng.integers(0, n, k), rng.integers(0, d, k)
    X = sp.csr_array((rng.uniform(size=k).astype(dtype), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    return X


def labels(X, seed: int = 0, classes: int = 2) -> np.ndarray:
    scores = X @ np.random.default_rng(seed).normal(size=(X.shape[1], classes))
    return np.argmax(scores + 0.1 * np.random.default_rng(seed + 1).normal(size=scores.shape), axis=1)


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "csc_array", "coo_matrix", "dask"])
def test_sparse_input_round_trips_as_csr(tmp_path, kind) -> None:
    X = sparse_X()
    y = labels(X)
    given = {"csr_array": X, "csr_matrix": sp.csr_matrix(X), "csc_array": sp.csc_array(X),
             "coo_matrix": sp.coo_matrix(X)}.get(kind)
    if kind == "dask":
        import dask.array as da

        given = da.from_array(sp.csr_matrix(X), chunks=(170, D), asarray=False)
    ds = ShardedDataset.create(tmp_path / "s", given, y, shard_rows=300)
    assert ds.is_sparse and ds.nnz == X.nnz and ds.n_shards == 4
    rows, y_rows = ds.load_rows(250, 701)  # across three shards
    assert isinstance(rows, sp.csr_array) and rows.shape == (451, D)
    assert (rows != X[250:701]).nnz == 0 and np.array_equal(y_rows, y[250:701])
    X_dask, y_dask = ds.to_dask()
    assert X_dask.numblocks == (4, 1) and isinstance(X_dask.blocks[1].compute(), sp.csr_array)
    assert (X_dask.compute() != X).nnz == 0 and np.array_equal(y_dask.compute(), y)


def test_bytes_grow_with_the_non_zeros_not_with_n_times_d(tmp_path) -> None:
    wide = 200_000  # a dense float64 X would be 1.6 GB
    sizes = {}
    for density in (1e-4, 1e-3):
        X = sparse_X(density, n=N, d=wide)
        ds = ShardedDataset.create(tmp_path / str(density), X, np.zeros(N), shard_rows=250)
        sizes[density] = (ds.nbytes_in_memory, ds.nbytes_stored(), ds.nnz)
        shard, _ = ds.load_shard(0)
        assert shard.indices.dtype == np.int32  # 12 bytes a non-zero, as scipy keeps them
        assert ds.nbytes_in_memory == pytest.approx(12 * ds.nnz + 8 * N + 4 * (N + 4), rel=1e-9)
    (mem_low, disk_low, nnz_low), (mem_high, disk_high, nnz_high) = sizes[1e-4], sizes[1e-3]
    assert nnz_high / nnz_low == pytest.approx(10, rel=0.05)
    assert 8 < mem_high / mem_low < 10.5 and 5 < disk_high / disk_low < 11
    assert mem_high < 0.001 * N * wide * 8 * 2


def test_from_blocks_of_uneven_sparse_blocks_equals_create(tmp_path) -> None:
    X = sparse_X()
    y = labels(X)
    cuts = [0, 13, 400, 401, 999, N]
    blocks = ((X[a:b], y[a:b]) for a, b in zip(cuts, cuts[1:]))
    ds = ShardedDataset.from_blocks(tmp_path / "b", blocks, shard_rows=256)
    assert ds.n_shards == 4 and ds.schema["nnz"] == [X[s:s + 256].nnz for s in range(0, N, 256)]
    assert (ds.load_rows(0, N)[0] != X).nnz == 0


def test_duplicates_are_summed_and_columns_sorted(tmp_path) -> None:
    coo = sp.coo_array((np.array([1.0, 2.0, 5.0, 0.5]), (np.array([0, 0, 1, 0]), np.array([3, 3, 0, 1]))),
                       shape=(2, 4))
    ds = ShardedDataset.create(tmp_path / "dup", coo, np.array([0, 1]), shard_rows=2)
    X, _ = ds.load_rows(0, 2)
    assert X.indices.tolist() == [1, 3, 0] and X.data.tolist() == [0.5, 3.0, 5.0]  # row 0: col 1, col 3 = 1 + 2
    unsorted = sp.csr_array((np.array([2.0, 1.0]), np.array([3, 1]), np.array([0, 2])), shape=(1, 4))
    X, _ = ShardedDataset.create(tmp_path / "unsorted", unsorted, np.array([1]), shard_rows=1).load_rows(0, 1)
    assert X.indices.tolist() == [1, 3] and X.data.tolist() == [1.0, 2.0]


def _broken(change: str) -> sp.csr_array:
    X = sparse_X(0.5, n=40, d=10)  # every row holds values
    if change == "nan":
        X.data[X.indptr[33]] = np.nan
    elif change == "column":
        X.indices[X.indptr[35]] = 10
    elif change == "indptr":
        X.indptr[20] = X.indptr[19] - 1
    elif change == "lengths":
        X.indices = X.indices[:-1]
    return X


@pytest.mark.parametrize(("change", "match"), [
    ("nan", r"X holds a non-finite value \(nan\) in shard 1 at row 33, column \d+; drop or impute"),
    ("column", r"X has the column index 10 in shard 1 at row 35, outside \[0, 10\) \(the dataset has 10 features\)"),
    ("indptr", r"X is a malformed CSR block in shard 0 starting at row 0: indptr must hold rows \+ 1 = 41 "
               r"non-decreasing offsets"),
    ("lengths", r"X has \d+ column indices for \d+ values in the CSR block starting at row 0 \(shard 0\); "
                r"they must match"),
])
def test_bad_sparse_input_names_shard_row_column_and_leaves_nothing(tmp_path, change, match) -> None:
    with pytest.raises(InvalidDataError, match=match):
        ShardedDataset.create(tmp_path / "bad", _broken(change), np.zeros(40), shard_rows=25)
    assert leftovers(tmp_path) == []


def test_mixing_sparse_and_dense_blocks_is_refused(tmp_path) -> None:
    X = sparse_X(n=20)
    with pytest.raises(InvalidDataError,
                       match="X is dense in the block starting at row 10 but the first block was sparse"):
        ShardedDataset.from_blocks(tmp_path / "m", [(X[:10], np.zeros(10)), (X[10:].toarray(), np.zeros(10))],
                                   shard_rows=5)
    with pytest.raises(InvalidDataError,
                       match="X is sparse in the block starting at row 10 but the first block was dense"):
        ShardedDataset.from_blocks(tmp_path / "m", [(X[:10].toarray(), np.zeros(10)), (X[10:], np.zeros(10))],
                                   shard_rows=5)
    assert leftovers(tmp_path) == []


def test_describe_info_and_what_sparse_data_cannot_do(tmp_path) -> None:
    X = sparse_X(0.01)
    ds = ShardedDataset.create(tmp_path / "s", X, labels(X), shard_rows=500)
    info = ds.describe()
    assert info["sparse"] and info["nnz"] == X.nnz and info["density"] == pytest.approx(X.nnz / (N * D))
    assert f"sparse (CSR): {X.nnz} non-zeros, density {X.nnz / (N * D):.3g}, {X.nnz / N:.1f} per row" \
        in format_description(info)
    assert "sparse, nnz=" in repr(ds)
    with pytest.raises(ConfigurationError, match=r"is sparse and xarray holds dense arrays; use to_dask\(\)"):
        ds.to_xarray()
    with pytest.raises(ModelDataMismatchError, match=r"MLP takes dense data, but X at .* is sparse; the linear models"):
        MLP(D, (4,), 2).check_data(ds)
    (tmp_path / "s" / "X" / "1" / "indices" / "c" / "0").unlink()  # a damaged store is named, not read as zeros
    with pytest.raises(CorruptDatasetError, match=r"cannot read sparse shard 1 of X of the dataset at .*"
                       r"\(rows 500-1000\): the chunk file X/1/indices/c/0 is missing; rewrite the dataset"):
        ds.load_shard(1)
    assert ds.load_shard(0)[0].nnz == ds.schema["nnz"][0]
    import zarr

    zarr.open_group(str(tmp_path / "s" / "X" / "0"), mode="a", zarr_format=3).create_array(
        "indptr", data=np.array([0, 1], dtype=np.int32), overwrite=True)  # a shard whose parts disagree
    with pytest.raises(CorruptDatasetError, match=r"cannot read sparse shard 0 .*its parts do not fit together "
                                                  r"\(\d+ values, \d+ column indices, 2 row pointers for 500 rows\)"):
        ds.load_shard(0)


@pytest.mark.parametrize("model", [LeastSquares(D, l2=0.1), Logistic(D, l2=0.1, fit_intercept=False),
                                   Softmax(D, 3, l2=0.1)], ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_and_dense_give_the_same_loss_and_gradient(model, dtype) -> None:
    X = sparse_X(0.05, dtype=dtype)
    y = labels(X, classes=getattr(model, "n_classes", 2)).astype(float)
    params = np.random.default_rng(3).normal(size=model.n_params)
    loss_sparse, grad_sparse = model.loss_grad_sum(params, X, y)
    loss_dense, grad_dense = model.loss_grad_sum(params, X.toarray(), y)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    assert loss_sparse == pytest.approx(loss_dense, rel=rtol)
    np.testing.assert_allclose(grad_sparse, grad_dense, rtol=rtol, atol=rtol * np.abs(grad_dense).max())
    np.testing.assert_allclose(model.predict(params, X), model.predict(params, X.toarray()))


def _with_empty_rows(X: sp.csr_array, first: int, last: int) -> sp.csr_array:
    """``X`` with the rows ``first..last-1`` holding no value."""
    keep = np.ones(X.shape[0])
    keep[first:last] = 0.0
    X = sp.csr_array(sp.diags_array(keep) @ X)
    X.eliminate_zeros()
    return X


@pytest.mark.parametrize("model", [
    LeastSquares(D, l2=0.1), Logistic(D, fit_intercept=False), Logistic(D, class_weight=[0.3, 2.0]),
    Softmax(D, 4), Softmax(D, 3, fit_intercept=False)], ids=lambda m: f"{type(m).__name__}-{m.fit_intercept}")
@pytest.mark.parametrize("weighted", [False, True])
def test_compact_portion_sums_are_the_dense_sums_bit_for_bit(model, weighted) -> None:
    """A portion of sparse rows sends only the coefficients of its columns and the
    intercepts; those numbers, and their sums in the fixed reduction order, are the dense
    path's bits, for empty portions and portions of rows without values too."""
    from dasklbfgs.models.sums import SparseSum, add_sums, add_sums_dense, as_dense, reduce_in_groups

    rng = np.random.default_rng(5)
    X = _with_empty_rows(sparse_X(0.01, seed=2), 400, 520)
    X.data *= 10.0 ** rng.uniform(-4, 4, size=X.nnz)  # values over decades: the order of additions shows
    y = labels(X, classes=getattr(model, "n_classes", 2)).astype(float)
    w = rng.uniform(0.1, 3.0, size=N) if weighted else None
    params = rng.normal(size=model.n_params)
    cuts = [0, 0, 17, 150, 400, 450, 520, 520, 700, 701, 1000]  # empty, value-less rows (400..520), one row
    cached = CompactColumns.of(X)  # a cached shard: renumbered once, its portions sliced from it
    dense_parts, compact_parts = [], []
    for a, b in zip(cuts, cuts[1:]):
        rows_w = None if w is None else w[a:b]
        dense_parts.append(model.loss_grad_sum(params, X[a:b], y[a:b], rows_w))
        compact_parts.append(model.portion_loss_grad_sum(params, X[a:b], y[a:b], rows_w))
        (loss, grad), (compact_loss, compact) = dense_parts[-1], compact_parts[-1]
        assert isinstance(compact, SparseSum) and compact_loss == loss
        assert np.array_equal(as_dense(compact), grad) and np.array_equal(np.signbit(as_dense(compact)),
                                                                           np.signbit(grad))
        assert len(compact.index) == len(np.unique(X[a:b].indices)) * model.n_outputs + model.n_params - model.n_coef
        shard_loss, on_shard_columns = model.portion_loss_grad_sum(params, cached[a:b], y[a:b], rows_w)
        assert shard_loss == loss and np.array_equal(as_dense(on_shard_columns), grad)
        assert np.array_equal(np.signbit(as_dense(on_shard_columns)), np.signbit(grad))
        # what a worker computes from only the parameters its shard reads: the same values there
        positions = model.compact_positions(cached)
        assert np.array_equal(positions, on_shard_columns.index)
        local_loss, values = model.compact_loss_grad_sum(params[positions], cached[a:b], y[a:b], rows_w)
        assert local_loss == loss and np.array_equal(values, on_shard_columns.values)
    dense_loss, dense_total = reduce_in_groups(dense_parts, add_sums)
    for parts in (compact_parts, [p if i % 3 else d for i, (p, d) in enumerate(zip(compact_parts, dense_parts))]):
        for add in (add_sums, add_sums_dense):  # kept compact (sent on), or dense (a total that stays)
            loss, total = reduce_in_groups(parts, add)  # all compact, then compact and dense mixed
            assert loss == dense_loss and np.array_equal(as_dense(total), dense_total)
            assert np.array_equal(np.signbit(as_dense(total)), np.signbit(dense_total))


@pytest.mark.parametrize("n_parts", [1, 3, 20])
@pytest.mark.parametrize("size", [5, 7, 98, 100])
def test_sums_added_by_blocks_of_coordinates_are_the_tree_of_groups_bit_for_bit(monkeypatch, n_parts, size) -> None:
    """An evaluation's sums added a block of coordinates at a time (blocks of 7 here: less than
    one, one, a multiple, a remainder) are the fixed tree of groups' bits, signs of zero
    included: compact sums with either index type, dense ones (first among them too), indices
    cut at the blocks beforehand (the evaluator's positions) or not, and a cut made for another
    width ignored. An index not sorted is refused."""
    from dasklbfgs.models import sums
    from dasklbfgs.models.sums import BlockCuts, BlockIndex, SparseSum, as_dense, reduce_in_blocks, reduce_in_groups

    monkeypatch.setattr(sums, "ADD_BLOCK", 7)
    monkeypatch.setattr(sums, "WHOLE_TOTALS_BYTES", 0)  # by blocks however small
    rng = np.random.default_rng(11)
    parts = []
    for i in range(n_parts):
        values = rng.normal(size=size) * 10.0 ** rng.uniform(-8, 8, size=size)  # the order of additions shows
        values[rng.uniform(size=size) < 0.1] = -0.0
        if i % 4 == 3 or (i == 0 and n_parts == 3):
            parts.append((float(rng.normal()), values))
        else:
            index = np.flatnonzero(rng.uniform(size=size) < 0.4).astype(np.int32 if i % 2 else np.intp)
            parts.append((float(rng.normal()), SparseSum(size, index, values[index])))
    compact = [s for _, s in parts if isinstance(s, SparseSum)]
    known = BlockCuts([s.index for s in compact[:2]])
    if compact[1:2]:
        known.cut(compact[1].index, size + 1)  # a cut for another width: made again for this one
    loss, total = reduce_in_groups(parts, sums.add_sums_dense)
    for given in (None, known, known):  # (the second time from the cuts kept)
        blocked_loss, blocked = reduce_in_blocks(parts, given)
        assert blocked_loss == loss and blocked.tobytes() == as_dense(total).tobytes()
    float32 = [(1.0, np.full(size, 0.1, dtype=np.float32))] * 2  # a model's own dtype, as the tree keeps it
    assert reduce_in_blocks(float32)[1].dtype == as_dense(reduce_in_groups(float32, sums.add_sums_dense)[1]).dtype
    with pytest.raises(ValueError, match="must be sorted and distinct to be cut at blocks"):
        BlockIndex.of(np.array([3, 1]), size)


def test_compact_positions_are_only_for_rows_on_their_columns() -> None:
    """Rows not renumbered on their columns (dense, plain CSR) read every parameter; compact
    sums refuse parameters that are not those of the rows' columns."""
    X = sparse_X(0.05)
    model = Softmax(D, 3)
    assert model.compact_positions(X) is None and model.compact_positions(X.toarray()) is None
    assert LeastSquares(D).compact_positions(CompactColumns.of(X)) is not None
    rows = CompactColumns.of(X[:50])
    with pytest.raises(ValueError, match=rf"{len(rows.columns)} columns with 3 output\(s\) need "
                                         rf"{3 * len(rows.columns) + 3} parameters, got \(7,\)"):
        model.compact_loss_grad_sum(np.zeros(7), rows, labels(X[:50], classes=3).astype(float))


def test_compact_columns_keep_the_rows_and_take_only_row_slices() -> None:
    X = _with_empty_rows(sparse_X(0.01, seed=3), 10, 20)
    rows = CompactColumns.of(X)
    assert rows.shape == X.shape and rows.nnz == X.nnz and CompactColumns.of(rows) is rows
    assert np.array_equal(rows.columns, np.unique(X.indices))
    assert (rows.to_csr() != X).nnz == 0 and (rows[5:300].to_csr() != X[5:300]).nnz == 0
    held = rows.columns.nbytes + rows.local.data.nbytes + rows.local.indices.nbytes + rows.local.indptr.nbytes
    assert sizeof(rows) == held  # what Dask's memory manager counts for a cached shard
    with pytest.raises(TypeError, match="takes a slice of rows"):
        rows[[1, 2]]


def test_compact_sums_turn_dense_once_they_would_be_larger() -> None:
    from dasklbfgs.models.sums import SparseSum, add_sum_parts

    few = [SparseSum(10, np.array([1, 4], dtype=np.int32), np.array([1.0, 2.0])),
           SparseSum(10, np.array([4, 9], dtype=np.int32), np.array([0.5, -1.0]))]
    added = add_sum_parts(few)
    assert (isinstance(added, SparseSum) and added.index.tolist() == [1, 4, 9]
            and added.values.tolist() == [1.0, 2.5, -1.0])
    # 8 of 10 coordinates: dense is smaller
    many = [*few, SparseSum(10, np.arange(0, 10, 2, dtype=np.int32), np.ones(5))]
    assert add_sum_parts(many).tolist() == [1.0, 1.0, 1.0, 0.0, 3.5, 0.0, 1.0, 0.0, 1.0, -1.0]


@pytest.mark.parametrize("state", ["local", "sharded"])
@pytest.mark.parametrize("standardize", [False, True])
def test_sandblaster_on_sparse_shards_takes_the_dense_iterates(client, tmp_path, standardize, state) -> None:
    X = sparse_X(0.03)
    y = labels(X)
    sparse = ShardedDataset.create(tmp_path / "s", X, y, shard_rows=300)
    dense = ShardedDataset.create(tmp_path / "d", X.toarray(), y, shard_rows=300)
    model = Logistic(D, l2=1e-3)
    options = dict(client=client, standardize=standardize, state=state,
                   n_param_shards=3 if state == "sharded" else None)
    on_sparse = sandblaster_lbfgs(model, sparse, **options)
    on_dense = sandblaster_lbfgs(model, dense, **options)
    assert on_sparse.success and on_sparse.nit == on_dense.nit
    np.testing.assert_allclose(on_sparse.x, on_dense.x, rtol=0, atol=1e-10)


def test_wide_sparse_portions_send_their_columns_not_the_features(client, tmp_path) -> None:
    """2^20 hashed features, 3000 rows: a portion's result is a few percent of the 8 MiB
    a dense gradient sum would be, and both states train on it to the same point."""
    import pickle

    from dasklbfgs.solvers.sandblaster.tasks import load_shard, portion_loss_grad

    wide, n = 2**20, 3000
    X = sparse_X(30 / wide, seed=4, n=n, d=wide)  # ~30 values a row
    data = ShardedDataset.create(tmp_path / "wide", X, labels(X[:, :300], classes=2), shard_rows=1000)
    model = Logistic(wide, l2=1e-4)
    x = np.random.default_rng(0).normal(scale=0.01, size=model.n_params)
    _, compact = portion_loss_grad(load_shard(data, 1), slice(0, 500), model=model, x=x)
    sent = len(pickle.dumps(compact, protocol=5))
    assert sent < 12 * 500 * 30 + 1000 and sent < 8 * wide / 40  # 12 bytes per column it has values in
    runs = {state: sandblaster_lbfgs(model, data, client=client, maxiter=5, state=state,
                                     n_param_shards=2 if state == "sharded" else None)
            for state in ("local", "sharded")}
    assert runs["local"].nit == runs["sharded"].nit == 5
    np.testing.assert_allclose(runs["sharded"].x, runs["local"].x, rtol=1e-10, atol=1e-12)


def test_ctr_recipe_is_wide_sparse_and_learnable(client, tmp_path) -> None:
    """Hashed power-law categoricals: ~34 non-zeros a row, ~3% positives, the same rows
    whatever the shard size; a logistic fit on it reaches scikit-learn's optimum."""
    from sklearn.linear_model import LogisticRegression as SkLogisticRegression

    from dasklbfgs import make_dataset

    splits = make_dataset("ctr", tmp_path / "ctr", rows=10_000, features=2**16, shard_rows=2500)
    train, test = splits["train"], splits["test"]
    assert train.is_sparse and train.n_features == 2**16 and test.n_samples == 2000
    assert 33 <= train.nnz / train.n_samples <= 34 and train.attrs["task"] == "binary"
    X, y = train.load_rows(0, train.n_samples)
    assert 0.02 < y.mean() < 0.045 and set(np.unique(X.data)) <= {1.0, 2.0, 3.0}
    again = make_dataset("ctr", tmp_path / "again", rows=10_000, features=2**16, shard_rows=3000)["train"]
    assert (again.load_rows(0, again.n_samples)[0] != X).nnz == 0  # rows do not depend on the shard size
    with pytest.raises(ConfigurationError, match="the 'ctr' recipe needs rows"):
        make_dataset("ctr", tmp_path / "x")
    with pytest.raises(ConfigurationError, match=r"the 'ctr' recipe takes no n_classes \(it is binary: clicks\)"):
        make_dataset("ctr", tmp_path / "x", rows=10, n_classes=3)
    l2 = 1e-3
    result = sandblaster_lbfgs(Logistic(2**16, l2=l2), train, client=client, gtol=1e-8)
    reference = SkLogisticRegression(C=1 / (l2 * train.n_samples), tol=1e-10, max_iter=5000).fit(X, y)
    ours = Logistic(2**16, l2=l2).objective(result.x, X, y)[0]
    theirs = Logistic(2**16, l2=l2).objective(np.append(reference.coef_.ravel(), reference.intercept_), X, y)[0]
    assert result.success and ours <= theirs * (1 + 1e-6)


def test_text_hashed_recipe_labels_docstrings_by_module_and_is_learnable(client, tmp_path) -> None:
    """Hashed unigram and bigram tf-idf of standard-library docstrings, labelled by module:
    sparse, unit-norm rows, the same on every run, and a softmax fit beats the majority class
    by far on held-out docstrings."""
    from dasklbfgs import make_dataset
    from dasklbfgs.data.text_hashed import hashed_column, terms

    assert terms("Open a file. Read it") == ["open", "a", "file", "read", "it", "open a", "a file", "read it"]
    assert hashed_column("open a", 2**40) == 549669041109  # a stable hash: not Python's per-process one
    splits = make_dataset("text-hashed", tmp_path / "t", features=2**12, n_classes=5, seed=3)
    train, test = splits["train"], splits["test"]
    assert train.is_sparse and train.n_features == 2**12 and train.attrs["task"] == "multiclass"
    assert train.attrs["classes"][:2] == ["ast", "decimal"] and len(train.attrs["classes"]) == 5
    X, y = train.load_rows(0, train.n_samples)
    np.testing.assert_allclose(np.sqrt(X.multiply(X).sum(axis=1))[np.diff(X.indptr) > 0], 1.0, rtol=1e-12)
    assert set(np.unique(y)) == set(range(5)) and 10 < X.nnz / X.shape[0] < 200
    again = make_dataset("text-hashed", tmp_path / "again", features=2**12, n_classes=5, seed=3)["train"]
    assert (again.load_rows(0, again.n_samples)[0] != X).nnz == 0
    model = Softmax(2**12, 5, l2=1e-4)
    result = sandblaster_lbfgs(model, train, client=client, maxiter=60)
    X_test, y_test = test.load_rows(0, test.n_samples)
    accuracy = np.mean(model.predict(result.x, X_test) == y_test)
    assert accuracy > max(0.7, 2 * np.bincount(y_test).max() / test.n_samples), accuracy
    with pytest.raises(ConfigurationError, match=r"the 'text-hashed' recipe takes no rows \(it has one row per "
                                                 r"docstring of its modules\), got 10"):
        make_dataset("text-hashed", tmp_path / "x", rows=10)
    with pytest.raises(ConfigurationError, match=r"the 'text-hashed' recipe has \d+ modules to label docstrings with; "
                                                 r"n_classes must be at most that, got 1000"):
        make_dataset("text-hashed", tmp_path / "x", n_classes=1000)
