"""The solver interface: one registered :class:`Solver` per method, one entry point.

A solver is a name, an options class (:mod:`dasklbfgs.options`), a statistics class
(:class:`~dasklbfgs.solvers.result.RunStats`) and a ``plan`` function::

    plan(context: RunContext) -> SolverRun      # the solver's own checks, no cluster yet
    SolverRun.run() -> Result                   # on context.client, reporting through context

:func:`minimize` owns the run (:class:`~dasklbfgs.solvers.context.RunContext`: the checked
inputs, the client, the metrics stream with its start and end events, the cadences and the
callback). Adding a solver is one module that defines those and calls :func:`register`. The generic
entry point :func:`minimize`, the named functions (``sandblaster_lbfgs``, ...), the CLI,
the YAML pipelines, the estimators and the docs' options tables all find solvers here:
solver names are written nowhere else.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dasklbfgs.cluster import prepare_embedded_clusters
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.models.contract import as_model
from dasklbfgs.options import Options, describe_default, options_doc
from dasklbfgs.solvers.stats import RunStats

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

    from dasklbfgs._typing import DatasetLike
    from dasklbfgs.models.base import Model
    from dasklbfgs.solvers.context import RunContext
    from dasklbfgs.solvers.result import Result

__all__ = ["Solver", "SolverRun", "register", "get_solver", "solver_names", "minimize", "solver_function",
           "options_table", "PlannedBy", "import_for_runs"]


class SolverRun(Protocol):
    """A planned run of a solver: its inputs checked, its cluster not yet used."""

    def run(self) -> Result:
        """Train on ``context.client`` and return the result."""
        ...


@dataclass(frozen=True)
class Solver:
    """A registered solver.

    ``plan(context)`` checks what only this solver asks of its inputs and returns the
    :class:`SolverRun` that :func:`minimize` runs once connected; ``stats`` is the
    :class:`~dasklbfgs.solvers.result.RunStats` class of its results (what ``nit`` and a
    history entry's ``loss`` are, and how its statistics render); ``deterministic``, whether
    a run repeats bitwise. ``takes_l1`` says whether it minimises a model's L1 term
    (:meth:`Model.l1_weights`) whatever its options, ``l1_optimizers`` the values of its
    ``optimizer`` option with which it does (:meth:`minimises_l1`); other runs of a model
    with l1 are refused. ``takes_bounds``: whether it keeps a model's bounds
    (:meth:`Model.bounds`); other runs of a model with bounds are refused.
    """

    name: str
    options: type[Options]
    plan: Callable[[RunContext], SolverRun]
    summary: str
    stats: type[RunStats]
    deterministic: bool = False
    takes_l1: bool = False
    l1_optimizers: tuple[str, ...] = ()
    takes_bounds: bool = False

    def minimises_l1(self, options: Options) -> bool:
        """Whether a run with ``options`` minimises the model's l1 term."""
        return self.takes_l1 or getattr(options, "optimizer", None) in self.l1_optimizers

    @property
    def l1_combinations(self) -> list[str]:
        """How this solver takes l1, in words: ``["sandblaster"]``, ``["downpour with optimizer='ftrl'"]``."""
        if self.takes_l1:
            return [repr(self.name)]
        return [f"{self.name!r} with optimizer={opt!r}" for opt in self.l1_optimizers]

    @property
    def unit(self) -> str:
        """What ``result.nit`` and a history entry's ``step`` count."""
        return self.stats.unit


class PlannedBy:
    """A solver's ``plan`` that is ``module.function``, imported when a run is planned (the
    module docstring says why); ``module`` is what :func:`import_for_runs` imports ahead."""

    def __init__(self, module: str, function: str) -> None:
        self.module, self.function = module, function

    def __call__(self, context: RunContext) -> SolverRun:
        planned: Callable[[RunContext], SolverRun] = getattr(importlib.import_module(self.module), self.function)
        return planned(context)

    def __repr__(self) -> str:
        return f"{self.module}.{self.function}"


_SOLVERS: dict[str, Solver] = {}


def register(solver: Solver) -> Solver:
    """Add ``solver`` to the registry (its name must be new)."""
    if solver.name in _SOLVERS:
        raise ValueError(f"a solver named {solver.name!r} is already registered")
    _SOLVERS[solver.name] = solver
    return solver


def _load() -> dict[str, Solver]:
    # The built-in solvers register themselves when their packages are imported.
    import dasklbfgs.solvers  # noqa: F401

    return _SOLVERS


def solver_names() -> tuple[str, ...]:
    """Names of the registered solvers, in registration order."""
    return tuple(_load())


def get_solver(name: str) -> Solver:
    solvers = _load()
    if name not in solvers:
        raise ConfigurationError(f"solver must be one of {tuple(solvers)!r}, got {name!r}")
    return solvers[name]


def import_for_runs() -> None:
    """Import what a run of the default solver (the first registered) needs in this process:
    the run's context and the solver's coordinator (Dask's client side, scipy.optimize).

    :func:`dasklbfgs.connect` calls it on a thread while an embedded cluster's workers
    start, so that the first run does not pay for it (registered below).
    """
    importlib.import_module("dasklbfgs.solvers.context")
    plan = get_solver(solver_names()[0]).plan
    if isinstance(plan, PlannedBy):
        importlib.import_module(plan.module)


prepare_embedded_clusters(while_workers_start=(__name__, "import_for_runs"))


def resolve_options(solver: Solver, options: Options | Mapping[str, Any] | None, values: Mapping[str, Any]
                    ) -> Options:
    """An options object of ``solver`` from an object, a mapping and/or keyword values."""
    if isinstance(options, Options):
        if not isinstance(options, solver.options):
            raise ConfigurationError(
                f"options for solver {solver.name!r} must be {solver.options.__name__}, "
                f"got {type(options).__name__}"
            )
        return options.replace(**values) if values else options
    if options is not None and not isinstance(options, Mapping):
        raise ConfigurationError(
            f"options must be a {solver.options.__name__}, a mapping or None, got {type(options).__name__}"
        )
    return solver.options.from_mapping({**solver.options.canonical(options or {}),
                                        **solver.options.canonical(values)})


def minimize(model: Model, data: DatasetLike, solver: str = "sandblaster",
             options: Options | Mapping[str, Any] | None = None,
             *, client: Any = None, x0: Any = None, callback: Callable[[OptimizeResult], Any] | None = None,
             eval_data: DatasetLike | None = None, score: bool | None = None, **values: Any) -> Result:
    """Train ``model`` (a :mod:`dasklbfgs.models` model) on ``data`` (a ShardedDataset or
    its path) with the registered solver ``solver`` (see :func:`solver_names`).

    ``options`` is the solver's options object (``SandblasterOptions(gtol=1e-8)``) or a
    mapping; keyword ``values`` are added on top; unknown names are refused. ``client``:
    default the active client, else an embedded ``LocalCluster`` closed on return. ``x0``:
    starting parameters (default: the model's initialisation). ``callback`` is called with
    each iteration's or history entry's ``OptimizeResult``; raising ``StopIteration`` stops
    the run cleanly (``StopIteration("why")`` makes ``"why"`` the result's message); it
    receives the history entry and ``x``. ``eval_data``: a held-out dataset scored every
    ``eval_every`` iterations or steps and at the end. ``score=True``: at the end, every
    metric of the model's task on ``data`` and ``eval_data`` (``result.scores["train"]``,
    ``["test"]``; see :func:`dasklbfgs.evaluate`), computed by the workers (Sandblaster: on
    the shards it cached, before releasing them). Returns a
    :class:`~dasklbfgs.solvers.result.Result` (a scipy ``OptimizeResult`` of one shape for
    every solver; its docstring lists the fields).
    """
    from dasklbfgs.solvers.context import RunContext  # Dask and the run's machinery, with the first run

    chosen = get_solver(solver)
    resolved = resolve_options(chosen, options, values)
    model = as_model(model)  # a model of the contract's, wrapped
    if model.l1_weights() is not None and not chosen.minimises_l1(resolved):
        _refuse_l1(chosen, resolved, model)
    if model.bounds() is not None and not chosen.takes_bounds:
        able = _in_words([repr(known.name) for known in _load().values() if known.takes_bounds])
        raise ConfigurationError(f"solver {chosen.name!r} does not keep bounds on the parameters, and {model!r} "
                                 f"has them (on its coefficients, or a scale it estimates); train it with solver "
                                 f"{able}, or without bounds")
    context = RunContext.checked(chosen, model, data, resolved, x0=x0, callback=callback, eval_data=eval_data,
                                 score=score)
    planned = chosen.plan(context)  # bad input fails here, before a cluster starts
    with context.connected(client):
        result = planned.run()
        context.settle_early_stopping(result)
        if context.scoring and "scores" not in result:  # the solver scored none where its shards were
            result.scores = context.final_scores(result.x)
        if context.scoring:
            result.score_curves = context.score_curves
            result.stats["score_seconds"] = context.score_seconds
        context.finish(result)
    return result


def _refuse_l1(chosen: Solver, options: Options, model: Model) -> None:
    """The error for a model with l1 given to a solver (or optimizer) that ignores it."""
    able = _in_words([c for known in _load().values() for c in known.l1_combinations])
    given = f" with optimizer={getattr(options, 'optimizer', None)!r}" if chosen.l1_optimizers else ""
    fix = f"pass optimizer={chosen.l1_optimizers[0]!r}" if chosen.l1_optimizers else "train it with another solver"
    raise ConfigurationError(
        f"solver {chosen.name!r} does not minimise an l1 penalty{given}, and {model!r} has one; {fix} or set "
        f"l1=0 (l1 is minimised by solver {able})",
        parameters=("optimizer",),  # not l1: the model's repr holds one
    )


def _in_words(choices: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} or {choices[-1]}"


_RUN_INPUTS = ("client", "x0", "callback", "eval_data", "score")  # minimize's other keywords, all default None


def solver_function(function_name: str, name: str, options: type[Options], summary: str
                    ) -> Callable[..., OptimizeResult]:
    """The named function of solver ``name`` (``sandblaster_lbfgs(model, data, **options)``).

    Its signature and docstring are generated from ``options``, so each option's default
    and help text stay written once; it calls :func:`minimize`.
    """

    def solve(model: Model, data: DatasetLike, **kwargs: Any) -> OptimizeResult:
        inputs = {key: kwargs.pop(key, None) for key in _RUN_INPUTS}
        return minimize(model, data, name, None, **inputs, **kwargs)

    solve.__name__ = solve.__qualname__ = function_name
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(key, keyword, default=None) for key in _RUN_INPUTS]
    parameters += [inspect.Parameter(n, keyword, default=d) for n, d, _ in options.items()]
    # A string: the class is scipy.optimize's, imported by the run, not by the registration.
    solve.__signature__ = inspect.Signature(parameters, return_annotation="OptimizeResult")  # type: ignore[attr-defined]
    solve.__doc__ = f"{summary}\n\n    Equivalent to ``minimize(model, data, {name!r}, ...)``; see " \
                    f":func:`dasklbfgs.minimize` for ``model``, ``data``, ``client``, ``x0``, ``callback``, " \
                    f"``eval_data`` and ``score``.\n\n    Options\n    -------\n{options_doc(options)}"
    return solve


def options_table(options: type[Options]) -> str:
    """A Markdown table of ``options``: name, default, valid values, meaning."""
    rows = ["| option | default | valid | meaning |", "|---|---|---|---|"]
    for name, default, spec in options.items():
        aliases = f" (also {', '.join(spec.aliases)})" if spec.aliases else ""
        rows.append(f"| `{name}`{aliases} | {describe_default(default, spec)} | {spec.expected()} | {spec.help} |")
    return "\n".join(rows)
