"""The cluster flags every command that trains shares, connecting from them, and what a
command prints so that its run can be watched (the dashboard's address, ``--keep-open``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from dasklbfgs.cli.interrupt import Interrupt, InterruptedAtStart, start_remembering_ctrl_c
from dasklbfgs.errors import ConfigurationError

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["add_cluster_arguments", "add_embedded_cluster_arguments", "check_cluster_arguments", "closing",
           "cluster_from_args", "dashboard_line", "dashboard_link", "dashboard_text", "embedded_dashboard_address",
           "keep_open", "started_client", "wait_for_ctrl_c"]


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="use a running Dask scheduler (default: $DASKLBFGS_SCHEDULER, "
                            "else an embedded LocalCluster)")
    where.add_argument("--scheduler-file", metavar="FILE",
                       help="scheduler file of a running cluster, such as the one 'dasklbfgs cluster start' "
                            "writes (default: as --scheduler)")
    add_embedded_cluster_arguments(group)
    group.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a running scheduler")
    group.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate of a TLS cluster (default: no TLS)")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate for a TLS cluster (default: no TLS)")
    group.add_argument("--tls-key", metavar="PEM", help="client private key for a TLS cluster (default: no TLS)")


def add_embedded_cluster_arguments(group: argparse._ActionsContainer) -> None:
    """``--workers``, ``--dashboard-address`` and ``--keep-open``: the shape of an embedded
    cluster, and whether it outlives the run."""
    from dasklbfgs.cluster import DASHBOARD_ADDRESS

    group.add_argument("--workers", type=int, default=None,
                       help="workers of the embedded cluster (default: one per core)")
    group.add_argument("--dashboard-address", metavar="HOST:PORT", default=None,
                       help="where the embedded cluster's dashboard listens (port 0: any free port; :8787: every "
                            f"interface) (default: {DASHBOARD_ADDRESS}, another port if that one is busy)")
    group.add_argument("--keep-open", action="store_true",
                       help="after the run, keep the embedded cluster and its dashboard up until Ctrl-C")


def check_cluster_arguments(args: argparse.Namespace) -> None:
    """The flags of an embedded cluster make sense: a well-formed ``--dashboard-address``, and
    neither it nor ``--keep-open`` for a run that joins a running scheduler (which has its own
    dashboard and stays up on its own). A :class:`~dasklbfgs.errors.ConfigurationError` naming
    the flag otherwise; checked before anything starts."""
    from dasklbfgs.cluster import SCHEDULER_ENV, check_dashboard_address

    joined = _running_scheduler(args, os.environ.get(SCHEDULER_ENV))
    if args.dashboard_address is not None:
        if joined:
            raise ConfigurationError(f"--dashboard-address sets the embedded cluster's dashboard, but this run joins "
                                     f"{joined}, whose dashboard is set where it was started; drop "
                                     "--dashboard-address")
        check_dashboard_address(args.dashboard_address)
    if args.keep_open and joined:
        raise ConfigurationError(f"--keep-open keeps the embedded cluster up after the run, but this run joins "
                                 f"{joined}, which stays up on its own; drop --keep-open")


def _running_scheduler(args: argparse.Namespace, from_env: str | None) -> str | None:
    """The running scheduler the flags (or the environment) name, as a message names it."""
    if getattr(args, "scheduler", None):
        return f"the scheduler at --scheduler {args.scheduler!r}"
    if getattr(args, "scheduler_file", None):
        return f"the scheduler in --scheduler-file {args.scheduler_file!r}"
    return f"the scheduler of $DASKLBFGS_SCHEDULER ({from_env!r})" if from_env else None


def embedded_dashboard_address(args: argparse.Namespace) -> str:
    """Where the embedded cluster's dashboard listens: ``--dashboard-address``, else the default."""
    from dasklbfgs.cluster import DASHBOARD_ADDRESS

    return args.dashboard_address or DASHBOARD_ADDRESS


