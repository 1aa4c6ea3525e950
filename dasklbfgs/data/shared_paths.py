"""Whether the workers share a local folder with this process.

Work the workers write into a local folder (a dataset's shards written by worker tasks, a
sharded checkpoint's slices written by their actors) is committed by this process, which
renames the folder into place. Without a shared filesystem each worker writes into a folder
of the same name on its own disk and the commit publishes a store with nothing in it; so
the folder is checked first, on every worker, and the caller refuses to go on.
"""

from __future__ import annotations

import os
from typing import Any

from dasklbfgs.data.location import Location

__all__ = ["workers_not_seeing"]


def workers_not_seeing(client: Any, written: Location) -> list[str]:
    """The addresses of the workers of ``client`` on which the file or folder ``written``
    (local, just made by this process) does not exist, sorted; [] for a URL."""
    if not written.is_local:
        return []
    answers = client.run(os.path.exists, written.url)
    return sorted(worker for worker, seen in answers.items() if not seen)
