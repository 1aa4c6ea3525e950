"""``dasklbfgs path``: a linear model fitted along a regularization path on the cluster,
its penalty chosen on held-out rows, saved as a model with the whole path beside it."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from dasklbfgs.cli.cluster_args import add_cluster_arguments, check_cluster_arguments, cluster_from_args
from dasklbfgs.cli.format import json_text
from dasklbfgs.cli.interrupt import EXIT_INTERRUPTED, INTERRUPTED, Interrupt
from dasklbfgs.cli.solver_flags import add_option_flags, given_options
from dasklbfgs.cli.storage_args import add_storage_arguments, storage_options_from_args
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, OutputExistsError

__all__ = ["EXAMPLES", "add_parser"]

EXAMPLES = """\
examples:
  dasklbfgs path --data data/ctr/train --test data/ctr/test --l1 1 --n-alphas 30 --output ctr-path.npz
  dasklbfgs path --data data/mn/train --test data/mn/test --model softmax --l2-values 1e-2,1e-3,1e-4
  dasklbfgs predict --params ctr-path.npz --data data/ctr/test --output scores.zarr   # the chosen penalty"""


def add_parser(sub: Any) -> None:
    from dasklbfgs.models.registry import LINEAR, ModelOptions
    from dasklbfgs.selection.options import PathOptions
    from dasklbfgs.solvers.sandblaster import SandblasterOptions

    path = sub.add_parser(
        "path", help="fit a linear model along a regularization path (l1 or l2), choose on held-out rows",
        usage="%(prog)s --data PATH [options]", epilog=EXAMPLES,
        description="Fit a linear model at a sequence of penalties with Sandblaster L-BFGS (OWL-QN with l1), "
                    "strongest first, each fit warm started from the last, all on the shards cached once. Without "
                    "--l1-values or --l2-values the model's own penalty (--l1, else --l2) runs over --n-alphas "
                    "values from the one that zeroes every coefficient (an l2 path: 1000 times the l1 one) down to "
                    "--eps times it. With --test each "
                    "fit is scored there and the best held-out log-loss (RMSE for a regression) is the model "
                    "saved; without, the last fit. The .npz holds the whole path beside it.")
    path.add_argument("--data", required=True, help="training dataset (a ShardedDataset's path or URL)")
    path.add_argument("--test", help="held-out dataset each fit is scored on (default: none)")
    path.add_argument("--cv", type=int, metavar="K",
                      help="choose the penalty by K-fold cross-validation on --data instead (scikit-learn's "
                           "StratifiedKFold for classifiers, else KFold, rows in order): the path on each fold, the "
                           "best mean held-out loss refitted on every row (--test, if given, then scores the refit) "
                           "(default: none: chosen on --test, else the last fit)")
    add_storage_arguments(path)
    path.add_argument("--model", choices=LINEAR, default=None,
                      help="the model (default: what the dataset's recorded task implies)")
    add_option_flags(path.add_argument_group("model options"), ModelOptions)
    add_option_flags(path.add_argument_group("path options"), PathOptions)
    add_option_flags(path.add_argument_group("solver options (Sandblaster L-BFGS, each fit)"), SandblasterOptions)
    path.add_argument("--output", default="dasklbfgs-path.npz",
                      help="where to save the chosen model and the path as one .npz file: a local path or a URL "
                           "(default dasklbfgs-path.npz)")
    path.add_argument("--overwrite", action="store_true", help="replace an existing --output file or object")
    path.add_argument("--json", action="store_true", help="print the report as JSON")
    add_cluster_arguments(path)
    path.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.models import model_for_dataset
    from dasklbfgs.models.linear import LinearModel
    from dasklbfgs.models.persist import save_params
    from dasklbfgs.models.registry import LINEAR, ModelOptions, default_model
    from dasklbfgs.selection.chosen import choose_penalty
    from dasklbfgs.selection.options import PathOptions
    from dasklbfgs.selection.path import PathPlan
    from dasklbfgs.solvers.sandblaster import SandblasterOptions

    check_cluster_arguments(args)
    output = Location.of(args.output, storage_options_from_args(args, args.output))
    if output.exists() and not args.overwrite:
        raise OutputExistsError(f"--output {args.output!r} exists; pass --overwrite to replace it or choose "
                                "another --output")
    data = ShardedDataset.open(args.data, storage_options_from_args(args, args.data))
    test = ShardedDataset.open(args.test, storage_options_from_args(args, args.test)) if args.test else None
    name = args.model or default_model(data)
    if name not in LINEAR:
        raise ConfigurationError(f"a regularization path fits a linear model ({', '.join(LINEAR)}); the dataset "
                                 f"{data.url!r} implies {name!r}: pass --model")
    model = model_for_dataset(name, data, **given_options(args, ModelOptions.fields()))
    assert isinstance(model, LinearModel), f"{name} is one of LINEAR"
    plan = PathPlan.checked(model, PathOptions.from_mapping(given_options(args, PathOptions.fields())),
                            given_options(args, SandblasterOptions.fields()))  # bad values fail before a cluster
    if args.cv is not None and args.cv < 2:
        raise ConfigurationError(f"--cv must be an integer number of folds >= 2, got {args.cv}")
    # Ctrl-C ends the fit under way: a path then ends with the fits it reached, chosen among and saved;
    # cross-validation, which has no choice to make without every fold, stops at once, saving nothing
    interrupt = Interrupt() if args.cv is None else None
    with interrupt or contextlib.nullcontext(), cluster_from_args(args, interrupt) as client:
        for dataset in (data, test) if test is not None else (data,):
            dataset.check_workers_can_read(client)
        chosen = choose_penalty(plan, data, test=test, cv=args.cv, client=client,
                                callback=None if interrupt is None else interrupt.check)
    save_params(output, chosen.model, chosen.params, chosen.report, arrays=chosen.arrays)
    report = {**chosen.report, "output": output.url}
    print(json_text(report) if args.json else _text(report))
    if report.get("stopped") == INTERRUPTED:
        print(f"interrupted after {len(report['fits'])} of the path's penalties; the best of them saved to "
              f"{args.output}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.json:
        print(f"saved      {args.output}")
    return 0 if chosen.success else 1


def _text(report: dict[str, Any]) -> str:
    fits = report["fits"]
    start = "as given"
    if report["alpha_max"] is not None:
        start = ("from the one that zeroes every coefficient" if report["penalty"] == "l1" else
                 f"from 1000 x {report['alpha_max']:.4g}, the l1 penalty that would zero every coefficient")
    lines = [f"model      {report['model']}",
             f"path       {len(fits)} {report['penalty']} penalties {start}, "
             f"{sum(f['iterations'] for f in fits)} iterations, {report['seconds']:.1f} s",
             f"{'':<10} {'alpha':>11} {'l1':>11} {'l2':>11} {'non-zero':>9} {'iterations':>10} {'objective':>12}"
             + (f" {'held-out ' + report['chosen_by']:>20}" if report["chosen_by"] else "")]
    for i, fit in enumerate(fits):
        mark = "chosen ->" if i == report["chosen"] else ""
        lines.append(f"{mark:<10} {fit['alpha']:>11.4g} {fit['l1']:>11.4g} {fit['l2']:>11.4g} {fit['n_nonzero']:>9.4g} "
                     f"{fit['iterations']:>10} {fit['objective']:>12.6g}"
                     + (f" {fit['held_out']:>20.6g}" if "held_out" in fit else "")
                     + ("" if fit["success"] else "  (did not converge)"))
    how = (f"the best held-out {report['chosen_by']}" if report["chosen_by"]
           else "the last fit (no --test to choose on)")
    lines.append(f"chosen     alpha {fits[report['chosen']]['alpha']:.4g}: {how}")
    if "refit" in report:
        lines.append(f"refit      on every row: {report['refit']['iterations']} iterations, objective "
                     f"{report['refit']['objective']:.6g}")
    if isinstance(report.get("test"), dict):
        found = report["test"]
        lines.append(f"test       {found['n_samples']} rows: " + ", ".join(
            f"{key} {found[key]:.6g}" for key in ("log_loss", "accuracy", "rmse", "r2") if key in found))
    return "\n".join(lines)
