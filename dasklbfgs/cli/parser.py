"""The argument parser of every ``dasklbfgs`` command: defaults in the help, and a
suggestion for a mistyped flag, command or choice when a known one is close."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_CODES", "DefaultsFormatter", "Parser", "closest", "invalid_choice_message",
           "unknown_flag_message"]

EXIT_CODES = """\
exit codes:
  0    the run succeeded: it converged (Sandblaster), or ran its epochs and lowered
       the objective (the replica methods); or the command did its work
  1    the run ended without success: a limit such as --maxiter was reached, the
       loss diverged or became non-finite, or the epochs ended no better than the start
  2    bad usage or input (one line on stderr says what and what to do)
  130  interrupted by Ctrl-C (train and run save the parameters reached)
  141  the output was closed early (a pipe into head, say): stopped quietly"""

#: 128 + SIGPIPE: what a shell reports for a command a closed pipe ended
EXIT_CLOSED_PIPE = 141


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already speaks of it; a
    description or epilog written in lines (exit codes, examples) keeps them, one paragraph
    is filled to the terminal's width."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text.lower() or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if action.default is None or action.default is False and action.nargs == 0:
            return text  # a switch, or nothing to show
        return f"{text} (default: %(default)s)"

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


#: how close a mistyped name must be to a known one to be suggested (difflib's ratio: 0.75
#: takes --maxitr for --maxiter and --rwos for --rows, not --foo for --ftol)
CLOSE = 0.75


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` was probably meant as, if one is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=CLOSE)
    return close[0] if close else None


def unknown_flag_message(flag: str, known: Sequence[str], prog: str) -> str:
    """``unrecognized argument --maxiterr; did you mean --maxiter?`` (compared without the
    dashes, which every flag shares)."""
    name = flag.split("=", 1)[0]
    close = closest(name.lstrip("-"), [k.lstrip("-") for k in known if k.startswith("--")])
    hint = f"did you mean --{close}?" if close else f"'{prog} --help' lists the options"
    return f"unrecognized argument {name}; {hint}"


def invalid_choice_message(value: Any, choices: Iterable[Any], prog: str, command: bool) -> str:
    """``unknown command 'trian'; did you mean 'train'?``, ``invalid choice: 'sandblastr'; did
    you mean 'sandblaster'? (choose from ...)``."""
    close = closest(str(value), [str(choice) for choice in choices])
    if command:
        hint = f"did you mean {close!r}?" if close else f"'{prog} --help' lists the commands"
        return f"unknown command {value!r}; {hint}"
    listed = f"(choose from {', '.join(map(repr, choices))})"
    return f"invalid choice: {value!r}; did you mean {close!r}? {listed}" if close else \
        f"invalid choice: {value!r} {listed}"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help shows defaults, whose errors are one line (exit
    code 2) and whose unknown flags, commands and choices get the closest known one as a
    suggestion when one is close; its subcommands are ``Parser`` too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line, like every other error of the command (the usage of ``train`` alone
        runs to thirty lines; ``--help`` shows it)."""
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own message lists the choices without a suggestion
        if action.choices is not None and value not in action.choices:
            command = isinstance(action, argparse._SubParsersAction)
            message = invalid_choice_message(value, action.choices, self.prog, command)
            raise argparse.ArgumentError(None if command else action, message)

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        # The innermost subcommand parses first and knows the flags that were meant.
        namespace, extras = super().parse_known_args(args, namespace)
        flags = [extra for extra in extras if extra.startswith("-") and extra != "-"]
        if flags:
            self.error(unknown_flag_message(flags[0], list(self._option_string_actions), self.prog))
        return namespace, extras
