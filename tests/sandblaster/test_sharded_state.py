"""Sharded L-BFGS state: same iterates as the local mode, and only scalars reach the coordinator."""

from __future__ import annotations

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models import LeastSquares, Logistic, Softmax
from dasklbfgs.sandblaster import sandblaster_lbfgs


@pytest.mark.parametrize("name", ["logistic", "multinomial", "regression"])
def test_same_iterates_as_the_local_mode(client, datasets, name) -> None:
    data = datasets[name]
    model = {"logistic": Logistic(8, l2=1e-3), "multinomial": Softmax(8, 3, l2=1e-3),
             "regression": LeastSquares(8, l2=1e-3)}[name]
    local = sandblaster_lbfgs(model, data, client=client, maxiter=15)
    sharded = sandblaster_lbfgs(model, data, client=client, maxiter=15, state="sharded", n_param_shards=3)
    assert sharded.nit == local.nit and sharded.nfev == local.nfev and sharded.message == local.message
    np.testing.assert_allclose(sharded.x, local.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sharded.jac, local.jac, rtol=1e-8, atol=1e-12)
    assert sharded.fun == pytest.approx(local.fun, rel=1e-12)
    for a, b in zip(sharded.history, local.history):
        assert a["fun"] == pytest.approx(b["fun"], rel=1e-12) and a["step"] == pytest.approx(b["step"], rel=1e-8)


def test_bytes_reaching_the_coordinator_do_not_grow_with_the_parameters(client, tmp_path) -> None:
    """A softmax model 20x wider: the same bytes per iteration reach the coordinator."""
    received = {}
    for classes in (5, 100):
        problem = SyntheticProblem("multinomial", n_features=20, n_classes=classes, seed=1)
        data = ShardedDataset.from_blocks(tmp_path / f"k{classes}", problem.blocks(2000), shard_rows=500)
        model = Softmax(20, classes, l2=1e-2)
        result = sandblaster_lbfgs(model, data, client=client, maxiter=6, state="sharded", n_param_shards=2)
        assert result.nit == 6
        received[model.n_params] = result.timing["coordinator_bytes_received"] / result.nfev
    small, large = sorted(received)
    assert large >= 20 * small // 2
    assert received[large] <= received[small] * 1.05  # scalars only: no growth with d
    assert received[large] < 8 * large / 10  # far below one parameter vector per evaluation


def test_sharded_state_errors(client, datasets, tmp_path) -> None:
    data = datasets["logistic"]
    with pytest.raises(ConfigurationError, match="state must be 'local' or 'sharded', got 'remote'"):
        sandblaster_lbfgs(Logistic(8), data, client=client, state="remote")
    with pytest.raises(ConfigurationError, match="does not combine with standardize=True or checkpoint_path"):
        sandblaster_lbfgs(Logistic(8), data, client=client, state="sharded", standardize=True)
    with pytest.raises(ConfigurationError, match=r"n_param_shards \(50\) is larger than the model's 9 parameters"):
        sandblaster_lbfgs(Logistic(8), data, client=client, state="sharded", n_param_shards=50)
