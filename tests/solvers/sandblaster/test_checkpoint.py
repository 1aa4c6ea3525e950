"""Coordinator restarts: checkpoint the L-BFGS state, resume to the same result; refuse
checkpoints that are corrupted, truncated or of another model; survive a kill mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs import ShardedDataset
from dasklbfgs.checkpoint_store import checkpoint_exists, checkpoint_root, read_checkpoint, write_checkpoint
from dasklbfgs.data.location import Location
from dasklbfgs.errors import CheckpointError, ConfigurationError, DatasetExistsError, ModelDataMismatchError, StoreError
from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.models.persist import model_config
from dasklbfgs.optim import LBFGSOptions, lbfgs_minimize
from dasklbfgs.sandblaster import sandblaster_lbfgs
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import load_state, save_state
from tests._checkpoint_faults import FAILURE_IDS, FAILURES, InjectedFailure, fail_writes, tree_bytes
from tests._datasets import load_all


@pytest.mark.parametrize("standardize, l1, bounds", [(False, 0.0, {}), (True, 0.0, {}), (True, 1e-3, {}),
                                                    (True, 0.0, {"lower_bounds": -0.2, "upper_bounds": 0.15})])
def test_resume_reaches_the_same_result_bitwise(client, datasets, tmp_path, standardize, l1, bounds) -> None:
    data = datasets["multinomial-ill"]
    model = Softmax(data.n_features, 3, l2=1e-3, l1=l1, **bounds)  # l1 > 0: OWL-QN's state resumes too; bounds
    # the projected method's
    # 40 iterations: far enough past the checkpoint for rounding differences to show; 3
    # pairs: the checkpoint at 4 holds them in reused rows (LocalBasis.slots)
    straight = sandblaster_lbfgs(model, data, client=client, maxiter=40, standardize=standardize, history=3)
    path = tmp_path / "state"
    first = sandblaster_lbfgs(model, data, client=client, maxiter=4, standardize=standardize, history=3,
                              checkpoint_path=path, checkpoint_every=3)
    assert first.nit == 4 and not first.success
    arrays, attrs = read_checkpoint(path, kind="sandblaster")
    assert attrs["nit"] == 4  # the final state is saved even between checkpoint_every marks
    assert attrs["slots"] != sorted(attrs["slots"])  # the pairs wrapped around their rows
    resumed = sandblaster_lbfgs(model, data, client=client, maxiter=40, standardize=standardize, history=3,
                                checkpoint_path=path, resume=True)
    assert resumed.nit == straight.nit and resumed.status == straight.status
    np.testing.assert_array_equal(resumed.x, straight.x)
    assert len(resumed.history) == straight.nit


def test_resume_refuses_other_models_and_settings(client, datasets, tmp_path) -> None:
    data = datasets["logistic"]
    path = tmp_path / "state"
    sandblaster_lbfgs(Logistic(8), data, client=client, maxiter=2, checkpoint_path=path)
    with pytest.raises(ModelDataMismatchError, match=r"checkpoint .* is of model .*'l2': 0.0.* not .*'l2': 1.0"):
        sandblaster_lbfgs(Logistic(8, l2=1.0), data, client=client, checkpoint_path=path, resume=True)
    with pytest.raises(ModelDataMismatchError, match=r"was written with history_size=10, not 5"):
        sandblaster_lbfgs(Logistic(8), data, client=client, history=5, checkpoint_path=path, resume=True)
    with pytest.raises(ConfigurationError, match=r"resume=True needs checkpoint_path"):
        sandblaster_lbfgs(Logistic(8), data, client=client, resume=True)
    with pytest.raises(ConfigurationError, match=r"checkpoint_every must be an integer >= 1 or None, got 0"):
        sandblaster_lbfgs(Logistic(8), data, client=client, checkpoint_path=path, checkpoint_every=0)


def _chunk_files(path: Path, name: str) -> list[Path]:
    return [p for p in (path / name).rglob("*") if p.is_file() and p.name != "zarr.json"]


def test_corrupted_or_truncated_checkpoints_are_refused(tmp_path) -> None:
    arrays = {"x": np.arange(1000.0), "g": np.ones(1000)}
    for damage in ("garbage", "truncate", "delete"):
        path = tmp_path / damage
        write_checkpoint(path, arrays, kind="sandblaster", attrs={"nit": 1})
        chunk = _chunk_files(path, "x")[0]
        if damage == "garbage":
            chunk.write_bytes(os.urandom(chunk.stat().st_size))
        elif damage == "truncate":
            chunk.write_bytes(chunk.read_bytes()[:100])
        else:
            chunk.unlink()
        with pytest.raises(CheckpointError, match=r"array 'x' (does not match its recorded checksum|cannot be read)"):
            read_checkpoint(path, kind="sandblaster")
    with pytest.raises(CheckpointError, match=r"is a sandblaster checkpoint, not a downpour checkpoint"):
        read_checkpoint(tmp_path / "garbage", kind="downpour")
    with pytest.raises(CheckpointError, match=r"no readable checkpoint at"):
        read_checkpoint(tmp_path / "missing", kind="sandblaster")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("x")
    with pytest.raises(DatasetExistsError, match=r"refusing to overwrite"):
        write_checkpoint(tmp_path / "notes", arrays, kind="sandblaster", attrs={})


WRITER = """
import sys, numpy as np
from dasklbfgs.checkpoint_store import write_checkpoint
path = sys.argv[1]
i = 0
while True:
    i += 1
    write_checkpoint(path, {"x": np.full(2_000_000, float(i))}, kind="sandblaster", attrs={"nit": i})
    print(i, flush=True)
