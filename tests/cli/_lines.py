"""The lines a command writes to a pipe, read as they come (with a deadline), and stopping
the commands a test starts."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from typing import IO


class Lines:
    """The lines of ``pipe``, read by a thread of their own: :meth:`until` waits for one with
    a deadline (a ``readline`` would wait forever for a command that hangs)."""

    def __init__(self, pipe: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, prefix: str, timeout: float = 120) -> str:
        """The next line that starts with ``prefix`` (the lines before it are in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no line starting {prefix!r} within {timeout:g} s: {self.seen}") from None
            if line is None:
                raise AssertionError(f"the pipe closed before a line starting {prefix!r}: {self.seen}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def rest(self, timeout: float = 30) -> list[str]:
        """The lines still to come, once the command has ended."""
        lines = []
        while (line := self._queue.get(timeout=timeout)) is not None:
            lines.append(line)
        return lines


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """End a command a test started in a session of its own, workers and all (SIGTERM to its
    process group, then SIGKILL), if it still runs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
