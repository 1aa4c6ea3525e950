"""Sharded L-BFGS state: same iterates as the local mode, and only scalars reach the coordinator."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.checkpoint_store import read_checkpoint
from dasklbfgs.data.synthetic import SyntheticProblem
from dasklbfgs.errors import CheckpointError, ConfigurationError, ModelDataMismatchError
from dasklbfgs.models import MLP, LeastSquares, Logistic, Softmax
from dasklbfgs.sandblaster import sandblaster_lbfgs
from tests._checkpoint_faults import InjectedFailure, fail_writes, tree_bytes
from tests._datasets import load_all


@pytest.mark.parametrize("name", ["logistic", "multinomial", "regression", "mlp", "bounded"])
def test_same_iterates_as_the_local_mode(client, datasets, name) -> None:
    """Also for a neural model, whose start is random weights (a linear model's zeros are
    made on the shards: the coordinator never forms the parameters), and within bounds (the
    shards project)."""
    data = datasets["multinomial" if name == "mlp" else "regression" if name == "bounded" else name]
    model = {"logistic": Logistic(8, l2=1e-3), "multinomial": Softmax(8, 3, l2=1e-3),
             "regression": LeastSquares(8, l2=1e-3), "mlp": MLP(8, (5,), 3, l2=1e-3),
             "bounded": LeastSquares(8, l2=1e-3, lower_bounds=0.0, upper_bounds=[0.3] * 4 + [np.inf] * 4)}[name]
    local = sandblaster_lbfgs(model, data, client=client, maxiter=15)
    sharded = sandblaster_lbfgs(model, data, client=client, maxiter=15, state="sharded", n_param_shards=3)
    assert sharded.nit == local.nit and sharded.nfev == local.nfev and sharded.message == local.message
    np.testing.assert_allclose(sharded.x, local.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sharded.jac, local.jac, rtol=1e-8, atol=1e-12)
    assert sharded.fun == pytest.approx(local.fun, rel=1e-12)
    for a, b in zip(sharded.history, local.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-12)
        assert a["step_length"] == pytest.approx(b["step_length"], rel=1e-8)


@pytest.mark.parametrize("name", ["logistic-very-ill", "multinomial-ill"])
def test_standardized_sharded_run_follows_the_standardized_local_run(client, datasets, name) -> None:
    """The shards hold standardized coordinates; the workers map them to the model's
    parameters and the gradient back, so the iterates are the local mode's."""
    data = datasets[name]
    model = Logistic(8, l2=1e-4) if name.startswith("logistic") else Softmax(8, 3, l2=1e-3)
    seen: dict[str, list] = {"local": [], "sharded": []}
    runs = {}
    for state in ("local", "sharded"):
        shards = {"n_param_shards": 2} if state == "sharded" else {}  # state='local' refuses n_param_shards
        runs[state] = sandblaster_lbfgs(model, data, client=client, maxiter=40, standardize=True, state=state,
                                        **shards, eval_data=data, eval_every=5,
                                        callback=lambda r, s=state: seen[s].append(r.x.copy()))
    local, sharded = runs["local"], runs["sharded"]
    plain = sandblaster_lbfgs(model, data, client=client, maxiter=40)
    assert local.nit < plain.nit or not plain.success  # standardizing is what makes this one converge
    assert sharded.nit == local.nit and sharded.nfev == local.nfev and sharded.success == local.success
    np.testing.assert_allclose(sharded.x, local.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sharded.jac, local.jac, rtol=1e-7, atol=1e-10)
    # callbacks and held-out scores see the model's coordinates in both modes
    np.testing.assert_allclose(seen["sharded"][-1], sharded.x, rtol=1e-12)
    np.testing.assert_allclose(seen["sharded"][3], seen["local"][3], rtol=1e-10, atol=1e-12)
    scored = [h for h in sharded.history if "eval_objective" in h]
    assert scored and all(h["eval_objective"] == pytest.approx(g["eval_objective"], rel=1e-10)
                          for h, g in zip(scored, [h for h in local.history if "eval_objective" in h]))


