"""A one-line terminal progress display, only when a person is watching.

Off when the stream is not a terminal (logs, CI, pipes) or when asked to be quiet; the
solvers' callbacks feed it, so it costs nothing when off.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """``Progress(total, label)`` then ``update(done, **fields)`` and ``close()``."""

    def __init__(self, total: int | None, label: str, *, stream: TextIO | None = None,
                 enabled: bool | None = None, min_interval: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.label, self.min_interval = total, label, min_interval
        self.started = time.perf_counter()
        self._last = float("-inf")  # the first update always draws
        self._width = 0
        self._latest: tuple[int, dict[str, Any]] | None = None

    def update(self, done: int, **fields: Any) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        self._latest = (done, fields)
        if now - self._last < self.min_interval and (self.total is None or done < self.total):
            return
        self._latest = None
        self._last = now
        if self.total:
            filled = int(20 * min(done, self.total) / self.total)
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total}"
        else:
            bar = f"{done}"
        extras = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items())
        line = f"{self.label} {bar} {extras} {now - self.started:.1f}s"
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def close(self) -> None:
        """Draw the last update if it was skipped, end the line; a second call does nothing."""
        if self.enabled and self._latest is not None:
            self._last = float("-inf")
            self.update(self._latest[0], **self._latest[1])
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0
