"""The command's parser: every option's help shows its default; a mistyped flag gets a
suggestion; the exit codes are in ``dasklbfgs --help``."""

from __future__ import annotations

import argparse

import pytest

from dasklbfgs.cli.main import build_parser
from dasklbfgs.cli.parser import DefaultsFormatter


def every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_every_option_says_what_it_does_and_its_default() -> None:
    parsers = list(every_parser(build_parser()))
    assert {p.prog for p in parsers} >= {"dasklbfgs train", "dasklbfgs demo", "dasklbfgs run",
                                         "dasklbfgs data make", "dasklbfgs info"}
    checked = 0
    for parser in parsers:
        formatter = DefaultsFormatter(parser.prog)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{parser.prog} {action.option_strings or action.dest} has no help"
            if action.option_strings and action.nargs != 0 and not action.required:  # takes a value
                text = formatter._get_help_string(action) % {"default": action.default}
                assert "default" in text.lower(), f"{parser.prog} {action.option_strings[0]}: {text}"
                checked += 1
    assert checked > 60  # the solvers', models', recipes' and cluster flags among them


def test_the_help_lists_the_exit_codes() -> None:
    text = build_parser().format_help()
    for line in ("0    the run succeeded: it converged (Sandblaster), or ran its epochs and lowered",
                 "1    the run ended without success", "2    bad usage or input",
                 "130  interrupted by Ctrl-C", "141  the output was closed early"):
        assert line in text


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--data", "d", "--maxiterr", "3"], "unrecognized argument --maxiterr; did you mean --maxiter?"),
    (["train", "--data", "d", "--learnig-rate=0.1"], "did you mean --learning-rate?"),
    (["demo", "--keep-opne"], "dasklbfgs demo: error: unrecognized argument --keep-opne; did you mean --keep-open?"),
    (["data", "make", "logistic", "p", "--rwos", "3"], "did you mean --rows?"),
    (["train", "--data", "d", "--zzzzzz"], "unrecognized argument --zzzzzz; 'dasklbfgs train --help' lists"),
    (["train", "--data", "d", "--maxitr", "3"], "dasklbfgs train: error: unrecognized argument --maxitr; did you mean "
                                                "--maxiter?"),
    # a guess only when close: --ftol shares two letters with --foo
    (["train", "--data", "d", "--foo"], "dasklbfgs train: error: unrecognized argument --foo; 'dasklbfgs train --help' "
                                        "lists the options"),
    (["trian", "--data", "d"], "dasklbfgs: error: unknown command 'trian'; did you mean 'train'?"),
    (["xyz"], "dasklbfgs: error: unknown command 'xyz'; 'dasklbfgs --help' lists the commands"),
    (["data", "mak", "logistic", "p"], "dasklbfgs data: error: unknown command 'mak'; did you mean 'make'?"),
    (["train", "--data", "d", "--solver", "sandblastr"],
     "dasklbfgs train: error: argument --solver: invalid choice: 'sandblastr'; did you mean 'sandblaster'? "
     "(choose from 'sandblaster', 'newton', 'downpour', 'sync', 'easgd', 'gossip', 'neighbours')"),
])
def test_an_unknown_flag_is_one_line_with_the_closest_flag(capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    if message.startswith("dasklbfgs"):  # the whole line
        assert err == message + "\n"


def test_a_run_is_named_by_train_name_and_a_pipelines_name_key() -> None:
    from dasklbfgs.cli.solver_flags import options_from_args
    from dasklbfgs.errors import ConfigurationError
    from dasklbfgs.pipeline.config import validate_train

    args = build_parser().parse_args(["train", "--data", "d", "--solver", "downpour", "--name", "sgd-fast"])
    assert options_from_args(args, "downpour").name == "sgd-fast"
    args = build_parser().parse_args(["train", "--data", "d", "--name", ""])
    with pytest.raises(ConfigurationError, match="sandblaster option name must be a non-empty string or None, got ''"):
        options_from_args(args, "sandblaster")
    assert validate_train({"solver": "sync", "name": "peer run"})["options"].name == "peer run"
    with pytest.raises(ConfigurationError, match=r"train: sync option name must be a non-empty string or None, got 7"):
        validate_train({"solver": "sync", "name": 7})


def test_train_help_has_a_short_usage_and_examples_that_parse() -> None:
    from dasklbfgs.cli.train import EXAMPLES

    parser = build_parser()
    text = next(p for p in every_parser(parser) if p.prog == "dasklbfgs train").format_help()
    assert text.startswith("usage: dasklbfgs train --data PATH [options]\n\n")
    assert text.endswith(EXAMPLES + "\n")
    examples = [line.split(maxsplit=1)[1] for line in EXAMPLES.splitlines()[1:]]
    assert len(examples) == 4 and examples[1].startswith("train --data")
    for example in examples:  # real commands: every flag known, every value valid
        assert parser.parse_args(example.split()).func