def test_sharded_run_does_not_depend_on_the_scale_of_the_objective(client, datasets, tmp_path) -> None:
    """Features and targets times 1e10, l2 times 1e20, no intercept: the objective is
    exactly 1e20 times the original one. The shards keep a pair by the rule the local mode
    uses (relative to the line search's slope), so with gtol times 1e20 the sharded run on
    the scaled problem takes the local run's steps on the original one."""
    X, y = load_all(datasets["regression-ill"])
    scale = 1e10
    scaled_data = ShardedDataset.from_blocks(tmp_path / "scaled", [(scale * X, scale * y)], shard_rows=1000)
    local = sandblaster_lbfgs(LeastSquares(8, l2=1e-3, fit_intercept=False), datasets["regression-ill"],
                              client=client, maxiter=20, gtol=1e-9)
    sharded = sandblaster_lbfgs(LeastSquares(8, l2=1e-3 * scale**2, fit_intercept=False), scaled_data,
                                client=client, maxiter=20, gtol=1e-9 * scale**2, state="sharded", n_param_shards=3)
    assert local.nit == 20  # (L-BFGS steps throughout: steepest descent would be far off by then)
    assert (sharded.nit, sharded.nfev, sharded.message) == (local.nit, local.nfev, local.message)
    np.testing.assert_allclose(sharded.x, local.x, rtol=1e-9, atol=1e-12)
    assert sharded.fun / scale**2 == pytest.approx(local.fun, rel=1e-9)


def test_bytes_reaching_the_coordinator_do_not_grow_with_the_parameters(client, tmp_path) -> None:
    """A softmax model 20x wider: the same bytes per iteration reach the coordinator."""
    received = {}
    for classes in (5, 100):
        problem = SyntheticProblem("multinomial", n_features=20, n_classes=classes, seed=1)
        data = ShardedDataset.from_blocks(tmp_path / f"k{classes}", problem.blocks(2000), shard_rows=500)
        model = Softmax(20, classes, l2=1e-2)
        result = sandblaster_lbfgs(model, data, client=client, maxiter=6, state="sharded", n_param_shards=2)
        assert result.nit == 6
        received[model.n_params] = result.stats["coordinator_bytes_received"] / result.nfev
    small, large = sorted(received)
    assert large >= 20 * small // 2
    assert received[large] <= received[small] * 1.05  # scalars only: no growth with d
    assert received[large] < 8 * large / 10  # far below one parameter vector per evaluation


def test_sharded_state_errors(client, datasets, tmp_path) -> None:
    data = datasets["logistic"]
    with pytest.raises(ConfigurationError, match=r"state must be one of \('local', 'sharded'\), got 'remote'"):
        sandblaster_lbfgs(Logistic(8), data, client=client, state="remote")
    with pytest.raises(ConfigurationError, match=r"n_param_shards \(50\) is larger than the model's 9 parameters"):
        sandblaster_lbfgs(Logistic(8), data, client=client, state="sharded", n_param_shards=50)


