"""LocalAutoencoder: its geometry against explicit loops, its gradient against central
differences, its arguments, and building it by name."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.errors import ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import LocalAutoencoder, model_for_dataset
from dasklbfgs.models.persist import load_params, save_params
from tests.models.test_neural import central_differences

rng = np.random.default_rng(5)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def reference_reconstruction(model: LocalAutoencoder, params: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One image, location by location: the model's definition written out."""
    v = model.layout.views(params)
    s, win, side = model.stride, model.window, model.side
    image = x.reshape(side, side)
    pre = v["b2"].reshape(side, side).copy()
    for i in range(model.grid):
        for j in range(model.grid):
            window = image[s * i : s * i + win, s * j : s * j + win].ravel()
            a = sigmoid(window @ v["W1"][i, j] + v["b1"][i, j])
            pre[s * i : s * i + win, s * j : s * j + win] += (a @ v["W2"][i, j]).reshape(win, win)
    return sigmoid(pre).ravel()


@pytest.mark.parametrize(("side", "window", "stride"), [(7, 3, 2), (6, 2, 2), (6, 2, 4), (5, 5, 1)])
def test_reconstruction_follows_the_local_connectivity(side, window, stride) -> None:
    model = LocalAutoencoder(side, window, stride, maps=2)
    params = model.init_params(3) + 0.1 * rng.normal(size=model.n_params)
    X = rng.uniform(0.1, 0.9, size=(3, side * side))
    expected = np.stack([reference_reconstruction(model, params, x) for x in X])
    np.testing.assert_allclose(model.predict(params, X), expected, rtol=1e-12, atol=1e-14)
    assert model.transform(params, X).shape == (3, model.grid * model.grid * 2)


@pytest.mark.parametrize("weighted", [False, True])
def test_gradient_matches_central_differences(weighted: bool) -> None:
    model = LocalAutoencoder(6, 4, 2, maps=2, l2=0.05)
    X = rng.uniform(0.1, 0.9, size=(40, 36))
    w = rng.uniform(0.5, 2.0, 40) if weighted else None
    params = model.init_params(1) + 0.1 * rng.normal(size=model.n_params)
    numeric = central_differences(lambda p: model.objective(p, X, None, w)[0], params)
    analytic = model.objective(params, X, None, w)[1]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_row_sums_add_over_any_split() -> None:
    model = LocalAutoencoder(6, 2, 2, maps=3)
    X = rng.uniform(0.1, 0.9, size=(50, 36))
    params = model.init_params(2)
    loss, grad = model.loss_grad_sum(params, X, None)
    parts = [model.loss_grad_sum(params, X[a:b], None) for a, b in ((0, 17), (17, 50))]
    assert abs(parts[0][0] + parts[1][0] - loss) <= 1e-12 * loss
    np.testing.assert_allclose(parts[0][1] + parts[1][1], grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("args", "match"), [
    ((4, 5, 1), r"window=5 is larger than the image \(side=4\); use window <= 4"),
    ((7, 4, 2), r"stride=2 .* \(side=7: side - window = 3 must be a multiple of the stride\); "
                r"strides that fit: \[1, 3\]"),
    ((6, 2, 0), r"stride must be an integer >= 1, got 0"),
    ((0, 2, 1), r"side must be an integer >= 1, got 0"),
])
def test_bad_geometry(args, match) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LocalAutoencoder(*args)
    with pytest.raises(ConfigurationError, match=r"maps must be an integer >= 1"):
        LocalAutoencoder(6, 2, 2, maps=0)


def test_built_by_name_for_square_images_and_saved(tmp_path) -> None:
    X = rng.uniform(0.1, 0.9, size=(40, 36))
    data = ShardedDataset.create(tmp_path / "p", X, np.zeros(40), shard_rows=20)
    model = model_for_dataset("local_autoencoder", data, window=2, stride=2, maps=3, l2=0.1)
    assert model == LocalAutoencoder(6, 2, 2, 3, l2=0.1)
    loaded, params, _ = load_params(save_params(tmp_path / "m.npz", model, model.init_params(0)))
    assert loaded == model and params.shape == (model.n_params,)
    wide = ShardedDataset.create(tmp_path / "w", rng.uniform(size=(40, 10)), np.zeros(40), shard_rows=20)
    with pytest.raises(ModelDataMismatchError, match=r"has 10 features, not a square number"):
        model_for_dataset("local_autoencoder", wide)
    with pytest.raises(ConfigurationError, match=r"does not take option\(s\) \['n_hidden'\]"):
        model_for_dataset("local_autoencoder", data, n_hidden=3)
