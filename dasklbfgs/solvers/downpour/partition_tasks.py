"""The coordinator's side of Downpour on partitioned replicas (``model_partitions=K``).

Each model replica is K partition tasks on a disjoint group of K workers, each task beside
its partition's :class:`~dasklbfgs.parallel.actor.PartitionActor` (the transport Sandblaster's
partitions use; the K actors of a replica are a
:class:`~dasklbfgs.parallel.replica.PartitionedReplica`). :class:`PartitionTasks` places
them, launches them, re-creates a replica that lost a partition (its actor's worker died,
or a partition gave up waiting for a peer), and reads the bytes the partitions sent each
other for the metrics events and ``result.partitions``. What each task runs:
:mod:`.partitions`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from distributed import Client, Future, wait

from dasklbfgs.errors import WorkerLostError
from dasklbfgs.parallel.actor import EXCHANGE_TIMEOUT_SECONDS
from dasklbfgs.parallel.base import PartitionedModel
from dasklbfgs.parallel.replica import (
    RECOVERY_TIMEOUT_SECONDS,
    PartitionedReplica,
    partitions_report,
    sent_per_partition,
    worker_groups,
)
from dasklbfgs.solvers._replicas.watch import Coordinator, replies_or_none
from dasklbfgs.solvers.downpour.partitions import partition_bounds, run_partition

__all__ = ["MAX_PARTITION_RESTARTS", "PartitionTasks"]

MAX_PARTITION_RESTARTS = 3  # partitioned replicas re-created after losing a partition, before the run fails
EXIT_SECONDS = 5.0  # how long tearing a replica down waits for its surviving partitions to stop
STATS_POLL_SECONDS = 2.0  # how long a poll waits for the partitions' counters (a lost one: skipped)


class PartitionTasks:
    """The partition actors and tasks of every partitioned replica of ``run`` (whose
    :meth:`~dasklbfgs.solvers._replicas.watch.Coordinator.launch` starts the tasks and whose
    ``release`` cancels them), the parameter shards cut at the partitions' boundaries
    (``n_param_shards`` asked for)."""

    def __init__(self, run: Coordinator, partitioned: PartitionedModel, n_param_shards: int) -> None:
        self.run, self.partitioned, self.k = run, partitioned, partitioned.k
        self.client: Client = run.client
        self.groups = worker_groups(self.client, self.k)  # refuses more partitions than workers
        self.owners = partition_bounds(partitioned, n_param_shards)[1]  # each partition's shards
        self.replicas: dict[int, PartitionedReplica] = {}  # by replica index, the live ones
        self.generation: dict[int, int] = {}
        self.restarts: list[dict[str, Any]] = []
        self.arguments: dict[str, Any] = {}  # what every partition task is given besides its own

    def launch(self, replicas: range, **arguments: Any) -> None:
        """Each replica's K actors on its group of workers, connected, then its K tasks, each
        beside its actor (``arguments``: the run's, kept for the replicas re-created later)."""
        self.arguments = arguments or self.arguments
        for r in replicas:
            generation = self.generation.setdefault(r, 0)
            replica = self.replicas[r] = PartitionedReplica(self.client, self.partitioned,
                                                            self.groups[r % len(self.groups)],
                                                            timeout=EXCHANGE_TIMEOUT_SECONDS, replica=r)
            for p, (worker, actor) in enumerate(zip(replica.workers, replica.refs)):
                self.run.launch(r, run_partition, worker, allow_other_workers=False, partition=p,
                                generation=generation, partitioned=self.partitioned, shards=self.owners[p],
                                partition_actor=actor, **self.arguments)

    def tasks(self, r: int) -> list[Future]:
        return [self.run.replica_futures[r, p] for p in range(self.k)]

    def restart_lost(self) -> None:
        """Re-create every replica that lost a partition: end the survivors' waits, cancel
        all K tasks and actors and start K new ones on K live workers, which resume at the
        smallest step their shards counted (:meth:`.partitions.PartitionReplica.resume_step`).
        At most ``MAX_PARTITION_RESTARTS`` in a run."""
        for r, replica in list(self.replicas.items()):
            tasks = self.tasks(r)
            lost = [p for p, (a, t) in enumerate(zip(replica.futures, tasks)) if "error" in (a.status, t.status)]
            if not lost:
                continue
            if len(self.restarts) >= MAX_PARTITION_RESTARTS:
                self._lost(r, lost, tasks)
            started = time.perf_counter()
            gone = [{"replica": r, "partition": p, "worker": replica.workers[p]} for p in lost]
            self._tear_down(r)
            try:
                self.client.wait_for_workers(self.k, timeout=RECOVERY_TIMEOUT_SECONDS)
            except TimeoutError:
                self._lost(r, lost, tasks)
            self.groups = worker_groups(self.client, self.k)
            self.generation[r] += 1
            self.launch(range(r, r + 1))
            self.restarts.append({"time": started - self.run.started, "seconds": time.perf_counter() - started,
                                  "lost": gone})

    def _tear_down(self, r: int) -> None:
        """Abort replica r's waits, give its surviving tasks a moment to leave, cancel it all."""
        replica, tasks = self.replicas.pop(r), self.tasks(r)
        self._abort([replica])
        with contextlib.suppress(TimeoutError):  # the aborted survivors leave; a lost one's task never will
            wait([t for t, a in zip(tasks, replica.futures) if a.status == "finished"], timeout=EXIT_SECONDS)
        self.run.release([*tasks, *replica.futures])
        replica.close()

    @staticmethod
    def _abort(replicas: list[PartitionedReplica]) -> None:
        """End every wait of these replicas' partitions at once (best effort: a lost actor
        takes no abort)."""
        with contextlib.suppress(Exception):
            live = [a for replica in replicas for a, f in zip(replica.actors, replica.futures)
                    if f.status == "finished"]
            replies_or_none([a.abort() for a in live], EXIT_SECONDS)

    def _lost(self, r: int, lost: list[int], tasks: list[Future]) -> None:
        """Raise the partition's own error (it names what it waited for), else a WorkerLostError."""
        for p in lost:
            if tasks[p].status == "error":
                tasks[p].result()
        raise WorkerLostError(f"partition(s) {lost} of replica {r} were lost with their worker and could not be "
                              f"re-created ({len(self.restarts)} restarts so far)")

    def bytes_sent(self) -> list[int]:
        """Bytes each partition index has sent its peers so far, summed over the replicas
        (since each replica's last start), as the partitions' actors count them. A lost actor
        counts nothing: the next poll re-creates its replica."""
        sent = {r: [0] * self.k for r in self.replicas}
        live = [(r, p, a) for r, replica in self.replicas.items()
                for p, (a, f) in enumerate(zip(replica.actors, replica.futures)) if f.status == "finished"]
        counters = replies_or_none([a.stats() for _, _, a in live], STATS_POLL_SECONDS)
        for (r, p, _), counter in zip(live, counters):
            if counter is not None:
                sent[r][p] = counter["bytes_sent"]
        return sent_per_partition(list(sent.values()))

    def report(self, replica_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """``result.partitions`` (:func:`~dasklbfgs.parallel.replica.partitions_report`): per
        replica and partition (since the replica's last start) where it ran, the bytes and
        messages it sent its peers, its fetches and pushes; the replicas re-created after
        losing a partition; which shards each partition owns."""
        keys = ("partition", "bytes_sent", "messages_sent", "fetches", "pushes")
        replicas = [[{**{key: part[key] for key in keys}, "worker": self.replicas[r["replica"]].workers[p]}
                     for p, part in enumerate(r["partitions"])] for r in replica_stats]
        return partitions_report(self.k, replicas, self.restarts, shards_of_partition=self.owners)

    def close(self) -> list[Future]:
        """End every partition's wait (a run that failed or was interrupted); the actors'
        futures, for the run to release with its tasks."""
        self._abort(list(self.replicas.values()))
        futures = [f for replica in self.replicas.values() for f in replica.futures]
        for replica in self.replicas.values():
            replica.close()
        return futures
