"""``dasklbfgs train`` and ``dasklbfgs demo``: every solver from the command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distributed import Client

PEER_SOLVERS = ("sync", "easgd", "gossip", "neighbours")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="use a running Dask scheduler (default: $DASKLBFGS_SCHEDULER, "
                            "else an embedded LocalCluster)")
    where.add_argument("--scheduler-file", metavar="FILE", help="scheduler file of a running cluster")
    group.add_argument("--workers", type=int, default=None,
                       help="workers of the embedded cluster (default: one per core)")
    group.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for a running scheduler (default 30)")
    group.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate of a TLS cluster")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate for a TLS cluster")
    group.add_argument("--tls-key", metavar="PEM", help="client private key for a TLS cluster")


@contextlib.contextmanager
def cluster_from_args(args: argparse.Namespace) -> Iterator[Client]:
    from dasklbfgs.cluster import connect

    security = None
    if args.tls_ca_file or args.tls_cert or args.tls_key:
        from distributed.security import Security

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)
    client = connect(args.scheduler, scheduler_file=args.scheduler_file, n_workers=args.workers,
                     timeout=args.timeout, security=security)
    try:
        yield client
    finally:
        client.close()


def dashboard_line(client: Client) -> str:
    link = client.dashboard_link if client.scheduler_info().get("services", {}).get("dashboard") else None
    if not link:
        return "dashboard  (not running)"
    return f"dashboard  {link} (training curves: {link.rsplit('/', 1)[0]}/training)"


def _train(client: Client, args: argparse.Namespace, train_path: Path, *, eval_data: Any = None
           ) -> tuple[Any, Any, Any]:
    """Build the model for the dataset and run the chosen solver with the command's options."""
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.models import model_for_dataset
    from dasklbfgs.models.registry import model_options
    from dasklbfgs.monitor.progress import Progress

    data = ShardedDataset.open(train_path)
    model = model_for_dataset(args.model, data, l2=args.l2, fit_intercept=not args.no_intercept,
                              **model_options(vars(args)))
    quiet = getattr(args, "quiet", False) or getattr(args, "json", False)
    if args.solver != "sandblaster":
        progress = Progress(args.max_steps, args.solver, enabled=False if quiet else None)

        def show(entry):
            progress.update(entry.step, **{k: getattr(entry, k) for k in ("train_loss", "eval_accuracy") if k in entry})
    else:
        progress = Progress(args.maxiter, "sandblaster", enabled=False if quiet else None)

        def show(intermediate):
            progress.update(intermediate.nit, objective=intermediate.fun)
    try:
        result = _solve(client, args, model, data, eval_data, show)
    finally:
        progress.close()
    return model, data, result


def _solve(client: Client, args: argparse.Namespace, model: Any, data: Any, eval_data: Any, show: Any) -> Any:
    if args.solver == "downpour":
        from dasklbfgs.downpour import downpour_sgd

        return downpour_sgd(
            model, data, client=client, n_replicas=args.replicas, n_param_shards=args.param_shards,
            batch_size=args.batch_size, n_fetch=args.n_fetch, n_push=args.n_push,
            learning_rate=args.learning_rate, optimizer=args.optimizer or "adagrad", epochs=args.epochs,
            max_steps=args.max_steps, warmstart_steps=args.warmstart_steps, seed=args.seed,
            eval_data=eval_data, eval_every=args.eval_every if eval_data is not None else None,
            defer_eval=args.defer_eval, checkpoint_path=args.checkpoint, checkpoint_every=args.checkpoint_every,
            resume=args.resume, overlap=args.overlap, callback=show,
        )
    if args.solver in PEER_SOLVERS:
        from dasklbfgs.solvers.peers.coordinator import run_peer_method

        return run_peer_method(
            args.solver, model, data, client=client, n_replicas=args.replicas, batch_size=args.batch_size,
            learning_rate=args.learning_rate, optimizer=args.optimizer, epochs=args.epochs,
            max_steps=args.max_steps, seed=args.seed, eval_data=eval_data,
            eval_every=args.eval_every if eval_data is not None else None, defer_eval=args.defer_eval,
            callback=show, tau=args.tau, alpha=args.alpha, rho=args.rho, n_param_shards=args.param_shards,
            push_sum=args.push_sum, topology=args.topology, torus_shape=args.torus_shape,
        )
    from dasklbfgs.sandblaster import sandblaster_lbfgs

    return sandblaster_lbfgs(model, data, client=client, maxiter=args.maxiter, gtol=args.gtol,
                             standardize=args.standardize, backup_tasks=not args.no_backup_tasks,
                             eval_data=eval_data, eval_every=getattr(args, "eval_every", None) or 1, callback=show,
                             # (`dasklbfgs demo` has none of these options)
                             state=getattr(args, "state", "local"), n_param_shards=getattr(args, "param_shards", 2),
                             checkpoint_path=getattr(args, "checkpoint", None),
                             checkpoint_every=getattr(args, "checkpoint_every", None) or 1,
                             resume=getattr(args, "resume", False))


