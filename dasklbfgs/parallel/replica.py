"""Partitioned model replicas on a Dask cluster.

A :class:`PartitionedReplica` places one :class:`~dasklbfgs.parallel.actor.PartitionActor` on
each of K distinct workers and connects them to each other. An evaluation hands each
partition its own parameters and the rows; the partitions exchange activations and error sums
among themselves and each returns only its loss and its own gradient block.
:class:`PartitionedReplicas` holds as many replicas as the cluster has disjoint groups of K
workers, and gives Sandblaster's portion tasks the object they compute with
(:class:`OnPartitions`). :func:`partitions_report` builds ``result.partitions``, the one shape
in which Sandblaster and Downpour report a partitioned run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dasklbfgs._actors import ActorRef
from dasklbfgs._wire import free_answered_calls
from dasklbfgs.errors import PartitionError, PartitionLostError
from dasklbfgs.parallel.actor import EXCHANGE_TIMEOUT_SECONDS, PartitionActor

if TYPE_CHECKING:
    from distributed import Client

    from dasklbfgs.parallel.base import PartitionedModel

__all__ = ["OnPartitions", "PartitionedReplica", "PartitionedReplicas", "evaluate_on", "partitions_report",
           "sent_per_partition", "worker_groups"]

POLL_SECONDS = 0.002  # how often a caller looks at its partitions' calls (a failure ends the wait)
LIVENESS_SECONDS = 0.5  # how often a waiting caller asks the scheduler whether the partitions' workers live
RECOVERY_TIMEOUT_SECONDS = 60.0  # how long re-creating lost replicas waits for enough workers
#: what every partition's entry in ``result.partitions["replicas"]`` holds (solvers add their own counters)
PARTITION_KEYS = ("partition", "worker", "bytes_sent", "messages_sent")


def partitions_report(model_partitions: int, replicas: list[list[dict[str, Any]]], recoveries: list[dict[str, Any]],
                      **extra: Any) -> dict[str, Any]:
    """``result.partitions`` of a run whose replicas are partitioned (``model_partitions`` > 1;
    unpartitioned runs have no ``partitions``), the same shape for Sandblaster and Downpour:

    ``model_partitions``
        K, the partitions of each replica.
    ``replicas``
        per replica, its K partitions in partition order, each a dict with ``partition`` (its
        index), ``worker`` (the address it ran on), ``bytes_sent`` and ``messages_sent`` (the
        activations and error sums it sent to its peers, since the replica was last created);
        Sandblaster adds ``evaluations``, Downpour ``fetches`` and ``pushes`` (to its own shards).
    ``recoveries``
        one dict per re-creation of replicas after a lost partition, in order: ``time``
        (seconds since the run started), ``seconds`` (how long re-creating took) and ``lost``,
        the partitions lost as ``{"replica", "partition", "worker"}`` (Sandblaster: those whose
        worker had left the cluster, possibly none when a partition gave up waiting for a live
        peer; Downpour: those whose mailbox was lost or whose task failed).
    ``**extra``
        Downpour adds ``shards_of_partition``: per partition, the indices of the parameter
        shards that hold its parameters.

    The metrics events of such a run carry ``partition_bytes``, :func:`sent_per_partition`
    of the live counters.
    """
    for replica in replicas:
        for entry in replica:
            missing = [key for key in PARTITION_KEYS if key not in entry]
            if missing:
                raise ValueError(f"partition entry {entry!r} lacks {missing}: each holds {PARTITION_KEYS}")
    return {"model_partitions": model_partitions, "replicas": replicas, "recoveries": recoveries, **extra}


def sent_per_partition(replicas: Sequence[Sequence[int]]) -> list[int]:
    """Bytes each partition index sent, summed over the replicas (``replicas``: per replica,
    each partition's bytes sent): the ``partition_bytes`` of the metrics events."""
    sent = np.zeros(max((len(r) for r in replicas), default=0), dtype=np.int64)
    for replica in replicas:
        sent[: len(replica)] += np.asarray(replica, dtype=np.int64)
    return [int(b) for b in sent]


def worker_groups(client: Client, k: int) -> list[list[str]]:
    """Disjoint groups of ``k`` workers (in the cluster's sorted worker order), one per replica:
    as many as fit; :class:`PartitionError` when the cluster has fewer than ``k`` workers."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if k > len(workers):
        raise PartitionError(
            f"model_partitions={k} needs {k} distinct workers, the cluster has {len(workers)}: use at most "
            f"{len(workers)} partitions or add workers")
    return [workers[i : i + k] for i in range(0, len(workers) - k + 1, k)]


def evaluate_on(client: Client, refs: Sequence[ActorRef], actors: Sequence[Any], partitioned: PartitionedModel,
                params: np.ndarray, X: Any, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Loss and gradient sums over rows ``X, y`` at ``params`` computed by the partition
    ``actors`` of one replica (placed as ``refs`` say; all called before the first wait),
    joined into the model's layout.

    The evaluation ends with :class:`PartitionLostError` when a call fails (a partition gave
    up waiting for a peer) or a partition's worker has left the cluster (checked with the
    scheduler every ``LIVENESS_SECONDS``: a call to a dead worker's actor may never return);
    the other partitions are then told to abandon it, so none waits out its timeout.
    """
    job = f"evaluation {uuid.uuid4().hex}"
    parts = partitioned.split(np.asarray(params, dtype=np.float64))
    try:
        calls = [actor.evaluate(job, part, X, y, w) for actor, part in zip(actors, parts)]
    except RuntimeError as exc:  # Dask refuses calls to an actor it knows is lost
        raise PartitionLostError(f"a partition of a replica of {partitioned.model!r} is lost: {exc}") from exc
    pending = set(range(len(calls)))
    next_check = time.monotonic() + LIVENESS_SECONDS
    while pending:
        for p in [p for p in pending if calls[p].done()]:
            pending.discard(p)
            try:
                calls[p].result()
            except (PartitionLostError, OSError) as exc:  # a peer stopped answering, or this one's worker
                _abandon(actors, pending, job)
                raise PartitionLostError(f"partition {p} of a replica of {partitioned.model!r} failed: "
                                         f"{type(exc).__name__}: {exc}") from exc
            except Exception:  # the model's own error (the same on a re-created replica): the caller's
                _abandon(actors, pending, job)
                raise
        if pending and time.monotonic() >= next_check:
            alive = client.scheduler_info(n_workers=-1)["workers"]
            gone = [p for p in range(len(refs)) if refs[p].address not in alive]
            if gone:
                _abandon(actors, pending - set(gone), job)
                raise PartitionLostError(f"partition(s) {gone} of a replica of {partitioned.model!r} lost their "
                                         f"worker ({', '.join(refs[p].address for p in gone)})")
            next_check = time.monotonic() + LIVENESS_SECONDS
        if pending:
            time.sleep(POLL_SECONDS)
    results = [call.result() for call in calls]
    free_answered_calls()  # the parameters and rows sent
    return results[0][0], partitioned.join([grad for _, grad in results])


def _abandon(actors: Sequence[Any], partitions: set[int], job: str) -> None:
    """Tell ``partitions`` to drop ``job`` (best effort: they may be gone too)."""
    for p in partitions:
        try:
            actors[p].abandon(job)
        except Exception:  # noqa: BLE001 -- a dead partition needs no telling
            pass


class PartitionedReplica:
    """The partition actors of replica ``replica`` of ``partitioned``, one on each of
    ``workers`` (None: the cluster's first K), connected to each other."""

    def __init__(self, client: Client, partitioned: PartitionedModel, workers: Sequence[str] | None = None,
                 timeout: float = EXCHANGE_TIMEOUT_SECONDS, replica: int = 0) -> None:
        self.client, self.partitioned = client, partitioned
        self.workers = worker_groups(client, partitioned.k)[0] if workers is None else list(workers)
        if len(set(self.workers)) != partitioned.k:
            raise PartitionError(f"{partitioned.k} partitions need {partitioned.k} distinct workers, "
                                 f"got {self.workers}")
        self.futures = [client.submit(PartitionActor, partitioned, index, timeout, replica, actor=True,
                                      workers=[worker], allow_other_workers=False, pure=False)
                        for index, worker in enumerate(self.workers)]
        self.actors: list[Any] = [f.result() for f in self.futures]  # Dask's actor handles
        for call in [a.connect(self.actors) for a in self.actors]:
            call.result()

    @property
    def refs(self) -> tuple[ActorRef, ...]:
        """What a task needs to call the partitions (not the handles: see :class:`ActorRef`)."""
        return tuple(ActorRef(PartitionActor, w, str(f.key)) for w, f in zip(self.workers, self.futures))

    def loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                      w: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """:meth:`Model.loss_grad_sum <dasklbfgs.models.base.Model.loss_grad_sum>` computed by
        the partitions on their workers."""
        return evaluate_on(self.client, self.refs, self.actors, self.partitioned, params, X, y, w)

    def stats(self) -> list[dict[str, Any]]:
        """Each partition's counters (bytes and messages it sent, evaluations) and worker, in
        partition order."""
        return [{**call.result(), "worker": worker} for call, worker in zip([a.stats() for a in self.actors],
                                                                             self.workers)]

    def close(self) -> None:
        """Release the actors (their workers drop them once no future refers to them)."""
        self.actors, self.futures = [], []

    def __enter__(self) -> PartitionedReplica:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PartitionedReplicas:
    """One :class:`PartitionedReplica` per disjoint group of K workers of the cluster;
    ``started``: the run's clock (``time.perf_counter()``) the recoveries' times count from."""

    def __init__(self, client: Client, partitioned: PartitionedModel, started: float | None = None) -> None:
        self.client, self.partitioned = client, partitioned
        self.started = time.perf_counter() if started is None else started
        self.replicas = self._start()
        self.recoveries: list[dict[str, Any]] = []

    def _start(self) -> list[PartitionedReplica]:
        """One replica on each disjoint group of K workers alive now."""
        return [PartitionedReplica(self.client, self.partitioned, group)
                for group in worker_groups(self.client, self.partitioned.k)]

    def recover(self, timeout: float = RECOVERY_TIMEOUT_SECONDS) -> None:
        """Re-create the replicas on the workers alive now (after a partition was lost): the
        partitions keep no state between evaluations, so new ones take over at once. Waits up
        to ``timeout`` seconds for K workers (a restarted worker rejoining). Recorded in
        :attr:`recoveries` with the partitions whose worker had left."""
        started = time.perf_counter()
        alive = self.client.scheduler_info(n_workers=-1)["workers"]
        lost = [{"replica": r, "partition": p, "worker": worker} for r, replica in enumerate(self.replicas)
                for p, worker in enumerate(replica.workers) if worker not in alive]
        self.close()
        try:
            self.client.wait_for_workers(self.partitioned.k, timeout=timeout)
        except TimeoutError:
            raise PartitionLostError(
                f"a partition was lost and the cluster has not had {self.partitioned.k} workers for "
                f"{timeout:.0f} s to re-create the replica on") from None
        self.replicas = self._start()
        self.recoveries.append({"time": started - self.started, "seconds": time.perf_counter() - started,
                                "lost": lost})

    @property
    def portion_model(self) -> OnPartitions:
        """What Sandblaster's portion tasks compute with instead of the model."""
        return OnPartitions(self.partitioned, tuple(r.refs for r in self.replicas))

    def stats(self) -> dict[str, Any]:
        """The run's ``result.partitions`` (:func:`partitions_report`): each replica's partition
        counters (since the last recovery) and the recoveries."""
        keys = (*PARTITION_KEYS, "evaluations")
        return partitions_report(self.partitioned.k, [[{key: s[key] for key in keys} for s in r.stats()]
                                                      for r in self.replicas], self.recoveries)

    def bytes_per_partition(self) -> list[int]:
        """Bytes each partition index has sent, summed over the replicas (since the last recovery)."""
        return sent_per_partition([[s["bytes_sent"] for s in replica.stats()] for replica in self.replicas])

    def close(self) -> None:
        for replica in self.replicas:
            replica.close()
        self.replicas = []


@dataclass(frozen=True)
class OnPartitions:
    """Stands in for the model in Sandblaster's portion tasks when each replica is
    partitioned: a portion's sums are computed by the partitions of one replica, the one
    whose first partition lives on the task's worker (else one that has a partition there,
    else the first); the task sends each partition its parameters and the portion's rows."""

    partitioned: PartitionedModel
    replicas: tuple[tuple[ActorRef, ...], ...]

    def portion_loss_grad_sum(self, params: np.ndarray, X: Any, y: np.ndarray,
                              w: np.ndarray | None = None, offset: np.ndarray | None = None
                              ) -> tuple[float, np.ndarray]:
        from distributed import get_client

        assert offset is None, "the partitioned models are neural: Model.check_data refuses data with offsets"

        refs = self._replica_here()
        actors = [ref.handle() for ref in refs]
        return evaluate_on(get_client(), refs, actors, self.partitioned, params, X, y, w)

    def _replica_here(self) -> tuple[ActorRef, ...]:
        from distributed import get_worker

        here = get_worker().address
        first = [r for r in self.replicas if r[0].address == here]
        anywhere = [r for r in self.replicas if any(ref.address == here for ref in r)]
        return (first or anywhere or list(self.replicas))[0]
