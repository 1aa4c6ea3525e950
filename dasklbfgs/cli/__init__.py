"""The ``dasklbfgs`` command: one module per subcommand, flags derived from the solvers'
options classes (:mod:`dasklbfgs.solvers`)."""

from dasklbfgs.cli.main import main

__all__ = ["main"]
