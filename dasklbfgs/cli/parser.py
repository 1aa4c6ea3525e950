"""The argument parser of every ``dasklbfgs`` command: defaults in the help, and a
suggestion for a mistyped flag."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

__all__ = ["EXIT_CODES", "Parser", "unknown_flag_message"]

EXIT_CODES = """\
exit codes:
  0    the run succeeded: it converged (Sandblaster), or ran its epochs and lowered
       the objective (the replica methods); or the command did its work
  1    the run ended without success: a limit such as --maxiter was reached, the
       loss diverged or became non-finite, or the epochs ended no better than the start
  2    bad usage or input (one line on stderr says what and what to do)
  130  interrupted by Ctrl-C (train and run save the parameters reached)"""


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already speaks of it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text.lower() or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if action.default is None or action.default is False and action.nargs == 0:
            return text  # a switch, or nothing to show
        return f"{text} (default: %(default)s)"


class TopFormatter(argparse.RawDescriptionHelpFormatter, DefaultsFormatter):
    """The top level's help keeps the epilog's lines (the exit codes) as written."""


def unknown_flag_message(flag: str, known: Sequence[str], prog: str) -> str:
    """``unrecognized argument --maxiterr; did you mean --maxiter?``"""
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"'{prog} --help' lists the options"
    return f"unrecognized argument {name}; {hint}"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help shows defaults, whose errors are one line (exit
    code 2) and whose unknown flags get the closest known one as a suggestion; its
    subcommands are ``Parser`` too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line, like every other error of the command (the usage of ``train`` alone
        runs to thirty lines; ``--help`` shows it)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        # The innermost subcommand parses first and knows the flags that were meant.
        namespace, extras = super().parse_known_args(args, namespace)
        flags = [extra for extra in extras if extra.startswith("-") and extra != "-"]
        if flags:
            self.error(unknown_flag_message(flags[0], list(self._option_string_actions), self.prog))
        return namespace, extras
