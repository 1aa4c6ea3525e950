"""Partition plans: ownership, the partition-major layout and its index maps, the errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dasklbfgs.errors import PartitionError
from dasklbfgs.models import MLP, LocalAutoencoder, Logistic, SparseAutoencoder
from dasklbfgs.parallel import PARTITIONERS, partition
from dasklbfgs.parallel.base import even_bounds


def test_even_bounds_are_contiguous_and_as_even_as_possible() -> None:
    assert even_bounds(10, 3) == (0, 4, 7, 10)
    assert even_bounds(4, 4) == (0, 1, 2, 3, 4)
    assert even_bounds(7, 1) == (0, 7)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_mlp_layout_is_a_permutation_with_contiguous_partition_slices(k: int) -> None:
    model = MLP(5, (6, 4), 7)
    plan = partition(model, k)
    params = np.arange(model.n_params, dtype=np.float64) * 1.5
    vector = plan.to_partitioned(params)
    assert sorted(vector) == sorted(params)  # a permutation
    np.testing.assert_array_equal(plan.from_partitioned(vector), params)
    parts = plan.split(params)
    assert [len(part) for part in parts] == [s.stop - s.start for s in plan.param_slices]
    assert plan.param_slices[0].start == 0 and plan.param_slices[-1].stop == model.n_params
    assert all(a.stop == b.start for a, b in zip(plan.param_slices, plan.param_slices[1:]))
    for part, piece in zip(parts, plan.param_slices):
        np.testing.assert_array_equal(part, vector[piece])
    np.testing.assert_array_equal(plan.join(parts), params)


@pytest.mark.parametrize("model", [MLP(440, (512, 512), 128), LocalAutoencoder(32, window=8, stride=4, maps=16)],
                         ids=["mlp", "local"])
def test_a_partitioned_model_travels_without_its_index_arrays(model) -> None:
    """Every portion task and partition carries one: pickled, it is its class, model and k
    (the index arrays, as long as the parameters, are rebuilt on arrival, once per process)."""
    plan = partition(model, 2)
    message = pickle.dumps(plan)
    assert len(message) < 2_000 < plan.order.nbytes
    arrived = pickle.loads(message)
    assert type(arrived) is type(plan) and arrived.k == 2
    assert arrived.param_slices == plan.param_slices
    assert "order" not in vars(arrived)  # a worker training one partition never builds them
    np.testing.assert_array_equal(arrived.order, plan.order)
    assert pickle.loads(message) is arrived  # built once in this process


@pytest.mark.parametrize("model", [MLP(5, (6, 4), 7, l2=0.3), LocalAutoencoder(12, window=4, stride=2, maps=3, l2=0.2)],
                         ids=["mlp", "local"])
def test_a_partition_builds_its_weight_decay_from_its_shapes(model) -> None:
    """Each partition's decay coefficients, built from its block shapes only, are its slice of
    the whole model's coefficients in the partitioned layout."""
    from dasklbfgs.solvers.downpour.partitions import decay_by_array

    plan = partition(model, 3)
    whole = plan.to_partitioned(model.penalty(np.ones(model.n_params))[1])
    decay = decay_by_array(model)
    assert set(decay) == {name for name in model.layout.views(whole) if name.startswith("W")}
    for p, own in enumerate(plan.param_slices):
        np.testing.assert_array_equal(plan.own_coefficients(p, decay), whole[own])


def test_a_penalty_that_is_not_a_weight_decay_cannot_be_split() -> None:
    from dasklbfgs.solvers.downpour.partitions import decay_by_array

    class Graded(MLP):  # a decay that grows along each array: not one coefficient per array
        def penalty(self, params):
            c = np.linspace(0.1, 1.0, self.n_params)
            return 0.5 * float(np.dot(c * params, params)), c * params

    with pytest.raises(PartitionError, match=r"Graded.*not a weight decay"):
        decay_by_array(Graded(5, (6,), 3))


def test_mlp_partition_owns_its_column_blocks_in_layer_order() -> None:
    model = MLP(2, (3,), 2)
    views = model.layout.views(np.arange(model.n_params, dtype=np.float64))
    part = partition(model, 2).split(np.arange(model.n_params, dtype=np.float64))[1]
    expected = [views["W0"][:, 2:3].ravel(), views["b0"][2:3], views["W1"][:, 1:2].ravel(), views["b1"][1:2]]
    np.testing.assert_array_equal(part, np.concatenate(expected))


def test_only_registered_models_are_partitionable() -> None:
    assert MLP in PARTITIONERS
    with pytest.raises(PartitionError, match=r"Logistic cannot be partitioned \(Logistic\(.*\)\); the partitionable "
                                             r"models are \['MLP', 'LocalAutoencoder'\]"):
        partition(Logistic(3), 2)
    with pytest.raises(PartitionError, match="SparseAutoencoder cannot be partitioned"):
        partition(SparseAutoencoder(4, 2), 2)


@pytest.mark.parametrize("k", [0, -1, 2.0, "2", True, None])
def test_bad_partition_counts(k) -> None:
    with pytest.raises(PartitionError, match=r"the number of partitions must be an integer >= 1, got k="):
        partition(MLP(3, (4,), 3), k)


def test_more_partitions_than_a_layer_has_units() -> None:
    with pytest.raises(PartitionError, match=r"cannot split hidden layer 1 \(width 2\) of MLP\(.*\) into k=3 "
                                             r"partitions: .* use k <= 2"):
        partition(MLP(3, (4, 2, 5), 3), 3)
    with pytest.raises(PartitionError, match=r"cannot split the output layer \(3 classes\) .* into k=4"):
        partition(MLP(3, (4,), 3), 4)
