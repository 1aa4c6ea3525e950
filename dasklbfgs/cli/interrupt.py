"""Ctrl-C for the commands that train: stop at the next iteration and keep what was reached.

The first SIGINT only sets a flag; the solver's callback (:meth:`Interrupt.check`) raises
``StopIteration("interrupted")`` at its next iteration or progress poll, so the solver
returns the parameters it reached and the command saves them, prints one line and exits
with :data:`EXIT_INTERRUPTED`. A second SIGINT aborts at once without saving.

A terminal sends Ctrl-C to the whole process group, which includes the worker processes
of an embedded cluster: :func:`shielded_start` keeps it from them, so that the run they
serve can stop in order rather than lose its workers mid-step.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["EXIT_INTERRUPTED", "INTERRUPTED", "Interrupt", "interrupted_line", "shielded_start"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C
INTERRUPTED = "interrupted"  # the result's message, the report's and metrics.json's


class Interrupt:
    """``with Interrupt() as interrupt:`` pass ``interrupt.check`` to the solver as its
    callback (or call it from yours); the result's message is then :data:`INTERRUPTED`."""

    def __init__(self, stream: TextIO | None = None, signals: tuple[signal.Signals, ...] = (signal.SIGINT,)) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.signals = signals  # SIGTERM too for a command that serves until stopped
        self.requested = False
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> Interrupt:
        self._previous = {number: signal.signal(number, self._on_signal) for number in self.signals}
        return self

    def __exit__(self, *exc: Any) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested:
            self.abort()
        self.requested = True

    def abort(self) -> None:
        """The second Ctrl-C: end the embedded cluster's workers and this process now."""
        self.stream.write("\ninterrupted again: stopped without saving\n")
        self.stream.flush()
        for worker in multiprocessing.active_children():
            worker.kill()
        os._exit(EXIT_INTERRUPTED)

    def check(self, *_: Any) -> None:
        """Raise ``StopIteration`` once Ctrl-C was pressed (a solver callback: the solver
        stops and makes the exception's text its message)."""
        if self.requested:
            raise StopIteration(INTERRUPTED)

    @contextlib.contextmanager
    def quiet_shutdown(self, embedded: Any = None) -> Iterator[None]:
        """After Ctrl-C, silence the cluster's shutdown logs (closed streams and comms of
        a run that was cut short), in this process and in the worker processes of the
        ``embedded`` cluster (a ``LocalCluster`` this process started), which share the
        terminal: a worker's heartbeat can meet the closed scheduler. A run that was not
        interrupted keeps them."""
        if not self.requested:
            yield
            return
        if embedded is not None:  # never the workers of a cluster this process did not start
            from distributed import Client

            with contextlib.suppress(Exception), Client(embedded, set_as_default=False) as client:
                client.run(_silence_shutdown_logs)
        loggers = [logging.getLogger(name) for name in SHUTDOWN_LOGGERS]
        levels = [logger.level for logger in loggers]
        _silence_shutdown_logs()
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


#: the loggers that tell of a cluster's closing comms
SHUTDOWN_LOGGERS = ("distributed", "tornado", "asyncio")


def _silence_shutdown_logs() -> None:
    for name in SHUTDOWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def interrupted_line(count: int, unit: str, saved: str | None) -> str:
    """``interrupted at iteration 94; parameters saved to model.npz``."""
    where = f"parameters saved to {saved}" if saved else "parameters not saved"
    return f"interrupted at {unit} {count}; {where}"


@contextlib.contextmanager
def shielded_start() -> Iterator[None]:
    """Start an embedded cluster inside: its worker processes ignore Ctrl-C.

    SIGINT is ignored meanwhile, and the worker processes started now inherit that (an
    ignored signal stays ignored across ``exec``, and Python keeps it so; a handler would
    not survive). The price: a Ctrl-C pressed during the few seconds of the start is lost.
    Workers of a running cluster are not this process's children and are not affected.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