"""


def test_a_kill_during_writing_leaves_a_loadable_checkpoint(tmp_path) -> None:
    path = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()  # at least one checkpoint is complete
        time.sleep(0.37)        # then kill it somewhere in the middle of a later write
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    arrays, attrs = read_checkpoint(path, kind="sandblaster")
    assert np.all(arrays["x"] == float(attrs["nit"]))  # one consistent checkpoint, not a mixture


def _lbfgs_state(maxiter: int):
    """A real L-BFGS state (iterate, gradient, curvature pairs, history) after ``maxiter``
    iterations on a small least-squares problem, computed in this process."""
    rng = np.random.default_rng(3)
    A, b = rng.normal(size=(40, 6)), rng.normal(size=40)
    _, state = lbfgs_minimize(lambda x: (0.5 * float((A @ x - b) @ (A @ x - b)), A.T @ (A @ x - b)),
                              np.zeros(6), LBFGSOptions(history=4, maxiter=maxiter, gtol=0.0, ftol=0.0))
    return state


def _assert_same_state(loaded, saved) -> None:
    for name in ("x", "g"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(saved, name), strict=True)
    for name in ("S", "Y", "_G"):
        np.testing.assert_array_equal(getattr(loaded.basis, name), getattr(saved.basis, name), strict=True)
    assert loaded.basis.k == saved.basis.k
    assert (loaded.f, loaded.nit, loaded.nfev, loaded.last_step) == (saved.f, saved.nit, saved.nfev, saved.last_step)
    assert loaded.history == saved.history


@pytest.mark.parametrize(("where", "n"), FAILURES, ids=FAILURE_IDS)
def test_a_failed_state_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch, where, n) -> None:
    """Deterministic counterpart of the kill test above: the write of the next L-BFGS state
    fails at a chosen step, and the previous checkpoint is still there, bit for bit."""
    path = tmp_path / "state"
    config, settings = model_config(Logistic(5)), {"standardize": False, "history_size": 4, "n_samples": 40}
    before, after = _lbfgs_state(3), _lbfgs_state(6)
    assert before.nit == 3 and after.nit == 6 and before.basis.k == 3  # the two differ in every array
    save_state(path, before, model_config=config, settings=settings)
    files = tree_bytes(path)
    _, attrs = read_checkpoint(path, kind="sandblaster")

    with monkeypatch.context() as patched:
        fail_writes(patched, path, where, n)
        with pytest.raises(InjectedFailure, match=r"failed"):
            save_state(path, after, model_config=config, settings=settings)

    # Nothing beside the checkpoint (a staged copy or a moved-aside one) and nothing changed in it.
    assert sorted(os.listdir(tmp_path)) == ["state"]
    assert tree_bytes(path) == files
    assert read_checkpoint(path, kind="sandblaster")[1] == attrs
    _assert_same_state(load_state(path, model_config=config, settings=settings), before)
    # The next write goes through as if nothing had happened.
    save_state(path, after, model_config=config, settings=settings)
    _assert_same_state(load_state(path, model_config=config, settings=settings), after)
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_checkpoints_on_s3_resume_to_the_bits_of_a_local_checkpoint(client, datasets, s3, tmp_path) -> None:
    """A checkpoint URL beside a dataset on S3 takes the dataset's storage_options; the
    sharded state's vector shards write their parts to S3 from their workers (a Location
    with its own options, the data local). Resumed runs give the bits of the same runs with
    local checkpoints."""
    local = datasets["multinomial"]
    X, y = load_all(local)
    bucket, options = s3
    tag = uuid.uuid4().hex[:6]
    remote = ShardedDataset.create(f"{bucket}/ckpt-data-{tag}.zarr", X, y, shard_rows=1000, storage_options=options)
    model = Softmax(8, 3, l2=1e-3)
    for state, data, url in (("local", remote, f"{bucket}/ckpt-{tag}/local"),
                             ("sharded", local, Location.of(f"{bucket}/ckpt-{tag}/sharded", options))):
        kw = dict(client=client, state=state, history=3, **({"n_param_shards": 3} if state == "sharded" else {}))
        runs = []
        for where in (tmp_path / state, url):
            first = sandblaster_lbfgs(model, data, maxiter=5, checkpoint_path=where, checkpoint_every=2, **kw)
            assert first.nit == 5
            runs.append(sandblaster_lbfgs(model, data, maxiter=12, checkpoint_path=where, resume=True,
                                          checkpoint_every=100, **kw))  # (written at the end: fewer round trips)
        checkpoint = Location.of(url, options) if isinstance(url, str) else url
        kind = "sandblaster" if state == "local" else "sandblaster-sharded"
        assert checkpoint_exists(checkpoint) and read_checkpoint(checkpoint, kind=kind)[1]["nit"] == runs[1].nit
        assert runs[1].nit == runs[0].nit and runs[1].nfev == runs[0].nfev
        np.testing.assert_array_equal(runs[1].x, runs[0].x)
    parts = checkpoint_root(Location.of(f"{bucket}/ckpt-{tag}/sharded", options)) / "shards"
    assert parts.children() == ["0", "1", "2"]  # written by the vector shards, inside the committed version


def test_a_checkpoint_url_of_an_unknown_store_is_refused_before_the_run(client, datasets) -> None:
    with pytest.raises(StoreError, match=r"unknown URL scheme 'nosuchstore' in 'nosuchstore://b/ckpt'"):
        sandblaster_lbfgs(Logistic(8), datasets["logistic"], client=client, checkpoint_path="nosuchstore://b/ckpt")
