"""Linear objectives: gradients against finite differences, exact block sums, stability."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import approx_fprime
from scipy.special import expit, logsumexp

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax, model_for_dataset
from dasklbfgs.models._kernels import block_rows
from dasklbfgs.models.persist import load_params, save_params

rng = np.random.default_rng(0)
N, D, K = 3000, 6, 4
X = rng.normal(size=(N, D)) * np.array([1, 10, 0.1, 1, 3, 1])
Y = {
    "least_squares": rng.normal(size=N),
    "logistic": (rng.random(N) < 0.4).astype(np.int64),
    "softmax": rng.integers(0, K, N),
}


def make(name: str, **kw):
    return {"least_squares": LeastSquares(D, **kw), "logistic": Logistic(D, **kw),
            "softmax": Softmax(D, K, **kw)}[name]


def reference_objective(name: str, model, params: np.ndarray) -> float:
    """Straightforward per-sample formulas from the spec, for comparison."""
    W, b = model.unpack(params)
    z = X @ W + (b if name == "softmax" else b[0])
    y = Y[name]
    if name == "least_squares":
        losses = 0.5 * (z - y) ** 2
    elif name == "logistic":
        losses = np.logaddexp(0, z) - y * z
    else:
        losses = logsumexp(z, axis=1) - z[np.arange(N), y]
    return losses.mean() + 0.5 * model.l2 * np.sum(params[: model.n_coef] ** 2)


@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_objective_and_gradient_match_references(name, fit_intercept) -> None:
    model = make(name, l2=0.3, fit_intercept=fit_intercept)
    params = rng.normal(scale=0.2, size=model.n_params)
    f, g = model.objective(params, X, Y[name])
    assert f == pytest.approx(reference_objective(name, model, params), rel=1e-12)
    fd = approx_fprime(params, lambda p: reference_objective(name, model, p), 1e-7)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax"])
def test_block_sums_add_up_to_the_whole(name) -> None:
    model = make(name)
    params = rng.normal(size=model.n_params)
    whole = model.loss_grad_sum(params, X, Y[name])
    cuts = [0, 1, 700, 701, 2999, N]
    parts = [model.loss_grad_sum(params, X[a:b], Y[name][a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    assert sum(p[0] for p in parts) == pytest.approx(whole[0], rel=1e-12)
    np.testing.assert_allclose(sum(p[1] for p in parts), whole[1], rtol=1e-11, atol=1e-9)


def test_blocks_are_cache_sized_and_the_kernel_crosses_them() -> None:
    assert block_rows(100, 8) == 1966
    assert block_rows(10**7, 8) == 64
    wide = np.random.default_rng(1).normal(size=(5000, 300))  # several blocks
    y = (wide[:, 0] > 0).astype(float)
    model = Logistic(300)
    params = np.random.default_rng(2).normal(scale=0.1, size=model.n_params)
    z = wide @ params[:300] + params[300]
    loss, grad = model.loss_grad_sum(params, wide, y)
    assert loss == pytest.approx(float(np.sum(np.logaddexp(0, z) - y * z)), rel=1e-12)
    np.testing.assert_allclose(grad[:300], wide.T @ (expit(z) - y), rtol=1e-10, atol=1e-10)


def test_huge_margins_do_not_overflow() -> None:
    Xh = np.array([[1e4], [-1e4], [800.0], [-800.0]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss, grad = Logistic(1, fit_intercept=False).loss_grad_sum(np.array([1.0]), Xh, np.array([0, 1, 1, 0]))
        assert loss == pytest.approx(2e4)
        np.testing.assert_allclose(grad, [1e4 + 1e4 + 0 + 0])
        sm = Softmax(1, 2, fit_intercept=False)
        loss, grad = sm.loss_grad_sum(np.array([1.0, -1.0]), Xh, np.array([1, 0, 0, 1]))
        assert np.isfinite(loss) and np.all(np.isfinite(grad))
        assert loss == pytest.approx(2 * 2e4, rel=1e-12)


def test_float32_data_matches_float64() -> None:
    model = Softmax(D, K, l2=0.1)
    params = rng.normal(scale=0.1, size=model.n_params)
    f64 = model.objective(params, X, Y["softmax"])
    f32 = model.objective(params, X.astype(np.float32), Y["softmax"])
    assert f32[0] == pytest.approx(f64[0], rel=1e-5)
    np.testing.assert_allclose(f32[1], f64[1], rtol=1e-3, atol=1e-4)


def test_predictions() -> None:
    model = Softmax(D, K)
    params = rng.normal(size=model.n_params)
    proba = model.predict_proba(params, X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.predict(params, X), proba.argmax(axis=1))
    logistic = Logistic(D)
    p = logistic.predict_proba(params[: D + 1], X)
    np.testing.assert_allclose(p[:, 1], expit(X @ params[:D] + params[D]))
    np.testing.assert_array_equal(logistic.predict(params[: D + 1], X), (p[:, 1] > 0.5).astype(int))
    ls = LeastSquares(D, fit_intercept=False)
    np.testing.assert_allclose(ls.predict(params[:D], X), X @ params[:D])


def test_layout_and_init() -> None:
    model = Softmax(3, 2)
    params = np.arange(8.0)
    W, b = model.unpack(params)
    np.testing.assert_array_equal(W, [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(b, [6, 7])
    assert model.init_params(None).tolist() == [0.0] * 8
    np.testing.assert_array_equal(model.init_params(5), model.init_params(5))
    assert model == Softmax(3, 2) and model != Softmax(3, 2, l2=1.0)


WEIGHTED_MODELS = [LeastSquares(6, l2=0.1), Logistic(6, class_weight=[2.0, 0.5]),
                   Softmax(6, 4, l2=0.1, class_weight=[1.0, 0.0, 3.0, 0.5]), MLP(6, hidden=(5,), n_classes=4, l2=0.1)]


@pytest.mark.parametrize(("model", "sparse"), [
    pytest.param(m, sparse, id=f"{type(m).__name__}-{'sparse' if sparse else 'dense'}")
    for m in WEIGHTED_MODELS for sparse in (False, True) if m.accepts_sparse or not sparse])
def test_weights_are_repetitions_and_class_weights_are_weights_by_label(model, sparse) -> None:
    """A row of integer weight k counts as k copies of it (dense and sparse X); a class
    weight is the sample weight of every row with that label."""
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(700, 6)), rng.integers(0, 4 if not isinstance(model, Logistic) else 2, 700) * 1.0
    if isinstance(model, LeastSquares):
        y = rng.normal(size=700)
    w = rng.integers(0, 4, 700)
    params = rng.normal(size=model.n_params)
    Xw = sp.csr_array(X) if sparse else X
    weighted = model.objective(params, Xw, y, w.astype(float))
    repeated = model.objective(params, np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(weighted[0], repeated[0], rtol=1e-13)
    np.testing.assert_allclose(weighted[1], repeated[1], rtol=1e-11, atol=1e-13)
    f = lambda p: model.objective(p, Xw, y, w * 0.7)[0]  # noqa: E731
    np.testing.assert_allclose(model.objective(params, Xw, y, w * 0.7)[1], approx_fprime(params, f, 1e-7),
                               rtol=1e-4, atol=1e-6)
    class_weight = getattr(model, "class_weight", None)
    if class_weight is not None:
        plain = type(model)(**{**model._config(), "class_weight": None})
        by_label = np.asarray(class_weight)[y.astype(int)] * w
        np.testing.assert_allclose(model.loss_grad_sum(params, Xw, y, w * 1.0)[1],
                                   plain.loss_grad_sum(params, Xw, y, by_label)[1], rtol=1e-12, atol=1e-14)
        assert repr(model).endswith(f"class_weight={list(class_weight)!r})")
        assert type(model)(**model._config()) == model


def test_save_and_load_params(tmp_path) -> None:
    model = Softmax(3, 2, l2=0.5, fit_intercept=False, l1=0.25)
    params = np.arange(6.0)
    save_params(tmp_path / "m.npz", model, params, {"note": "x"})
    loaded, p, info = load_params(tmp_path / "m.npz")
    assert loaded == model and info == {"note": "x"}
    np.testing.assert_array_equal(p, params)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    from dasklbfgs.errors import DaskLBFGSError

    with pytest.raises(DaskLBFGSError, match=r"is not a dasklbfgs parameter file"):
        load_params(tmp_path / "junk.npz")
    # arrays beside the model (a regularization path's), never in place of its own entries
    save_params(tmp_path / "p.npz", model, params, arrays={"path_alphas": np.array([1.0, 0.1])})
    with np.load(tmp_path / "p.npz") as saved:
        np.testing.assert_array_equal(saved["path_alphas"], [1.0, 0.1])
    assert load_params(tmp_path / "p.npz")[0] == model
    with pytest.raises(DaskLBFGSError, match="arrays saved beside a model cannot be named info, params"):
        save_params(tmp_path / "q.npz", model, params, arrays={"params": params, "info": params})
    assert not (tmp_path / "q.npz").exists()


def test_a_file_that_is_not_a_parameter_file_is_said_to_be_none_in_our_words(tmp_path) -> None:
    """What a file is instead, and what a parameter file is: never numpy's advice to load
    it with allow_pickle, nor a TypeError for a lone array."""
    import pickle
    import re

    from dasklbfgs.errors import ModelFileError

    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"coef": [1.0, 2.0]}))
    (tmp_path / "model.txt").write_text("coef 1.0 2.0\n")
    np.save(tmp_path / "coef.npy", np.arange(3.0))
    np.savez(tmp_path / "other.npz", coef=np.arange(3.0))
    np.savez(tmp_path / "objects.npz", model=np.array([{"name": "softmax"}], dtype=object), params=np.zeros(2),
             info=np.array("{}"))
    (tmp_path / "folder.npz").mkdir()
    what = r"; a parameter file is the \.npz archive that save_params, 'dasklbfgs train --output' and the pipelines "
    for name, found in [("model.pkl", "it is a Python pickle, not an .npz archive"),
                        ("model.txt", "it is a text file, not an .npz archive"),
                        ("coef.npy", r"it is a single numpy array \(.npy\), not an .npz archive"),
                        ("other.npz", r"it is an .npz archive without the entries \['model', 'params', 'info'\] "
                                      r"\(it holds \['coef'\]\)"),
                        ("objects.npz", "an entry holds Python objects")]:
        where = re.escape(str(tmp_path / name))
        with pytest.raises(ModelFileError, match=rf"^'{where}' is not a dasklbfgs parameter file: {found}{what}") \
                as raised:
            load_params(tmp_path / name)
        assert "allow_pickle" not in str(raised.value)
    folder, gone = (re.escape(str(tmp_path / name)) for name in ("folder.npz", "gone.npz"))
    with pytest.raises(ModelFileError, match=rf"^'{folder}' is a folder, not a dasklbfgs parameter file{what}"):
        load_params(tmp_path / "folder.npz")
    with pytest.raises(ModelFileError, match=rf"^no parameter file at '{gone}': nothing is at that "
                                             r"path \(a model is saved there by save_params or 'dasklbfgs train "
                                             r"--output'\)$"):
        load_params(tmp_path / "gone.npz")


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: Logistic(0), r"n_features must be an integer >= 1, got 0"),
        (lambda: Logistic(3, l2=-1), r"l2 must be a non-negative finite number, got -1"),
        (lambda: Logistic(3, l2="big"), r"l2 must be a non-negative number, got 'big'"),
        (lambda: Softmax(3, 1), r"n_classes must be an integer >= 2, got 1"),
        (lambda: LeastSquares(3, fit_intercept="yes"), r"fit_intercept must be True or False, got 'yes'"),
        (lambda: Logistic(3, l1=-0.5), r"l1 must be a non-negative finite number, got -0.5"),
        (lambda: Logistic(3, class_weight=[1.0]), r"class_weight must be 2 numbers, one per class label 0..1, "
                                                  r"got \[1.0\]"),
        (lambda: Softmax(3, 3, class_weight="x"), r"class_weight must be 3 numbers, .* got 'x'"),
        (lambda: Softmax(3, 2, class_weight=[1, -1]), r"class_weight must be finite numbers >= 0, not all 0, "
                                                      r"got \[1, -1\]"),
        (lambda: Logistic(3, class_weight=[0, 0]), r"not all 0, got \[0, 0\]"),
    ],
)
def test_configuration_errors(factory, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        factory()


def test_model_data_mismatch(tmp_path) -> None:
    data = ShardedDataset.create(tmp_path / "d", X, Y["softmax"], shard_rows=1000)
    first_above_1 = int(np.flatnonzero(Y["softmax"] > 1)[0])
    with pytest.raises(ModelDataMismatchError, match=r"expects 5 features but the dataset at .* has 6"):
        Logistic(5).check_data(data)
    with pytest.raises(ModelDataMismatchError,
                       match=r"Logistic needs integer labels in 0..1, but y at .* ranges over \[0, 3\]; the first is "
                             rf"y = {Y['softmax'][first_above_1]:g} in shard 0 at row {first_above_1}"):
        Logistic(D).check_data(data)
    with pytest.raises(ModelDataMismatchError, match=r"Softmax needs integer labels in 0..2"):
        Softmax(D, 3).check_data(data)
    Softmax(D, 4).check_data(data)
    real = ShardedDataset.create(tmp_path / "r", X, Y["least_squares"], shard_rows=1000)
    with pytest.raises(ModelDataMismatchError, match=r"and is not integer-valued"):
        Softmax(D, 4).check_data(real)
    with pytest.raises(ModelDataMismatchError, match=r"x0 must have shape \(7,\)"):
        Logistic(D).check_params(np.zeros(3))
    with pytest.raises(ModelDataMismatchError, match=r"x0 is not finite: x0\[2\] = nan"):
        Logistic(D).check_params(np.array([0, 0, np.nan, 0, 0, 0, 0]))
    assert model_for_dataset("softmax", data).n_classes == 4
    with pytest.raises(ConfigurationError, match=r"model must be one of .* got 'svm'"):
        model_for_dataset("svm", data)


def test_l1_weights_cover_the_coefficients_only(tmp_path) -> None:
    assert Logistic(3).l1_weights() is None  # no l1 term: Sandblaster runs plain L-BFGS
    np.testing.assert_array_equal(Logistic(3, l1=0.5).l1_weights(), [0.5, 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(Softmax(2, 3, l1=0.5).l1_weights(), [0.5] * 6 + [0.0] * 3)
    np.testing.assert_array_equal(LeastSquares(2, l1=0.5, fit_intercept=False).l1_weights(), [0.5, 0.5])
    # the penalty stays the smooth part: l1 does not enter it
    model = Logistic(3, l2=1.0, l1=0.5)
    params = np.array([1.0, -2.0, 0.0, 3.0])
    assert model.penalty(params)[0] == Logistic(3, l2=1.0).penalty(params)[0] == 2.5
    data = ShardedDataset.create(tmp_path / "d", X, Y["logistic"], shard_rows=1000)
    assert model_for_dataset("logistic", data, l1=0.1, l2=0.2) == Logistic(D, l1=0.1, l2=0.2)
    with pytest.raises(ConfigurationError, match=r"l1=0.1 applies to the linear models .* not 'mlp'"):
        model_for_dataset("mlp", data, l1=0.1)


@pytest.mark.parametrize(("attrs", "expected"), [
    ({"task": "binary"}, "logistic"),
    ({"task": "multiclass", "n_classes": 4}, "softmax"),
    ({"task": "regression"}, "least_squares"),
    ({"task": "unsupervised"}, "sparse_autoencoder"),
    ({"task": "multiclass", "vocab_size": 50}, "embedding_lm"),
    ({"task": "classification", "n_classes": 2}, "logistic"),
    ({"task": "classification", "n_classes": 5}, "softmax"),
])
def test_the_default_model_is_what_the_recorded_task_implies(tmp_path, attrs, expected) -> None:
    from dasklbfgs.models.registry import default_model

    data = ShardedDataset.create(tmp_path / "d", X[:50], Y["softmax"][:50], shard_rows=50, attrs=attrs)
    assert default_model(data) == expected


def test_a_dataset_without_a_task_asks_for_the_model(tmp_path) -> None:
    from dasklbfgs.models.registry import default_model

    data = ShardedDataset.create(tmp_path / "d", X[:50], Y["softmax"][:50], shard_rows=50)
    with pytest.raises(ConfigurationError, match=r"dataset '.*d' records no task: choose the model, one of "
                                                 r"\('least_squares', 'logistic'.*\(--model, or model: name:"):
        default_model(data)
    odd = ShardedDataset.create(tmp_path / "o", X[:50], Y["softmax"][:50], shard_rows=50, attrs={"task": "ranking"})
    with pytest.raises(ConfigurationError, match=r"records task 'ranking', which names no model"):
        default_model(odd)


@pytest.mark.parametrize("model", [Logistic(100_003, l2=0.37), Softmax(40_000, 3, l2=1e-3),
                                   LeastSquares(70_001, l2=0.0)], ids=["logistic", "softmax", "no-penalty"])
def test_the_penalty_is_added_in_place_with_the_bits_of_the_whole_gradient(model) -> None:
    """The coordinator's objective from the sums adds ``l2 * W`` block by block (no vector as long
    as the parameters made for it): the same bits as the penalty's gradient formed whole and added."""
    rng = np.random.default_rng(8)
    params, sums = rng.normal(size=model.n_params), rng.normal(size=model.n_params + 2)
    f, g = model.objective_from_sums(params, 3.0, sums, 7.0)
    penalty, penalty_grad = model.penalty(params)
    expected = sums[: model.n_params] / 7.0
    expected += penalty_grad
    np.testing.assert_array_equal(g, expected, strict=True)
    assert f == 3.0 / 7.0 + penalty
