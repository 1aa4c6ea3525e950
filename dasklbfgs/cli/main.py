"""The ``dasklbfgs`` command: one module per subcommand, each with ``add_parser(sub)``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dasklbfgs.cli import cluster, data, demo, evaluate, info, path, predict, run, train
from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED
from dasklbfgs.cli.messages import command_parser, in_flags
from dasklbfgs.cli.parser import EXIT_CLOSED_PIPE, EXIT_CODES, Parser
from dasklbfgs.errors import DaskLBFGSError

__all__ = ["build_parser", "main"]

COMMANDS = (info, data, train, path, evaluate, predict, demo, run, cluster)


def build_parser() -> Parser:
    from dasklbfgs._version import __version__

    parser = Parser(
        prog="dasklbfgs",
        description="Sandblaster L-BFGS, Downpour SGD and their peers on Dask over sharded Zarr datasets.",
        epilog=f"{EXIT_CODES}\n\n'dasklbfgs COMMAND --help' lists a command's options and their defaults.",
    )
    parser.add_argument("--version", action="version", version=f"dasklbfgs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments) names; its exit code."""
    try:
        try:
            return _command(argv)
        finally:  # what is still buffered (--help's text too) meets a closed pipe here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``dasklbfgs info DATA | head -1``): stop quietly, as Python's
        # docs advise (signal module, "Note on SIGPIPE"): stdout onto devnull, so that the
        # flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE


def _command(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except DaskLBFGSError as exc:
        print(f"dasklbfgs: error: {in_flags(exc, command_parser(parser, args))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before a run started (while writing data, say)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
