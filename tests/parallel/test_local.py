"""The locally connected autoencoder in bands of rows: equal to the model, and only the halo
at each boundary travels."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs.errors import PartitionError
from dasklbfgs.models import LocalAutoencoder
from dasklbfgs.parallel import partition, run_in_process

rng = np.random.default_rng(7)


def problem(side: int, window: int, stride: int, maps: int = 2, n: int = 30):
    model = LocalAutoencoder(side, window, stride, maps, l2=0.2)
    X = rng.uniform(0.1, 0.9, size=(n, side * side))
    return model, X, model.init_params(1) + 0.1 * rng.normal(size=model.n_params)


@pytest.mark.parametrize(("side", "window", "stride"), [(10, 4, 2), (11, 5, 2), (12, 3, 3), (10, 6, 1)])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("weighted", [False, True])
def test_partitioned_loss_and_gradient_equal_the_model(side, window, stride, k, weighted) -> None:
    model, X, params = problem(side, window, stride)
    w = rng.uniform(0.2, 3.0, len(X)) if weighted else None
    loss, grad = model.loss_grad_sum(params, X, None, w)
    plan = partition(model, k)
    run = run_in_process([plan.program(p, part, X, None, w) for p, part in enumerate(plan.split(params))])
    assert len({loss_p for loss_p, _ in run.results}) == 1  # the same bits on every partition
    split_loss, split_grad = plan.loss_grad_sum(params, X, None, w)
    assert abs(split_loss - loss) <= 1e-12 * loss
    assert np.max(np.abs(split_grad - grad)) <= 1e-12 * np.max(np.abs(grad))


def test_thin_bands_reach_past_the_next_one() -> None:
    """Window 6, stride 1, one hidden row a band: partition 0's windows reach four other bands."""
    model, X, params = problem(10, 6, 1)
    plan = partition(model, 5)
    assert plan.spill(0) == {1: (1, 2), 2: (2, 3), 3: (3, 4), 4: (4, 6)}
    assert plan.spilled_into(4) == (0, 1, 2, 3)
    np.testing.assert_allclose(plan.loss_grad_sum(params, X, None)[1], model.loss_grad_sum(params, X, None)[1],
                               rtol=1e-12, atol=1e-15)


def test_owned_parameters_are_bands() -> None:
    model = LocalAutoencoder(8, 4, 2, maps=1)  # grid 3 x 3
    plan = partition(model, 2)
    assert plan.rows == (0, 2, 3) and plan.pixel_rows == (0, 4, 8)
    ids = model.layout.views(np.arange(model.n_params, dtype=np.float64))
    part = plan.split(np.arange(model.n_params, dtype=np.float64))[1]
    expected = [ids["W1"][2:].ravel(), ids["b1"][2:].ravel(), ids["W2"][2:].ravel(), ids["b2"][32:]]
    np.testing.assert_array_equal(part, np.concatenate(expected))
    np.testing.assert_array_equal(plan.join(plan.split(ids["b2"].base)), np.arange(model.n_params))


@pytest.mark.parametrize("k", [2, 3])
def test_bytes_follow_the_boundary_not_the_layer(k: int) -> None:
    side, window, stride, maps, n = 20, 6, 2, 32, 8
    model, X, params = problem(side, window, stride, maps, n)
    plan = partition(model, k)
    run = run_in_process([plan.program(p, part, X, None) for p, part in enumerate(plan.split(params))])
    halo_values = (k - 1) * n * (window - stride) * side  # each boundary, each way
    assert run.bytes_of("decoder") == run.bytes_of("decoder-error") == 8 * halo_values
    assert run.bytes_of("loss") == 8 * k * (k - 1)
    assert set().union(*run.bytes_sent) == {"decoder", "decoder-error", "loss"}  # the encoder exchanges nothing
    # a fully connected layer's all-gather would move every partition's hidden block to the others
    all_gather_hidden = 8 * (k - 1) * n * model.grid * model.grid * maps
    assert run.total_bytes < all_gather_hidden / 10


def test_more_bands_than_grid_rows() -> None:
    with pytest.raises(PartitionError, match=r"cannot split the hidden grid of LocalAutoencoder\(.*\) into k=4 bands "
                                             r"of rows: the grid has 3 rows \(3 x 3 locations of 2 maps\); use k <= 3"):
        partition(LocalAutoencoder(8, 4, 2, maps=2), 4)
