"""Where an estimator's rows live during a fit: a temporary dataset the workers can reach.

In-memory input (numpy, scipy.sparse, pandas) is written to a temporary dataset; dask arrays
are written by the workers (:meth:`~dasklbfgs.data.sharded.ShardedDataset.from_dask`), so
their rows never reach the client. The dataset goes under the *scratch* location: the
estimator's ``tmp_store``, else the Dask config key ``dasklbfgs.scratch`` (environment
``DASK_DASKLBFGS__SCRATCH``; its storage options under ``dasklbfgs.scratch-storage-options``),
else a folder in the client's temporary directory, which only workers on this machine (or
sharing its disk) can read: that is checked, and a cluster that cannot is told to set a
scratch URL. The dataset is deleted when the fit ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

from dasklbfgs.data.location import Location, options_for
from dasklbfgs.data.sharded import ShardedDataset
from dasklbfgs.errors import DatasetError

__all__ = ["SCRATCH_CONFIG", "scratch_location", "temporary_dataset"]

SCRATCH_CONFIG = "dasklbfgs.scratch"
SCRATCH_OPTIONS_CONFIG = "dasklbfgs.scratch-storage-options"


def scratch_location(tmp_store: Location | os.PathLike[str] | str | None) -> Location | None:
    """The scratch location ``tmp_store`` or the Dask config names (None: neither)."""
    import dask

    if tmp_store is not None:
        return Location.of(tmp_store)
    configured = dask.config.get(SCRATCH_CONFIG, None)
    if configured is None:
        return None
    options = dask.config.get(SCRATCH_OPTIONS_CONFIG, None)
    return Location.of(configured, options_for(configured, dict(options) if options else None))


@contextlib.contextmanager
def temporary_dataset(tmp_store: Location | os.PathLike[str] | str | None, client: Any, write: Any
                      ) -> Iterator[ShardedDataset]:
    """The dataset ``write(location)`` writes at a fresh place under the scratch location,
    deleted on leaving; ``client`` (when there is one) must have workers that can read it."""
    scratch = scratch_location(tmp_store)
    local_folder = None
    if scratch is None:
        local_folder = tempfile.mkdtemp(prefix="dasklbfgs-fit-")
        target = Location.of(os.path.join(local_folder, "data"))
    else:
        target = scratch / f"dasklbfgs-fit-{uuid.uuid4().hex[:12]}.zarr"
    try:
        data = write(target)
        if client is not None:
            try:
                data.check_workers_can_read(client)
            except DatasetError as exc:
                raise DatasetError(f"{exc}. The estimator wrote its temporary dataset there: give it a place every "
                                   f"worker reaches, tmp_store='s3://bucket/scratch' (or the Dask config "
                                   f"{SCRATCH_CONFIG!r})") from exc
        yield data
    finally:
        if local_folder is not None:
            shutil.rmtree(local_folder, ignore_errors=True)
        else:
            with contextlib.suppress(Exception):  # the fit's own error is the one to hear
                if target.is_local:
                    shutil.rmtree(target.path, ignore_errors=True)
                else:
                    target.remove()
