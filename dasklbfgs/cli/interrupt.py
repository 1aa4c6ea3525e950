"""Ctrl-C for the commands that train: stop at the next iteration and keep what was reached.

The first SIGINT only sets a flag; the solver's callback (:meth:`Interrupt.check`) raises
``StopIteration("interrupted")`` at its next iteration or progress poll, so the solver
returns the parameters it reached and the command saves them, prints one line and exits
with :data:`EXIT_INTERRUPTED`. A second SIGINT aborts at once without saving.

A terminal sends Ctrl-C to the whole process group, which includes the worker processes
of an embedded cluster: :func:`start_remembering_ctrl_c` keeps it from them, so that the run they
serve can stop in order rather than lose its workers mid-step, and a Ctrl-C pressed while
the cluster starts is said at once and stops the command once the cluster is up
(:class:`InterruptedAtStart`), before any training.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO, TypeVar

__all__ = ["EXIT_INTERRUPTED", "INTERRUPTED", "STARTING_NOTE", "Interrupt", "InterruptedAtStart", "interrupted_line",
           "shielded_start", "start_remembering_ctrl_c"]

T = TypeVar("T")

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C
INTERRUPTED = "interrupted"  # the result's message, the report's and metrics.json's
#: what a Ctrl-C pressed while the embedded cluster starts prints at once (on stderr)
STARTING_NOTE = "Ctrl-C: the cluster is still starting; the run stops once it is up (Ctrl-C again stops it now)"


class InterruptedAtStart(KeyboardInterrupt):
    """Ctrl-C was pressed while the cluster started: the command stops before it trains
    (the command line's ``main`` says ``interrupted`` and exits with :data:`EXIT_INTERRUPTED`)."""


class Interrupt:
    """``with Interrupt() as interrupt:`` pass ``interrupt.check`` to the solver as its
    callback (or call it from yours); the result's message is then :data:`INTERRUPTED`."""

    def __init__(self, stream: TextIO | None = None, signals: tuple[signal.Signals, ...] = (signal.SIGINT,)) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.signals = signals  # SIGTERM too for a command that serves until stopped
        self.requested = False
        self.starting = False  # set by start_remembering_ctrl_c: a Ctrl-C now is said at once (STARTING_NOTE)
        self._said_starting = False
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
        if self.starting:
            self.say_starting()

    def say_starting(self) -> None:
        """Say, once, that a Ctrl-C pressed while the cluster starts is remembered (nothing to
        stop yet): :data:`STARTING_NOTE` (after a new line on a terminal, which shows ``^C``)."""
        if self._said_starting:
            return
        self._said_starting = True
        self.stream.write(("\n" if self.stream.isatty() else "") + STARTING_NOTE + "\n")
        self.stream.flush()

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


def start_remembering_ctrl_c(start: Callable[[], T], interrupt: Interrupt | None = None) -> T:
    """``start()``, which starts an embedded cluster (or joins a running one), so that its
    worker processes never see the terminal's Ctrl-C; with ``interrupt`` (entered), a Ctrl-C
    meanwhile is not lost: it sets ``interrupt.requested`` and prints :data:`STARTING_NOTE`
    at once (the caller stops once the cluster is up: :class:`InterruptedAtStart`), and a
    second one aborts (:meth:`Interrupt.abort`).

    ``start`` runs in a thread of its own, created with SIGINT blocked: the threads it starts
    (the cluster's event loop, the ones that spawn the workers) inherit that mask, and so do
    the worker processes they spawn (a signal mask survives ``fork`` and ``exec``; a handler
    would not), now and whenever a worker is restarted. A blocked SIGINT is never delivered
    to them. This thread keeps its handler and waits in short steps, so its handler runs at
    once. Without ``interrupt`` SIGINT is ignored meanwhile instead (:func:`shielded_start`).

    multiprocessing's resource tracker is started first, from here: starting it blocks SIGINT
    and then *unblocks* it in the thread that starts it, which would otherwise be the
    cluster's event loop, the thread the workers are spawned from.
    """
    if interrupt is None or not hasattr(signal, "pthread_sigmask"):  # (Windows has no signal masks)
        with shielded_start():
            return start()
    from multiprocessing import resource_tracker

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = start()
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            outcome["error"] = exc

    interrupt.starting = True
    try:
        if interrupt.requested:  # pressed since the command took Ctrl-C over, before this start
            interrupt.say_starting()
        resource_tracker.ensure_running()
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            thread = threading.Thread(target=run, name="dasklbfgs cluster start", daemon=True)
            thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        while thread.is_alive():
            thread.join(0.1)
    finally:
        interrupt.starting = False
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@contextlib.contextmanager
def shielded_start() -> Iterator[None]:
    """Start an embedded cluster inside: its worker processes ignore Ctrl-C.

    SIGINT is ignored meanwhile, and the worker processes started now inherit that (an
    ignored signal stays ignored across ``exec``, and Python keeps it so; a handler would
    not survive). The price: a Ctrl-C pressed during the few seconds of the start is lost;
    :func:`start_remembering_ctrl_c` with an :class:`Interrupt` keeps it. Workers of a running cluster
    are not this process's children and are not affected.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
