"""``connect()``: a Dask client for an existing cluster or an embedded ``LocalCluster``;
``local_cluster()``: the same cluster, long-lived, for many runs to join.

An embedded cluster is started ready for a first run (:func:`prepare_embedded_clusters`): its
workers start with the worker plugins the solvers registered (Sandblaster's portion service),
importing what a portion needs while they spawn, side by side, and this process imports a
run's own modules on a thread meanwhile, so that the first ``minimize`` costs what the next
ones do beyond its shard load (``benchmarks/first_run.py``). The solvers register them (this
layer names no solver), by module and name, so that registering imports nothing: the
command line imports the solvers for their options.

Dask loads with the first client, not with this module.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import threading
from collections.abc import Iterator
from importlib import import_module
from typing import TYPE_CHECKING, Any

from dasklbfgs.data._client import active_client
from dasklbfgs.errors import ClusterConnectionError, ConfigurationError

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

__all__ = ["connect", "resolve_client", "prepare_embedded_clusters", "local_cluster", "check_dashboard_address",
           "SCHEDULER_ENV", "DASHBOARD_ADDRESS", "EVENTS_KEPT"]

SCHEDULER_ENV = "DASKLBFGS_SCHEDULER"
#: where an embedded cluster's dashboard listens unless told (loopback only; Dask takes another
#: port when this one is busy, and warns)
DASHBOARD_ADDRESS = "127.0.0.1:8787"
#: events a long-lived cluster's scheduler keeps per topic (Dask keeps 1,000): the Training page
#: lists runs from them, so that a day's runs stay on it (a run logs one event per iteration or
#: progress poll)
EVENTS_KEPT = 20_000
_DASHBOARD_ADDRESS = re.compile(r"(?:(?P<host>[A-Za-z0-9._-]*):)?(?P<port>[0-9]{1,5})")
logger = logging.getLogger(__name__)

#: ``(module, class)`` of the worker plugins an embedded cluster's workers start with.
_WORKER_PLUGINS: list[tuple[str, str]] = []
#: ``(module, function)`` this process runs on a thread while an embedded cluster starts.
_WHILE_WORKERS_START: list[tuple[str, str]] = []


def prepare_embedded_clusters(*, worker_plugin: tuple[str, str] | None = None,
                              while_workers_start: tuple[str, str] | None = None) -> None:
    """Start every embedded cluster with ``worker_plugin`` (``(module, class)``: a
    ``WorkerPlugin`` made with no arguments) on its workers, and run ``while_workers_start``
    (``(module, function)``, no arguments) on a thread of this process as they start."""
    if worker_plugin is not None and worker_plugin not in _WORKER_PLUGINS:
        _WORKER_PLUGINS.append(worker_plugin)
    if while_workers_start is not None and while_workers_start not in _WHILE_WORKERS_START:
        _WHILE_WORKERS_START.append(while_workers_start)


def connect(
    address: str | None = None,
    *,
    scheduler_file: str | os.PathLike[str] | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int | None = "auto",
    security: Any = None,
    dashboard_address: str | None = DASHBOARD_ADDRESS,
    timeout: float = 30.0,
    tune_allocator: bool = True,
) -> Client:
    """Return a Dask client set up for dasklbfgs.

    Resolution order: ``address``, then ``scheduler_file``, then the environment variable
    ``DASKLBFGS_SCHEDULER`` (an address, or a path to a scheduler file); with none of them
    an embedded ``LocalCluster`` on 127.0.0.1 is started and is closed with the client.

    The client talks to workers directly (``direct_to_workers=True``), which halves the
    latency of actor calls (Downpour's parameter shards).

    Parameters
    ----------
    address
        Scheduler address such as ``"tcp://10.0.0.5:8786"``.
    scheduler_file
        Path to the JSON file written by ``dask scheduler --scheduler-file``.
    n_workers, threads_per_worker, memory_limit
        Shape of the embedded cluster (default: one single-threaded worker per core).
    security
        A ``distributed.security.Security`` for TLS, used for either kind of cluster.
    timeout
        Seconds to wait for an existing scheduler before raising
        :class:`~dasklbfgs.errors.ClusterConnectionError`.
    dashboard_address
        Where the embedded cluster serves its dashboard, ``[HOST]:PORT`` (``None`` disables
        it; port 0 is any free port; a busy port, another one). The default binds loopback
        only; use ``":8787"`` to expose it.
    tune_allocator
        Register :class:`dasklbfgs.allocator.AllocatorTuning` on the workers: glibc
        reuses freed large temporaries instead of page-faulting fresh ones every step
        (2-3x faster gradients on workers started by Dask's nanny; see that module).
    """
    if address is not None and scheduler_file is not None:
        raise ConfigurationError("pass either address or scheduler_file, not both")
    from_env = os.environ.get(SCHEDULER_ENV) if address is None and scheduler_file is None else None
    if from_env and os.path.isfile(from_env):
        scheduler_file = from_env
    elif from_env:
        address = from_env
    _check_shape(n_workers, threads_per_worker)
    if dashboard_address is not None and address is None and scheduler_file is None:
        check_dashboard_address(dashboard_address)
    client = _open(address, scheduler_file, n_workers, threads_per_worker, memory_limit, security,
                   dashboard_address, timeout)
    if tune_allocator:
        from dasklbfgs.allocator import AllocatorTuning

        try:
            client.register_plugin(AllocatorTuning())
        except BaseException:
            client.close()  # and the embedded cluster it owns: nothing is left running
            raise
    return client


def _open(address, scheduler_file, n_workers, threads_per_worker, memory_limit, security, dashboard_address,
          timeout) -> Client:
    extra = {"security": security} if security is not None else {}
    if scheduler_file is not None:
        if not os.path.isfile(scheduler_file):
            raise ConfigurationError(f"scheduler file {str(scheduler_file)!r} does not exist")
        return _reach(f"the scheduler in {os.fspath(scheduler_file)!r}", timeout,
                      scheduler_file=os.fspath(scheduler_file), **extra)
    if address is not None:
        return _reach(f"the Dask scheduler at {address!r}", timeout, address=address, **extra)
    from distributed import Client

    cluster_kwargs = _local_cluster_kwargs(n_workers, threads_per_worker, memory_limit, dashboard_address)
    threading.Thread(target=_while_workers_start, name="dasklbfgs-while-workers-start", daemon=True).start()
    if security is None:
        return _low_latency(Client(direct_to_workers=True, **cluster_kwargs))
    # Client(security=...) secures only the client; the cluster needs the same credentials.
    from distributed import LocalCluster

    cluster = LocalCluster(
        security=security,
        protocol="tls://" if getattr(security, "require_encryption", False) else None,
        **cluster_kwargs,
    )
    client = Client(cluster, security=security, direct_to_workers=True)
    client._start_arg = None  # the client owns this cluster: close it with the client
    return _low_latency(client)


def _local_cluster_kwargs(n_workers: int | None, threads_per_worker: int, memory_limit: str | int | None,
                          dashboard_address: str | None) -> dict[str, Any]:
    """A ``LocalCluster`` on loopback whose workers start with the solvers' plugins and whose
    dashboard (if any) has the Training page."""
    if dashboard_address:
        from dasklbfgs.monitor.dashboard import register

        register()  # the "Training" page, before the scheduler builds its dashboard
    return dict(
        n_workers=n_workers or (os.cpu_count() or 1),
        threads_per_worker=threads_per_worker,
        processes=True,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        # Without a dashboard the scheduler still serves HTTP (health, metrics): keep it
        # on loopback and on a free port rather than the default 8787.
        scheduler_kwargs=None if dashboard_address else {"dashboard_address": "127.0.0.1:0"},
        memory_limit=memory_limit,
        # a plugin of every worker the cluster starts (restarts and scale-ups too)
        plugins=tuple(getattr(import_module(module), name)() for module, name in _WORKER_PLUGINS),
    )


def local_cluster(*, n_workers: int | None = None, threads_per_worker: int = 1, memory_limit: str | int | None = "auto",
                  dashboard_address: str = DASHBOARD_ADDRESS) -> LocalCluster:
    """A long-lived ``LocalCluster`` on loopback that many runs join (``dasklbfgs cluster
    start``): the embedded cluster of :func:`connect`, whose scheduler keeps
    :data:`EVENTS_KEPT` events per topic so that the Training page lists the runs of a day.

    Raises :class:`~dasklbfgs.errors.ConfigurationError` for fewer than one worker or thread, or a
    malformed ``dashboard_address`` (see :func:`check_dashboard_address`).
    """
    import dask
    from distributed import LocalCluster

    _check_shape(n_workers, threads_per_worker)
    check_dashboard_address(dashboard_address)
    kwargs = _local_cluster_kwargs(n_workers, threads_per_worker, memory_limit, dashboard_address)
    # read once, as the scheduler is built (it sizes the scheduler's other logs too, such as
    # its task transitions)
    with dask.config.set({"distributed.admin.low-level-log-length": EVENTS_KEPT}):
        return LocalCluster(**kwargs)


def _check_shape(n_workers: int | None, threads_per_worker: int) -> None:
    if threads_per_worker < 1:
        raise ConfigurationError(f"threads_per_worker must be >= 1, got {threads_per_worker!r}")
    if n_workers is not None and n_workers < 1:
        raise ConfigurationError(f"n_workers must be >= 1, got {n_workers!r}", parameters=("n_workers",))


def check_dashboard_address(address: str | int) -> str | int:
    """``address`` if it is ``[HOST]:PORT`` or a port (``":8787"``, ``"127.0.0.1:0"``: port 0
    is any free port); else a :class:`~dasklbfgs.errors.ConfigurationError` naming it (as
    ``dashboard_address``, which the command line says as its flag)."""
    text = str(address) if isinstance(address, int) and not isinstance(address, bool) else address
    match = _DASHBOARD_ADDRESS.fullmatch(text) if isinstance(text, str) else None
    if match is None or int(match["port"]) > 65535:
        raise ConfigurationError(f"dashboard_address {address!r} is not HOST:PORT or :PORT (such as :8787, "
                                 "127.0.0.1:8787, or 127.0.0.1:0 for any free port)",
                                 parameters=("dashboard_address",))
    return address


def _while_workers_start() -> None:
    """What the solvers asked to do while the workers start (a thread: nothing waits for it;
    it is a head start, such as importing a run's modules, which the run does again if need be)."""
    for module, name in _WHILE_WORKERS_START:
        try:
            getattr(import_module(module), name)()
        except Exception:  # noqa: BLE001 - only a head start: the run does it again and says what is wrong
            logger.debug("%s.%s failed while the workers started", module, name, exc_info=True)


def _reach(what: str, timeout: float, **kwargs: Any) -> Client:
    """Connect to an existing scheduler, or fail within ``timeout`` with a clear error."""
    from distributed import Client

    try:
        client = Client(direct_to_workers=True, timeout=timeout, **kwargs)
    except (TypeError, OSError, TimeoutError) as exc:
        _finalise_half_built(exc)
        if not isinstance(exc, TypeError):
            raise ClusterConnectionError(
                f"could not reach {what} within {timeout:g} s ({type(exc).__name__}: {exc}); "
                "is it running, and is the address right?"
            ) from exc
        if "TLS" not in str(exc):
            raise exc from exc.__cause__
        raise ClusterConnectionError(
            f"{what} speaks TLS: pass security=Security(tls_ca_file=..., tls_client_cert=..., "
            "tls_client_key=...) (CLI: --tls-ca-file, --tls-cert, --tls-key)"
        ) from exc
    return _low_latency(client)


def _finalise_half_built(exc: BaseException) -> None:
    """Finalise the half-built client of a failed ``Client(...)`` now.

    Left to a later garbage collection, its ``__del__`` can run inside the thread that the
    next Client starts, and close its loop runner while that start holds the runner's
    lock: a deadlock (seen in CI). The tracebacks hold the client's frames, so they go first.
    """
    error: BaseException | None = exc
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
    gc.collect()


def _low_latency(client: Client) -> Client:
    """Send the client's messages to the scheduler in 1 ms batches instead of 10 ms.

    Sandblaster sends a few messages per evaluation (tasks, releases); with the default
    batching each waits up to 10 ms, which measured as about a third of an evaluation's
    fixed cost on a 2-worker cluster.
    """
    comm = getattr(client, "scheduler_comm", None)
    if comm is not None and hasattr(comm, "interval"):
        comm.interval = 0.001
    return client


@contextlib.contextmanager
def resolve_client(client: Client | None) -> Iterator[Client]:
    """``client``, else the default client, else an embedded cluster closed afterwards."""
    if client is not None:
        yield client
        return
    existing = active_client()
    if existing is not None:
        yield existing
        return
    logger.info("no Dask client given or active: starting an embedded LocalCluster")
    embedded = connect(dashboard_address=None)
    try:
        yield embedded
    finally:
        embedded.close()
