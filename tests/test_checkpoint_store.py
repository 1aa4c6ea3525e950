"""Checkpoints at object-store URLs (the session's S3-compatible server): no rename there, so
each write goes under a fresh version prefix and a manifest put last commits it. A killed
writer leaves the previous checkpoint readable and intact; damage is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

from dasklbfgs.checkpoint_store import MANIFEST, checkpoint_exists, checkpoint_root, read_checkpoint, write_checkpoint
from dasklbfgs.data.location import Location
from dasklbfgs.errors import CheckpointError, DatasetExistsError
from tests._checkpoint_faults import InjectedFailure, fail_writes


def _location(s3, name: str) -> Location:
    return Location.of(f"{s3[0]}/{name}-{uuid.uuid4().hex[:6]}", s3[1])


def _versions(location: Location) -> list[str]:
    return [name for name in location.children() if name.startswith("v-")]


def test_a_checkpoint_at_a_url_reads_as_written_and_keeps_one_version(s3) -> None:
    location = _location(s3, "round-trip")
    assert not checkpoint_exists(location)
    arrays = {"x": np.arange(10.0), "shard-0/values": np.ones(3), "n": np.arange(4, dtype=np.int32)}
    write_checkpoint(location, arrays, kind="downpour", attrs={"steps": 7})
    first = _versions(location)
    assert checkpoint_exists(location) and len(first) == 1
    manifest = json.loads(location.read(MANIFEST))
    assert manifest["dasklbfgs_checkpoint"]["version"] == first[0] == checkpoint_root(location).url.rsplit("/", 1)[1]
    loaded, attrs = read_checkpoint(location, kind="downpour")
    assert attrs == {"steps": 7} and loaded.keys() == arrays.keys()
    for name, value in arrays.items():
        np.testing.assert_array_equal(loaded[name], value, strict=True)
    write_checkpoint(location, {"x": np.zeros(2)}, kind="downpour", attrs={"steps": 8})
    assert _versions(location) != first and len(_versions(location)) == 1  # the previous version went, after
    assert read_checkpoint(location, kind="downpour")[1] == {"steps": 8}


WRITER = """
import sys, time, numpy as np, zarr
from dasklbfgs.checkpoint_store import write_checkpoint
from dasklbfgs.data.location import Location
location = Location.of(sys.argv[1], {options!r})
create_array = zarr.Group.create_array
def stalled_in_the_second_write(self, *args, **kwargs):  # the array's metadata is written, its chunks are not
    array = create_array(self, *args, **kwargs)
    if i == 2:
        print("middle", i, flush=True)
        time.sleep(600)
    return array
zarr.Group.create_array = stalled_in_the_second_write
i = 0
while True:
    i += 1
    print("writing", i, flush=True)
    write_checkpoint(location, {{"x": np.full(2_000_000, float(i))}}, kind="sandblaster", attrs={{"nit": i}})
    print("done", i, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_the_previous_checkpoint_readable_and_intact(s3) -> None:
    """The writer is killed while its second write has created its array but written none of
    its chunks (it stalls there and says so, so the kill lands mid-write whatever the
    machine's speed)."""
    location = _location(s3, "killed")
    script = textwrap.dedent(WRITER.format(options=s3[1]))
    proc = subprocess.Popen([sys.executable, "-c", script, location.url], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        lines = [proc.stdout.readline().split() for _ in range(4)]
        assert lines == [["writing", "1"], ["done", "1"], ["writing", "2"], ["middle", "2"]]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    committed = checkpoint_root(location).url.rsplit("/", 1)[1]
    left = [v for v in _versions(location) if v != committed]
    assert len(left) == 1 and location.exists(f"{left[0]}/zarr.json")  # the killed write's objects, unreferenced
    arrays, attrs = read_checkpoint(location, kind="sandblaster")
    assert attrs["nit"] == 1 and np.all(arrays["x"] == 1.0)  # the previous checkpoint, whole
    write_checkpoint(location, {"x": np.full(5, 3.0)}, kind="sandblaster", attrs={"nit": 3})
    assert len(_versions(location)) == 1 and left[0] not in _versions(location)  # the next write cleans up
    assert read_checkpoint(location, kind="sandblaster")[1]["nit"] == 3


@pytest.mark.parametrize("n", [1, 3], ids=["array-1", "array-3"])
def test_a_failed_write_at_a_url_leaves_the_previous_checkpoint_and_nothing_else(s3, monkeypatch, n) -> None:
    location = _location(s3, "failed")
    arrays = {"x": np.arange(5.0), "g": np.ones(5), "S": np.eye(3)}
    write_checkpoint(location, arrays, kind="sandblaster", attrs={"nit": 1})
    before = sorted(location.children())
    with monkeypatch.context() as patched:
        fail_writes(patched, location, "create_array", n)
        with pytest.raises(InjectedFailure, match=r"array creation \d failed"):
            write_checkpoint(location, {k: v + 1 for k, v in arrays.items()}, kind="sandblaster", attrs={"nit": 2})
    assert sorted(location.children()) == before  # the failed version's prefix was taken back
    loaded, attrs = read_checkpoint(location, kind="sandblaster")
    assert attrs == {"nit": 1}
    np.testing.assert_array_equal(loaded["x"], arrays["x"])


def test_damaged_checkpoints_at_a_url_are_refused(s3) -> None:
    location = _location(s3, "damaged")
    write_checkpoint(location, {"x": np.arange(1000.0)}, kind="sandblaster", attrs={"nit": 1})
    version = checkpoint_root(location)
    chunk = next(key for key in ("x/c/0", "x/c.0") if version.exists(key))
    version.put(chunk, os.urandom(len(version.read(chunk))))
    with pytest.raises(CheckpointError, match=r"array 'x' (does not match its recorded checksum|cannot be read)"):
        read_checkpoint(location, kind="sandblaster")
    with pytest.raises(CheckpointError, match=r"is a sandblaster checkpoint, not a downpour checkpoint"):
        read_checkpoint(location, kind="downpour")
    location.put(MANIFEST, b"{not json")
    with pytest.raises(CheckpointError, match=rf"{location.url}/{MANIFEST} is not a dasklbfgs checkpoint manifest"):
        read_checkpoint(location, kind="sandblaster")
    location.put(MANIFEST, json.dumps({"dasklbfgs_checkpoint": {"format": 1, "version": "../elsewhere"}}).encode())
    with pytest.raises(CheckpointError, match=r"is not a dasklbfgs checkpoint manifest of format 1"):
        read_checkpoint(location, kind="sandblaster")
    missing = _location(s3, "missing")
    with pytest.raises(CheckpointError, match=rf"no readable checkpoint at '{missing.url}': it has no {MANIFEST}"):
        read_checkpoint(missing, kind="sandblaster")
    foreign = _location(s3, "foreign")
    foreign.put("notes.txt", b"keep me")
    with pytest.raises(DatasetExistsError, match=r"refusing to overwrite .* holds objects that are not a dasklbfgs "
                                                 r"checkpoint \(\['notes.txt'\]\)"):
        write_checkpoint(foreign, {"x": np.ones(2)}, kind="sandblaster", attrs={})
    assert foreign.children() == ["notes.txt"]