@contextlib.contextmanager
def cluster_from_args(args: argparse.Namespace, interrupt: Interrupt | None = None) -> Iterator[Client]:
    """The client the flags name, closed on leaving (see :func:`closing`); an embedded
    cluster's workers never see Ctrl-C, and one pressed while it starts stops the command
    once it is up (:func:`started_client`)."""
    from dasklbfgs.cluster import connect

    check_cluster_arguments(args)
    security = None
    if args.tls_ca_file or args.tls_cert or args.tls_key:
        from distributed.security import Security

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)

    def start() -> Client:
        return connect(args.scheduler, scheduler_file=args.scheduler_file, n_workers=args.workers,
                       timeout=args.timeout, security=security, dashboard_address=embedded_dashboard_address(args))

    with started_client(start, interrupt) as client:
        yield client


@contextlib.contextmanager
def started_client(start: Callable[[], Client], interrupt: Interrupt | None = None) -> Iterator[Client]:
    """The client ``start()`` returns, its embedded cluster's workers shielded from Ctrl-C
    (:func:`~dasklbfgs.cli.interrupt.start_remembering_ctrl_c`), closed on leaving (see :func:`closing`).
    With ``interrupt``, a Ctrl-C pressed during the start is said at once, and once the
    cluster is up it is closed and :class:`~dasklbfgs.cli.interrupt.InterruptedAtStart` raised:
    the command stops (exit 130) before anything trains."""
    client = start_remembering_ctrl_c(start, interrupt)
    with closing(client, interrupt):
        if interrupt is not None and interrupt.requested:
            raise InterruptedAtStart("Ctrl-C while the cluster started: stopped before the run began")
        yield client


@contextlib.contextmanager
def closing(client: Client, interrupt: Interrupt | None = None) -> Iterator[Client]:
    """``client``, closed on leaving; with ``interrupt``, quietly after a Ctrl-C (see
    :mod:`dasklbfgs.cli.interrupt`)."""
    try:
        yield client
    finally:
        with interrupt.quiet_shutdown(client.cluster) if interrupt is not None else contextlib.nullcontext():
            client.close()


def dashboard_link(client: Client) -> str | None:
    """The dashboard's address, None when the scheduler serves none."""
    return client.dashboard_link if client.scheduler_info().get("services", {}).get("dashboard") else None


def dashboard_line(client: Client) -> str:
    """``dashboard  URL (training curves: URL/training)``, for the cluster ``client`` is on."""
    link = dashboard_link(client)
    return dashboard_text(link, link is not None and _serves_training_page(client))


def dashboard_text(link: str | None, training_page: bool = True) -> str:
    """The dashboard line of a dashboard at ``link`` (None: none), with the address of its
    Training page, or what it takes to have one."""
    from dasklbfgs.monitor.route import training_url

    if not link:
        return "dashboard  (not running)"
    if not training_page:
        return f"dashboard  {link} (no Training page: start the scheduler with --preload dasklbfgs.monitor.dashboard)"
    return f"dashboard  {link} (training curves: {training_url(link)})"


def _serves_training_page(client: Client) -> bool:
    """Whether the scheduler serves the Training page; True when it cannot be asked (a
    scheduler that refuses functions from clients)."""
    from dasklbfgs.monitor.route import served

    try:
        return bool(client.run_on_scheduler(served))
    except Exception:  # noqa: BLE001 - only a hint in a printed line: show the page's address
        return True


def keep_open(client: Client, interrupt: Interrupt, stream: TextIO | None = None) -> None:
    """``--keep-open``: say where the dashboard is and how to stop, then wait for Ctrl-C, so
    that the printed address keeps working after the run."""
    link = dashboard_link(client)
    print(f"dashboard open at {link}; Ctrl-C to stop" if link else "cluster open (no dashboard); Ctrl-C to stop",
          file=stream if stream is not None else sys.stdout, flush=True)
    wait_for_ctrl_c(interrupt)


def wait_for_ctrl_c(interrupt: Interrupt) -> None:
    while not interrupt.requested:
        time.sleep(0.2)
