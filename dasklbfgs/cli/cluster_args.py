"""The cluster flags every command that trains shares, and connecting from them."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dasklbfgs.cli.interrupt import Interrupt, shielded_start

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["add_cluster_arguments", "closing", "cluster_from_args", "dashboard_line", "dashboard_link"]


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="use a running Dask scheduler (default: $DASKLBFGS_SCHEDULER, "
                            "else an embedded LocalCluster)")
    where.add_argument("--scheduler-file", metavar="FILE",
                       help="scheduler file of a running cluster (default: as --scheduler)")
    group.add_argument("--workers", type=int, default=None,
                       help="workers of the embedded cluster (default: one per core)")
    group.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a running scheduler")
    group.add_argument("--tls-ca-file", metavar="PEM", help="CA certificate of a TLS cluster (default: no TLS)")
    group.add_argument("--tls-cert", metavar="PEM", help="client certificate for a TLS cluster (default: no TLS)")
    group.add_argument("--tls-key", metavar="PEM", help="client private key for a TLS cluster (default: no TLS)")


@contextlib.contextmanager
def cluster_from_args(args: argparse.Namespace, interrupt: Interrupt | None = None) -> Iterator[Client]:
    """The client the flags name, closed on leaving (see :func:`closing`); an embedded
    cluster's workers ignore Ctrl-C (:func:`~dasklbfgs.cli.interrupt.shielded_start`)."""
    from dasklbfgs.cluster import connect

    security = None
    if args.tls_ca_file or args.tls_cert or args.tls_key:
        from distributed.security import Security

        security = Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                            tls_client_key=args.tls_key, require_encryption=True)
    with shielded_start():
        client = connect(args.scheduler, scheduler_file=args.scheduler_file, n_workers=args.workers,
                         timeout=args.timeout, security=security)
    with closing(client, interrupt):
        yield client


@contextlib.contextmanager
def closing(client: Client, interrupt: Interrupt | None = None) -> Iterator[Client]:
    """``client``, closed on leaving; with ``interrupt``, quietly after a Ctrl-C (see
    :mod:`dasklbfgs.cli.interrupt`)."""
    try:
        yield client
    finally:
        with interrupt.quiet_shutdown() if interrupt is not None else contextlib.nullcontext():
            client.close()


def dashboard_link(client: Client) -> str | None:
    """The dashboard's address, None when the scheduler serves none."""
    return client.dashboard_link if client.scheduler_info().get("services", {}).get("dashboard") else None


def dashboard_line(client: Client) -> str:
    link = dashboard_link(client)
    if not link:
        return "dashboard  (not running)"
    return f"dashboard  {link} (training curves: {link.rsplit('/', 1)[0]}/training)"