@pytest.mark.parametrize("standardize, l1", [(False, 0.0), (True, 0.0), (True, 1e-3)])
def test_sharded_checkpoint_resumes_to_the_same_iterates(client, datasets, tmp_path, standardize, l1) -> None:
    """Each vector shard writes its own slices; a resumed run follows the uninterrupted one
    (with l1: OWL-QN's, the shards keeping the smooth gradient and the pseudo-gradient)."""
    data = datasets["multinomial"]
    model = Softmax(8, 3, l2=1e-3, l1=l1)
    # 3 pairs: by the checkpoint at 5 they lie in reused rows (LocalBasis.slots)
    sharded = dict(client=client, state="sharded", n_param_shards=3, standardize=standardize, history=3)
    straight = sandblaster_lbfgs(model, data, maxiter=12, **sharded)
    path = tmp_path / "state"
    first = sandblaster_lbfgs(model, data, maxiter=5, checkpoint_path=path, checkpoint_every=2, **sharded)
    assert first.nit == 5
    gram, attrs = read_checkpoint(path, kind="sandblaster-sharded")
    assert attrs["nit"] == 5 and attrs["bounds"] == [[0, 9], [9, 18], [18, 27]]
    assert set(gram) == {"gram"}  # the coordinator's part holds no parameter-length vector
    slices = [read_checkpoint(path / "shards" / str(i), kind="sandblaster-vector-shard")[0] for i in range(3)]
    if not standardize:  # (with it, the shards hold standardized coordinates)
        np.testing.assert_array_equal(np.concatenate([a["x"] for a in slices]), first.x)
    assert all(a["S"].shape[0] == attrs["pairs"] for a in slices)
    slots = read_checkpoint(path / "shards" / "0", kind="sandblaster-vector-shard")[1]["slots"]
    assert slots != sorted(slots)  # the pairs wrapped around their rows
    resumed = sandblaster_lbfgs(model, data, maxiter=12, checkpoint_path=path, resume=True, **sharded)
    assert resumed.nit == straight.nit and resumed.nfev == straight.nfev
    np.testing.assert_array_equal(resumed.x, straight.x)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in straight.history]

    if standardize:  # the checkpoint's coordinates are standardized: refused without standardize
        with pytest.raises(ModelDataMismatchError, match=r"was written with standardize=True, not False"):
            sandblaster_lbfgs(model, data, client=client, state="sharded", n_param_shards=3, history=3,
                              checkpoint_path=path, resume=True)
        return
    with pytest.raises(ModelDataMismatchError, match=r"was written with n_param_shards=3, not 2"):
        sandblaster_lbfgs(model, data, client=client, state="sharded", n_param_shards=2, history=3,
                          checkpoint_path=path, resume=True)
    with pytest.raises(CheckpointError, match=r"is a sandblaster-sharded checkpoint, not a sandblaster checkpoint"):
        sandblaster_lbfgs(model, data, client=client, history=3, checkpoint_path=path, resume=True)
    chunk = next(p for p in (path / "shards" / "1" / "x").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(chunk.read_bytes()[:-8])  # truncate one shard's slice of x
    with pytest.raises(CheckpointError, match=r"shards/1': array 'x' cannot be read"):
        sandblaster_lbfgs(model, data, maxiter=12, checkpoint_path=path, resume=True, **sharded)


@pytest.mark.parametrize(("where", "n"), [("create_array", 1), ("rename", "publish")], ids=["gram", "rename-publish"])
def test_a_failed_sharded_checkpoint_write_leaves_the_previous_one_intact(client, datasets, tmp_path, monkeypatch,
                                                                          where, n) -> None:
    """The vector shards write their slices into the staged checkpoint from their workers;
    then the coordinator's own write fails (its Gram matrix, or the final rename). None of
    the shards' new slices may reach the previous checkpoint, which still loads as it was."""
    data = datasets["multinomial"]
    model = Softmax(8, 3, l2=1e-3)
    path = tmp_path / "state"
    sharded = dict(client=client, state="sharded", n_param_shards=3, checkpoint_path=path)
    sandblaster_lbfgs(model, data, maxiter=2, **sharded)
    files = tree_bytes(path)
    assert sum(name.startswith("shards/") for name in files) > 3 * 4  # the shards' parts are in it
    with monkeypatch.context() as patched:
        fail_writes(patched, path, where, n)  # in this process only: the coordinator's part
        with pytest.raises(InjectedFailure, match=r"failed"):
            sandblaster_lbfgs(model, data, maxiter=4, resume=True, **sharded)
    assert sorted(os.listdir(tmp_path)) == ["state"]
    assert tree_bytes(path) == files
    _, attrs = read_checkpoint(path, kind="sandblaster-sharded")
    assert attrs["nit"] == 2
    for i in range(3):
        assert read_checkpoint(path / "shards" / str(i), kind="sandblaster-vector-shard")[1]["stop"] > 0
