"""The options vocabulary: one declaration per option reaches the API, the CLI, YAML and docs."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from dasklbfgs import minimize, solver_names
from dasklbfgs.cli.main import build_parser
from dasklbfgs.cli.solver_flags import flag, options_from_args
from dasklbfgs.errors import ConfigurationError, UnknownOptionError
from dasklbfgs.options import OptionSpec
from dasklbfgs.pipeline.config import validate_train
from dasklbfgs.solvers import (
    DownpourOptions,
    EASGDOptions,
    NeighbourOptions,
    SandblasterOptions,
    SyncOptions,
    get_solver,
)
from dasklbfgs.solvers.reference import options_reference

ROOT = Path(__file__).resolve().parents[2]
ALL_OPTIONS = [(solver, name, default, spec) for solver in solver_names()
               for name, default, spec in get_solver(solver).options.items()]


def other_value(default, spec: OptionSpec):
    """A valid value that is not the default, with its spelling on the command line."""
    kind = spec.kind
    if kind == "int":
        value = (default or int(spec.minimum or 0)) + 1
        return value, [str(value)]
    if kind == "float":
        value = 0.5 if default in (None, 0.0) else default * 2
        if spec.below is not None:
            value = min(value, spec.below / 2)
        return value, [repr(value)]
    if kind in ("bool", "optional_bool"):
        return (False, ["--no"]) if default else (True, [])
    if kind == "choice":
        value = next(c for c in spec.choices if c != default)
        return value, [value]
    if kind == "bool_or_auto":
        return False, ["false"]
    if kind == "path":
        return "ckpt.zarr", ["ckpt.zarr"]
    if kind == "text":
        return "my run", ["my run"]
    if kind == "ints":
        return (2, 3), ["2,3"]
    if kind == "mapping":
        return {"beta": 0.5}, ["beta=0.5"]
    raise AssertionError(kind)


# options that are only valid together with another one
NEEDS = {"torus_shape": {"topology": "torus"}, "resume": {"checkpoint_path": "c.zarr"},
         "checkpoint_every": {"checkpoint_path": "c.zarr"},
         ("sandblaster", "n_param_shards"): {"state": "sharded"}}  # by (solver, option) where one solver needs it


def cli_args(name: str, spec: OptionSpec, spelled: list[str]) -> list[str]:
    if spelled == ["--no"]:
        return ["--no-" + name.replace("_", "-")]
    return [flag(name), *spelled]


@pytest.mark.parametrize("solver, name, default, spec", ALL_OPTIONS,
                         ids=[f"{s}-{n}" for s, n, _, _ in ALL_OPTIONS])
def test_every_option_reaches_the_api_the_cli_and_yaml(solver, name, default, spec) -> None:
    value, spelled = other_value(default, spec)
    extra = NEEDS.get((solver, name), NEEDS.get(name, {}))
    options_class = get_solver(solver).options
    # the Python API: the options class and the solver's function signature
    assert getattr(options_class(**{name: value, **extra}), name) == value
    # the command line
    argv = ["train", "--data", "d", "--solver", solver, *cli_args(name, spec, spelled)]
    for key, needed in extra.items():
        argv += [flag(key), needed]
    parsed = options_from_args(build_parser().parse_args(argv), solver)
    assert getattr(parsed, name) == value
    # YAML
    assert getattr(validate_train({"solver": solver, name: value, **extra})["options"], name) == value


def test_the_solver_functions_have_the_options_as_keyword_arguments() -> None:
    for solver in solver_names():
        module = __import__("dasklbfgs", fromlist=["x"])
        function = {"sandblaster": "sandblaster_lbfgs", "newton": "sandblaster_newton",
                    "downpour": "downpour_sgd", "sync": "sync_sgd",
                    "easgd": "easgd", "gossip": "gossip_sgd", "neighbours": "neighbour_sgd"}[solver]
        parameters = inspect.signature(getattr(module, function)).parameters
        for name, default, _ in get_solver(solver).options.items():
            assert parameters[name].default == default and parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert name in getattr(module, function).__doc__


def test_older_spellings_still_work() -> None:
    parser = build_parser()
    args = parser.parse_args(["train", "--data", "d", "--solver", "downpour", "--replicas", "3", "--param-shards",
                              "4", "--checkpoint", "c.zarr", "--no-backup-tasks"][:-1])
    options = options_from_args(args, "downpour")
    assert (options.n_replicas, options.n_param_shards, options.checkpoint_path) == (3, 4, "c.zarr")
    sandblaster = options_from_args(parser.parse_args(["train", "--data", "d", "--no-backup-tasks"]), "sandblaster")
    assert sandblaster.backup_tasks is False
    yaml_options = validate_train({"solver": "downpour", "replicas": 3, "param_shards": 4})["options"]
    assert (yaml_options.n_replicas, yaml_options.n_param_shards) == (3, 4)


@pytest.mark.parametrize("make, error, match", [
    (lambda: SandblasterOptions(history=0), ConfigurationError,
     r"sandblaster option history must be an integer >= 1, got 0"),
    (lambda: SandblasterOptions(gtol=float("nan")), ConfigurationError, r"gtol must be a non-negative number, got nan"),
    (lambda: SandblasterOptions(standardize="yes"), ConfigurationError,
     r"standardize must be True or False, got 'yes'"),
    (lambda: DownpourOptions(optimizer="adam"), ConfigurationError,
     r"optimizer must be one of \('sgd', 'momentum', 'adagrad', 'ftrl'\), got 'adam'"),
    (lambda: DownpourOptions(wire_dtype="float16"), ConfigurationError, r"wire_dtype must be one of"),
    (lambda: DownpourOptions(overlap=True, sparse=True), ConfigurationError, r"overlap=True needs dense transfer"),
    (lambda: DownpourOptions(checkpoint_every=5), ConfigurationError, r"checkpoint_every needs checkpoint_path"),
    (lambda: EASGDOptions(alpha=0.5, rho=1.0), ConfigurationError, r"give alpha \(0.5\) or rho \(1.0\), not both"),
    (lambda: EASGDOptions(rho=20.0), ConfigurationError, r"alpha = 2.0, which must be below 1"),
    (lambda: NeighbourOptions(torus_shape=(2, 2)), ConfigurationError,
     r"torus_shape \(2, 2\) is only for topology='torus'"),
    (lambda: NeighbourOptions(torus_shape=(2, 2, 2), topology="torus"), ConfigurationError,
     r"torus_shape must be 2 integers"),
    (lambda: SyncOptions(optimizer_options=[1]), ConfigurationError, r"optimizer_options must be a mapping"),
    (lambda: SyncOptions.from_mapping({"taus": 3}), UnknownOptionError, r"sync does not take option 'taus'"),
    (lambda: SandblasterOptions.from_mapping({"maxiters": 3}), UnknownOptionError,
     r"sandblaster does not take option 'maxiters' \(did you mean 'maxiter'\?\)"),
    (lambda: DownpourOptions.from_mapping({"replicas": 2, "n_replicas": 3}), ConfigurationError,
     r"option n_replicas given twice"),
    (lambda: minimize(None, None, "lbfgs"), ConfigurationError,
     r"solver must be one of \('sandblaster', 'newton', 'downpour', 'sync', 'easgd', 'gossip', 'neighbours'\), "
     r"got 'lbfgs'"),
    (lambda: minimize(None, None, "sync", DownpourOptions()), ConfigurationError,
     r"options for solver 'sync' must be SyncOptions, got DownpourOptions"),
    (lambda: minimize(None, None, "sync", [1]), ConfigurationError,
     r"options must be a SyncOptions, a mapping or None"),
])
def test_bad_options_name_the_option_the_value_and_what_is_valid(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()


def test_a_flag_for_another_solver_is_refused_not_dropped() -> None:
    args = build_parser().parse_args(["train", "--data", "d", "--solver", "gossip", "--tau", "3"])
    with pytest.raises(ConfigurationError, match=r"--solver gossip does not take --tau \(--tau applies to easgd\)"):
        options_from_args(args, "gossip")


def test_options_are_immutable_and_replace_checks_again() -> None:
    options = SandblasterOptions(maxiter=5)
    with pytest.raises(AttributeError, match=r"cannot assign to field 'maxiter'"):
        options.maxiter = 6  # type: ignore[misc]
    assert options.replace(maxiter=7).maxiter == 7 and options.maxiter == 5
    with pytest.raises(ConfigurationError, match=r"maxiter must be an integer >= 1, got -1"):
        options.replace(maxiter=-1)


def test_the_options_reference_in_docs_is_generated_from_the_classes() -> None:
    assert (ROOT / "docs" / "options.md").read_text() == options_reference(), (
        "docs/options.md is stale: run python -m dasklbfgs.solvers.reference > docs/options.md"
    )


def test_older_spellings_mix_with_an_options_object_and_null_means_the_default() -> None:
    from dasklbfgs.solvers.registry import resolve_options

    downpour = get_solver("downpour")
    assert resolve_options(downpour, DownpourOptions(batch_size=64), {"replicas": 3}).n_replicas == 3
    assert resolve_options(downpour, {"param_shards": 4}, {"replicas": 3}).n_param_shards == 4
    config = validate_train({"solver": "easgd", "tau": None, "optimizer": None})["options"]
    assert (config.tau, config.optimizer) == (10, "sgd")
    with pytest.raises(UnknownOptionError, match=r"sandblaster does not take option 1"):
        validate_train({1: 2})


def test_front_ends_drop_eval_every_without_held_out_data() -> None:
    from dasklbfgs.solvers.common_options import without_held_out

    options = DownpourOptions(eval_every=50)
    assert without_held_out(options, None).eval_every is None
    assert without_held_out(options, "test.zarr").eval_every == 50
    assert without_held_out(SandblasterOptions(), None).eval_every is None


@pytest.mark.parametrize("name", ["sync", "easgd", "gossip", "neighbours"])
def test_the_peers_refuse_a_model_with_l1_even_with_ftrl(name) -> None:
    """Checked before any data or cluster is touched; the message names every run that takes l1."""
    from dasklbfgs.models import Logistic

    with pytest.raises(ConfigurationError, match=rf"solver '{name}' does not minimise an l1 penalty, and "
                       r"Logistic\(.*\) "
                       r"has one; train it with another solver or set l1=0 \(l1 is minimised by solver 'sandblaster', "
                       r"'newton' or 'downpour' with optimizer='ftrl'\)"):
        minimize(Logistic(3, l1=0.1), "no-data-needed", name, optimizer="ftrl")
