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
    """``Progress(total, label)`` then ``update(done, **fields)`` and ``close()``.

    ``per_epoch``: how many of ``done`` make an epoch (the line then shows the epoch).
    ``total_is_limit``: ``total`` is a bound the run may stop well before (Sandblaster's
    ``maxiter``), so the time left is shown as at most that.
    """

    def __init__(self, total: int | None, label: str, *, per_epoch: int | None = None, total_is_limit: bool = False,
                 stream: TextIO | None = None, enabled: bool | None = None, min_interval: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.label, self.min_interval = total, label, min_interval
        self.per_epoch, self.total_is_limit = per_epoch, total_is_limit
        self.started = time.perf_counter()
        self._first: tuple[int, float] | None = None  # the rate is measured from the first update
        self._last = float("-inf")  # the first update always draws
        self._width = 0
        self._latest: tuple[int, dict[str, Any]] | None = None

    def update(self, done: int, **fields: Any) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._first is None:
            self._first = (done, now)
        self._latest = (done, fields)
        if now - self._last < self.min_interval and (self.total is None or done < self.total):
            return
        self._latest = None
        self._last = now
        line = self.line(done, fields, now)
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def line(self, done: int, fields: dict[str, Any], now: float) -> str:
        """``downpour [####......] 340/1880 epoch 1/4 loss=0.53 12.3s ETA 41s``"""
        parts = [self.label]
        if self.total:
            filled = int(20 * min(done, self.total) / self.total)
            parts.append(f"[{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total}")
        else:
            parts.append(f"{done}")
        if self.per_epoch:
            epoch = done // self.per_epoch + 1
            epochs = -(-self.total // self.per_epoch) if self.total else None
            parts.append(f"epoch {min(epoch, epochs)}/{epochs}" if epochs else f"epoch {epoch}")
        parts += [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items()]
        parts.append(f"{now - self.started:.1f}s")
        left = self.seconds_left(done, now)
        if left is not None:
            parts.append(f"ETA {'<= ' if self.total_is_limit else ''}{_duration(left)}")
        return " ".join(parts)

    def seconds_left(self, done: int, now: float) -> float | None:
        """Time to ``total`` at the rate since the first update (None: no total, no rate yet)."""
        if not self.total or self._first is None or done <= self._first[0] or done >= self.total:
            return None
        rate = (done - self._first[0]) / (now - self._first[1])
        return (self.total - done) / rate if rate > 0 else None

    def close(self) -> None:
        """Draw the last update if it was skipped, end the line; a second call does nothing."""
        if self.enabled and self._latest is not None:
            self._last = float("-inf")
            self.update(self._latest[0], **self._latest[1])
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0


def _duration(seconds: float) -> str:
    """``41s``, ``3m05s``, ``1h02m``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
