"""Coordinator restarts: checkpoint the L-BFGS state, resume to the same result; refuse
checkpoints that are corrupted, truncated or of another model; survive a kill mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dasklbfgs.checkpoint_store import read_checkpoint, write_checkpoint
from dasklbfgs.errors import CheckpointError
from dasklbfgs.errors import ConfigurationError, DatasetExistsError, ModelDataMismatchError
from dasklbfgs.models import Logistic, Softmax
from dasklbfgs.sandblaster import sandblaster_lbfgs


@pytest.mark.parametrize("standardize", [False, True])
def test_resume_reaches_the_same_result_bitwise(client, datasets, tmp_path, standardize) -> None:
    data = datasets["multinomial-ill"]
    model = Softmax(data.n_features, 3, l2=1e-3)
    # 40 iterations: far enough past the checkpoint for rounding differences to show
    straight = sandblaster_lbfgs(model, data, client=client, maxiter=40, standardize=standardize)
    path = tmp_path / "state"
    first = sandblaster_lbfgs(model, data, client=client, maxiter=4, standardize=standardize,
                              checkpoint_path=path, checkpoint_every=3)
    assert first.nit == 4 and not first.success
    arrays, attrs = read_checkpoint(path, kind="sandblaster")
    assert attrs["nit"] == 4  # the final state is saved even between checkpoint_every marks
    resumed = sandblaster_lbfgs(model, data, client=client, maxiter=40, standardize=standardize,
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
