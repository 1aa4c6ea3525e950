"""Errors in the command line's words: the keywords a library error names
(:attr:`~dasklbfgs.errors.DaskLBFGSError.parameters`) become the flags that set them.

The flags come from the parser itself: an action's ``dest`` is the keyword it sets and its
first option string the flag (``overwrite`` -> ``--overwrite``, ``shard_rows`` ->
``--shard-rows``). A count the library calls ``n_<things>`` is the flag ``--<things>`` where
the command has no ``--n-<things>`` (``n_workers`` -> ``--workers``).
"""

from __future__ import annotations

import argparse
import functools
import re

from dasklbfgs.errors import DaskLBFGSError

__all__ = ["command_parser", "in_flags"]

QUOTE = "'"


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's parser that read ``args`` (``dasklbfgs data make``'s, say)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return command_parser(action.choices[chosen], args)
    return parser


def _flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """keyword -> the flag's action, for every flag of ``parser``."""
    actions = {action.dest: action for action in parser._actions if action.option_strings}
    counts = {f"n_{dest}": action for dest, action in actions.items() if f"n_{dest}" not in actions}
    return counts | actions


def _flag_text(action: argparse.Action, match: re.Match[str]) -> str:
    """``--overwrite`` for ``overwrite=True``, ``--no-overlap`` for ``overlap=False``,
    ``--state local`` for ``state='local'``, the flag for the bare keyword."""
    flag, value = action.option_strings[0], match[1]
    if value is None:
        return flag
    if action.nargs == 0 and value in ("True", "False"):
        negative = "--no-" + flag[2:]
        return flag if value == "True" or negative not in action.option_strings else negative
    return f"{flag} {value.strip(QUOTE)}"


def in_flags(exc: DaskLBFGSError, parser: argparse.ArgumentParser) -> str:
    """``exc``'s message with the keywords it names written as ``parser``'s flags (a
    keyword the command has no flag for stays as it is)."""
    message = str(exc)
    actions = _flag_actions(parser)
    for keyword in exc.parameters:
        action = actions.get(keyword)
        if action is None:
            continue
        # the keyword as a word of its own (not inside --flag-names or other names), with its value if given
        pattern = rf"(?<![\w.-]){re.escape(keyword)}(?:=('[^']*'|[^\s,;)]+))?(?![\w(-])"
        message = re.sub(pattern, functools.partial(_flag_text, action), message)
    return message
