"""``dasklbfgs cluster start``: a local cluster that runs join, so that they accumulate on
one Training page (a run's embedded cluster ends with it, and its page with it).

The cluster runs in the foreground: a ``LocalCluster`` (a scheduler in this process, worker
processes beside it) on 127.0.0.1, as a run's embedded cluster but keeping many runs'
events, until Ctrl-C or SIGTERM. The scheduler file it writes once its workers are up
(and removes when it stops) is what the runs pass as ``--scheduler-file``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

from dasklbfgs.cli.cluster_args import dashboard_text, wait_for_ctrl_c
from dasklbfgs.cli.interrupt import Interrupt, shielded_start
from dasklbfgs.errors import ConfigurationError

__all__ = ["add_parser", "DEFAULT_SCHEDULER_FILE"]

DEFAULT_SCHEDULER_FILE = "dasklbfgs-cluster.json"


def add_parser(sub: Any) -> None:
    from dasklbfgs.cluster import DASHBOARD_ADDRESS

    cluster = sub.add_parser("cluster", help="a long-lived local cluster that runs join (one Training page for all)")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    start = cluster_sub.add_parser(
        "start", help="start a local cluster and serve it in the foreground until Ctrl-C",
        description="Start a Dask scheduler and worker processes on 127.0.0.1, with the dashboard's Training page, "
                    "write a scheduler file and serve until Ctrl-C (or SIGTERM), which stops the workers and removes "
                    "the file. Runs join it with 'dasklbfgs train --scheduler-file FILE' (run, evaluate and predict "
                    "too; connect(scheduler_file=FILE) from Python): the page lists them all, and 'compare with' "
                    "spans them.")
    start.add_argument("--workers", type=int, default=None,
                       help="worker processes, one thread each (default: one per core)")
    start.add_argument("--dashboard-address", metavar="HOST:PORT", default=DASHBOARD_ADDRESS,
                       help="where the dashboard listens (port 0: any free port; :8787: every interface; a busy "
                            "port: another one)")
    start.add_argument("--scheduler-file", metavar="FILE", default=DEFAULT_SCHEDULER_FILE,
                       help="the scheduler file to write, for the runs to join with (default: ./%(default)s)")
    start.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from dasklbfgs.cluster import SCHEDULER_ENV, local_cluster

    path = Path(args.scheduler_file).absolute()
    _check_can_write(path)
    with Interrupt(signals=(signal.SIGINT, signal.SIGTERM)) as interrupt:
        with shielded_start():  # the workers leave Ctrl-C to this process, which stops them in order
            cluster = local_cluster(n_workers=args.workers, dashboard_address=args.dashboard_address)
        try:
            _write_scheduler_file(path, cluster.scheduler.identity(n_workers=0))
            n_workers = len(cluster.workers)
            print(f"cluster    {cluster.scheduler_address} (LocalCluster, {n_workers} worker"
                  f"{'' if n_workers == 1 else 's'} x 1 thread)")
            print(dashboard_text(cluster.dashboard_link))
            print(f"join with  --scheduler-file {path}  (or: export {SCHEDULER_ENV}={path})")
            print("running until Ctrl-C", flush=True)
            wait_for_ctrl_c(interrupt)
        finally:
            with interrupt.quiet_shutdown(cluster):
                cluster.close()
            path.unlink(missing_ok=True)
    return 0


def _check_can_write(path: Path) -> None:
    """The scheduler file can be written at ``path``: its folder exists, and no file is there
    but one left by a cluster that no longer runs (never another cluster's, nor a file that
    is not a scheduler file)."""
    if not path.parent.is_dir():
        raise ConfigurationError(f"--scheduler-file {str(path)!r}: the folder {str(path.parent)!r} does not exist")
    if not path.exists():
        return
    try:
        address = json.loads(path.read_text())["address"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigurationError(f"--scheduler-file {str(path)!r} exists and is not a scheduler file; choose "
                                 "another --scheduler-file") from None
    if _answers(address):
        raise ConfigurationError(f"--scheduler-file {str(path)!r}: a cluster runs there already (its scheduler at "
                                 f"{address}); join it with --scheduler-file {path}, or stop it before starting "
                                 "another")


def _answers(address: str) -> bool:
    """Whether something listens at a scheduler's ``address``."""
    from distributed.comm import get_address_host_port

    try:
        with socket.create_connection(get_address_host_port(address), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def _write_scheduler_file(path: Path, identity: dict[str, Any]) -> None:
    """Write the file in one step: a run that finds it finds the cluster's workers up."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.writing")
    try:
        partial.write_text(json.dumps(identity, indent=2))
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