def _report(model: Any, result: Any, data: Any, test: Any) -> dict[str, Any]:
    from dasklbfgs.models.metrics import evaluate_model

    report: dict[str, Any] = {
        "model": repr(model),
        "n_params": model.n_params,
        "success": bool(result.success),
        "message": result.message,
        "train": evaluate_model(model, result.x, data),
    }
    if "timing" in result:  # Sandblaster
        report.update({
            "solver": "sandblaster",
            "objective": result.fun,
            "iterations": result.nit,
            "evaluations": result.nfev,
            "seconds": result.timing["total_seconds"],
            "seconds_per_evaluation": result.timing["eval_seconds_median"],
            "backup_tasks": {"launched": result.timing["backups_launched"],
                             "won": result.timing["backups_won"]},
        })
    else:  # Downpour and the peer methods
        stats = result.stats
        report.update({
            "solver": stats.get("method", "downpour"),
            "objective": report["train"]["objective"],
            "steps": result.nit,
            "seconds": stats["wall_seconds"],
            "updates_per_second": stats["updates_per_second"],
            "examples_per_second": stats["examples_per_second"],
            "steps_per_replica": stats["steps_per_replica"],
        })
        if "staleness" in stats:
            report["staleness"] = stats["staleness"]
        else:
            report["between_replicas"] = {"messages": stats["messages_between_replicas"],
                                          "bytes": stats["bytes_between_replicas"],
                                          "center_exchanges": stats["center_exchanges"]}
            if stats["chosen_replica"] is not None:
                report["chosen_replica"] = stats["chosen_replica"]
    if test is not None:
        report["test"] = evaluate_model(model, result.x, test)
    return report


def _format_report(report: dict[str, Any]) -> str:
    lines = [
        f"model      {report['model']} ({report['n_params']} parameters)",
        f"objective  {report['objective']:.10g}",
        f"stopped    {report['message']} (success={report['success']})",
    ]
    if report["solver"] == "sandblaster":
        lines += [
            f"work       {report['iterations']} iterations, {report['evaluations']} evaluations, "
            f"{report['seconds']:.2f} s ({1e3 * report['seconds_per_evaluation']:.1f} ms per evaluation)",
            f"backups    {report['backup_tasks']['launched']} launched, {report['backup_tasks']['won']} won",
        ]
    else:
        lines += [
            f"work       {report['steps']} steps over replicas {report['steps_per_replica']} in "
            f"{report['seconds']:.2f} s ({report['updates_per_second']:.0f} updates/s, "
            f"{report['examples_per_second']:.0f} examples/s)",
        ]
        if "staleness" in report:
            lines.append(f"staleness  {report['staleness']} (pushes by how many updates they lagged)")
        else:
            between = report["between_replicas"]
            lines.append(f"exchange   {between['messages']} messages, {between['bytes'] / 1e6:.1f} MB between "
                         f"replicas; {between['center_exchanges']} center exchanges")
        if "chosen_replica" in report:
            lines.append(f"returned   replica {report['chosen_replica']} (best held-out objective, else recent loss)")
    for split in ("train", "test"):
        if split in report:
            m = report[split]
            score = (f"accuracy {m['accuracy']:.4f}" if "accuracy" in m
                     else f"rmse {m['rmse']:.4g}, r2 {m['r2']:.4f}")
            lines.append(f"{split:<10} {m['n_samples']} rows: {score}, objective {m['objective']:.6g}")
    return "\n".join(lines)


