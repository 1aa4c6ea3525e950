"""Command-line flags derived from options classes (the solvers', the models', the recipes').

Every option becomes one flag (``n_replicas`` -> ``--n-replicas``, plus its older
spellings such as ``--replicas``); the help text, valid values and defaults come from the
option's declaration. A flag given for a solver that does not take it is an error, not
silently dropped.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.options import Options, OptionSpec, describe_default, parse_ints, parse_mapping
from dasklbfgs.solvers.registry import get_solver, solver_names

__all__ = ["add_option_flags", "add_solver_flags", "flag", "given_options", "options_from_args", "parse_ints",
           "parse_mapping"]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_flag(group: Any, name: str, spec: OptionSpec, defaults: str) -> None:
    """The flag of option ``name`` and its older spellings; absent, it stays absent."""
    flags = [flag(name), *(flag(alias) for alias in spec.aliases)]
    group.add_argument(*flags, dest=name, default=argparse.SUPPRESS, help=f"{spec.help} {defaults}", **spec.flag)


def add_option_flags(group: Any, options: type[Options]) -> None:
    """One flag per option of ``options``."""
    for name, default, spec in options.items():
        _add_flag(group, name, spec, f"[default: {describe_default(default, spec)}]")


def given_options(args: argparse.Namespace, names: Any) -> dict[str, Any]:
    """The values of the flags among ``names`` that were given."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def _declarations() -> dict[str, list[tuple[str, Any, OptionSpec]]]:
    """option name -> [(solver, default, spec)] over every registered solver."""
    found: dict[str, list[tuple[str, Any, OptionSpec]]] = defaultdict(list)
    for solver in solver_names():
        for name, default, spec in get_solver(solver).options.items():
            found[name].append((solver, default, spec))
    return found


def _defaults_text(entries: list[tuple[str, Any, OptionSpec]], n_solvers: int) -> str:
    """``[sandblaster; default: 1]``, or per solver when the defaults differ."""
    by_default: dict[str, list[str]] = defaultdict(list)
    for solver, default, spec in entries:
        by_default[describe_default(default, spec)].append(solver)
    solvers = [solver for solver, _, _ in entries]
    where = "" if len(solvers) == n_solvers else f"{', '.join(solvers)}; "
    if len(by_default) == 1:
        return f"[{where}default: {next(iter(by_default))}]"
    per_value = "; ".join(f"{value} ({', '.join(names)})" for value, names in by_default.items())
    return f"[{where}default: {per_value}]"


def add_solver_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per option of the registered solvers; absent flags stay absent."""
    names = solver_names()
    group = parser.add_argument_group(
        "solver options", "each option applies to the solvers listed in its brackets "
        "(the same options as the Python API and the YAML train: section)")
    for name, entries in _declarations().items():
        _add_flag(group, name, entries[0][2], _defaults_text(entries, len(names)))


def options_from_args(args: argparse.Namespace, solver: str) -> Options:
    """The chosen solver's options from the flags that were given."""
    options = get_solver(solver).options
    given = given_options(args, _declarations())
    foreign = sorted(name for name in given if name not in options.fields())
    if foreign:
        takers = {name: [s for s, _, _ in _declarations()[name]] for name in foreign}
        detail = "; ".join(f"{flag(n)} applies to {', '.join(takers[n])}" for n in foreign)
        raise ConfigurationError(f"--solver {solver} does not take {', '.join(map(flag, foreign))} ({detail})")
    return options.from_mapping(given)
