"""The log lines a command shows: the package's own, never a third party's chatter.

``dasklbfgs run`` tells what it does in log lines (INFO, from the ``dasklbfgs`` loggers).
Configuring the root logger for that would also print every other library's INFO records
(numexpr's ``NumExpr defaulting to N threads``, say): the package's logger gets a handler of
its own instead, and the root logger keeps Python's default, which shows other libraries'
warnings and errors (Dask's loggers keep the handlers Dask's configuration gives them).
"""

from __future__ import annotations

import logging

__all__ = ["show_our_logs"]

FORMAT = "%(asctime)s %(name)s %(message)s"


class CommandHandler(logging.StreamHandler):
    """The handler a command gives the package's logger (stderr, with the time and the logger)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(FORMAT))


def show_our_logs(level: int = logging.INFO) -> None:
    """Print the package's log records from ``level`` up on stderr (one handler, however
    often called)."""
    ours = logging.getLogger("dasklbfgs")
    ours.setLevel(level)
    if not any(isinstance(handler, CommandHandler) for handler in ours.handlers):
        ours.addHandler(CommandHandler())