def _cmd_train(args: argparse.Namespace) -> int:
    from dasklbfgs.data import ShardedDataset
    from dasklbfgs.models.persist import save_params

    with cluster_from_args(args) as client:
        test = ShardedDataset.open(args.test) if args.test else None
        model, data, result = _train(client, args, Path(args.data), eval_data=test)
        report = _report(model, result, data, test)
        report["dataset"] = str(data.path)
        save_params(args.output, model, result.x, report)
        report["output"] = str(args.output)
        if args.json:
            print(json.dumps(report, indent=2, default=float))
        else:
            print(_format_report(report))
            print(f"saved      {args.output}")
    return 0 if result.success else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from dasklbfgs.cluster import connect
    from dasklbfgs.data import make_dataset

    with contextlib.ExitStack() as stack:
        folder = Path(args.keep) if args.keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        started = time.perf_counter()
        splits = make_dataset(
            "logistic", folder / "demo-data", rows=args.rows, features=args.features,
            shard_rows=args.shard_rows, seed=0, ill_conditioned=True, overwrite=True,
        )
        train = splits["train"]
        print(f"data       {train.n_samples} x {train.n_features} logistic rows "
              f"(features scaled over 4 decades) in {train.n_shards} Zarr shard{'' if train.n_shards == 1 else 's'}, "
              f"{splits['test'].n_samples} held out; written in {time.perf_counter() - started:.1f} s")
        client = connect(n_workers=args.workers, dashboard_address=args.dashboard_address)
        stack.callback(client.close)
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        print(f"cluster    embedded LocalCluster, {n_workers} workers x 1 thread")
        print(dashboard_line(client))
        settings = argparse.Namespace(
            solver="sandblaster", model="logistic", l2=args.l2, no_intercept=False, standardize=True,
            maxiter=200, gtol=1e-6, no_backup_tasks=False,
        )
        model, data, result = _train(client, settings, train.path)
        print(_format_report(_report(model, result, data, splits["test"])))
        if args.keep:
            print(f"kept       {folder / 'demo-data'}")
    return 0 if result.success else 1


def _at_least(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def _widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers like 256,256, got {text!r}") from None
    return widths


def add_train_commands(sub: Any) -> None:
    from dasklbfgs.models import MODELS

    train = sub.add_parser("train", help="train a model on a sharded dataset (Sandblaster L-BFGS or Downpour SGD)")
    train.add_argument("--data", required=True, help="training dataset (a ShardedDataset path)")
    train.add_argument("--test", help="held-out dataset to score")
    train.add_argument("--model", choices=MODELS, default="logistic")
    train.add_argument("--l2", type=float, default=0.0, help="l2 penalty strength (default 0)")
    train.add_argument("--no-intercept", action="store_true")
    neural = train.add_argument_group("neural models (mlp, sparse_autoencoder, embedding_lm)")
    neural.add_argument("--hidden", type=_widths, help="hidden layer widths, e.g. 256,256 (embedding_lm: one width)")
    neural.add_argument("--activation", choices=("sigmoid", "relu", "tanh"), help="mlp hidden activation")
    neural.add_argument("--n-hidden", type=int, help="sparse_autoencoder hidden units")
    neural.add_argument("--sparsity", type=float, help="sparse_autoencoder target activation")
    neural.add_argument("--beta", type=float, help="sparse_autoencoder sparsity weight")
    neural.add_argument("--embed-dim", type=int, help="embedding_lm embedding width")
    train.add_argument("--solver", choices=("sandblaster", "downpour", *PEER_SOLVERS), default="sandblaster",
                       help="sandblaster (L-BFGS), downpour (parameter servers), or a peer method: sync "
                            "(all-reduce SGD), easgd, gossip, neighbours (ring/torus gradient exchange)")
    sandblaster = train.add_argument_group("Sandblaster L-BFGS")
    sandblaster.add_argument("--maxiter", type=int, default=100)
    sandblaster.add_argument("--gtol", type=float, default=1e-5)
    sandblaster.add_argument("--standardize", action="store_true",
                             help="optimise in standardised coordinates (same optimum, fewer iterations)")
    sandblaster.add_argument("--no-backup-tasks", action="store_true")
    sandblaster.add_argument("--state", choices=("local", "sharded"), default="local",
                             help="where the L-BFGS vectors live: in this process, or in slices on "
                                  "--param-shards actors (the coordinator keeps only scalars)")
    downpour = train.add_argument_group("Downpour SGD and the peer methods")
    downpour.add_argument("--replicas", type=int, default=2)
    downpour.add_argument("--param-shards", type=int, default=2,
                          help="parameter shards (Sandblaster: with --state sharded)")
    downpour.add_argument("--batch-size", type=int, default=128)
    downpour.add_argument("--learning-rate", type=float, default=0.1)
    downpour.add_argument("--optimizer", choices=("adagrad", "sgd", "momentum"), default=None,
                          help="update rule (default: adagrad for downpour, sgd for the peer methods)")
    downpour.add_argument("--epochs", type=int, default=1)
    downpour.add_argument("--max-steps", type=int, default=None)
    downpour.add_argument("--n-fetch", type=int, default=1)
    downpour.add_argument("--n-push", type=int, default=1)
    downpour.add_argument("--warmstart-steps", type=int, default=0)
    downpour.add_argument("--overlap", action="store_true",
                          help="keep each push in flight while computing the next gradient (+1 staleness)")
    train.add_argument("--eval-every", type=int, default=None,
                       help="score --test every N iterations (Sandblaster; default 1) or global steps (Downpour)")
    downpour.add_argument("--defer-eval", action="store_true",
                          help="keep the parameters due for --test scoring and score them after training "
                               "(scoring takes no CPU from the replicas)")
    downpour.add_argument("--checkpoint", metavar="PATH",
                          help="Zarr checkpoint: Downpour's parameter shards, or Sandblaster's L-BFGS state")
    downpour.add_argument("--checkpoint-every", type=int, default=None)
    downpour.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    downpour.add_argument("--seed", type=int, default=0)
    peers = train.add_argument_group("peer methods (sync, easgd, gossip, neighbours)")
    peers.add_argument("--tau", type=int, default=None, help="easgd: steps between elastic exchanges (default 10)")
    peers.add_argument("--alpha", type=float, default=None, help="easgd: moving rate (default 0.9 / replicas)")
    peers.add_argument("--rho", type=float, default=None, help="easgd: elastic coupling, alpha = rate * rho")
    peers.add_argument("--push-sum", action="store_true", help="gossip: push-sum instead of pull")
    peers.add_argument("--topology", choices=("ring", "torus"), default=None, help="neighbours: default ring")
    peers.add_argument("--torus-shape", type=_widths, default=None, help="neighbours: torus rows,cols")
    train.add_argument("--output", default="dasklbfgs-model.npz", help="where to save the parameters")
    train.add_argument("--json", action="store_true", help="print the report as JSON")
    train.add_argument("--quiet", action="store_true", help="no progress line (it only shows on a terminal)")
    add_cluster_arguments(train)
    train.set_defaults(func=_cmd_train)

    demo = sub.add_parser("demo", help="build a sample dataset and train on an embedded cluster")
    demo.add_argument("--rows", type=_at_least(100), default=200_000)
    demo.add_argument("--features", type=int, default=50)
    demo.add_argument("--shard-rows", type=int, default=25_000)
    demo.add_argument("--l2", type=float, default=1e-4)
    demo.add_argument("--workers", type=int, default=None)
    demo.add_argument("--dashboard-address", default="127.0.0.1:8787")
    demo.add_argument("--keep", metavar="DIR", help="keep the sample dataset under DIR")
    demo.set_defaults(func=_cmd_demo)
