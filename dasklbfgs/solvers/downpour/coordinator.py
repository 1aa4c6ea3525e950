"""``downpour_sgd``: asynchronous SGD with sharded parameter servers (docs/algorithms.md §3).

P :class:`ParameterShard` actors own contiguous slices of the parameters and apply the
update rule (Adagrad by default); R replica tasks, one per training subset, fetch, compute
and push without ever waiting for each other. The coordinator, in the client process, only
launches them, watches progress (history, held-out evaluation, checkpoints) and tells the
shards when to stop.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import wait

from dasklbfgs._typing import Dataset
from dasklbfgs.checkpoint_store import checkpoint_exists
from dasklbfgs.data.location import Location
from dasklbfgs.errors import ConfigurationError, WorkerLostError
from dasklbfgs.models.base import Model
from dasklbfgs.models.persist import model_config, recorded_config
from dasklbfgs.optim.lbfgs import Status
from dasklbfgs.optim.updates import UpdateRule, make_rule
from dasklbfgs.parallel import PARTITIONERS, PartitionedModel, partition
from dasklbfgs.parallel.replica import sent_per_partition
from dasklbfgs.solvers._replicas.directory import ShardDirectory
from dasklbfgs.solvers._replicas.run_checks import check_param_shards, checked_rows
from dasklbfgs.solvers._replicas.shard_group import ParameterShardGroup
from dasklbfgs.solvers._replicas.watch import Coordinator, Progress, step_timing, watch
from dasklbfgs.solvers._replicas.wire import param_bounds
from dasklbfgs.solvers.common_options import global_steps_per_epoch
from dasklbfgs.solvers.context import RunContext
from dasklbfgs.solvers.downpour.memory import Homes, check_run_memory, shard_vectors
from dasklbfgs.solvers.downpour.options import DownpourOptions
from dasklbfgs.solvers.downpour.partition_tasks import PartitionTasks
from dasklbfgs.solvers.downpour.partitions import decay_by_array, partition_bounds
from dasklbfgs.solvers.downpour.replica import ReplicaConfig, run_replica
from dasklbfgs.solvers.downpour.shard_checkpoint import read_shard_states, write_shard_states
from dasklbfgs.solvers.result import Result
from dasklbfgs.solvers.stats import DownpourStats

__all__ = ["DownpourPlan", "plan_downpour"]

REPLICA_EXIT_SECONDS = 5.0  # how long closing a run waits for replicas still running to stop


@dataclass(frozen=True)
class DownpourPlan:
    """A Downpour run's checked layout: each replica's rows, the update rule, the row table
    of row-sparse exchanges, the partitions, each parameter shard's bounds and the shards'
    states to resume from. :meth:`run` trains on the context's cluster."""

    context: RunContext
    rows: list[tuple[int, int]]
    rule: UpdateRule
    table: Any
    partitioned: PartitionedModel | None
    bounds: list[tuple[int, int]]
    decay: dict[str, float]
    states: list[dict[str, Any]] | None
    checkpoint: Location | None  # options.checkpoint_path, resolved (CheckpointOptions.checkpoint_location)

    def run(self) -> Result:
        return _DownpourRun(self).run_to_end()


def plan_downpour(context: RunContext) -> DownpourPlan:
    """Downpour's own checks and layout (the registered ``plan``)."""
    model, options = context.model, context.options
    assert isinstance(options, DownpourOptions)
    rows = checked_rows(context)
    check_param_shards(model, options.n_param_shards)
    rule = make_rule(options.optimizer, learning_rate=options.learning_rate, **(options.optimizer_options or {}))
    table = _row_table(model, context.dataset, options, rule)
    partitioned = None if options.model_partitions == 1 else partition(model, options.model_partitions)
    decay: dict[str, float] = {}
    if partitioned is None:
        bounds = param_bounds(model.n_params, options.n_param_shards, model.row_table_for(context.dataset))
    else:  # the shards hold the partitioned vector, each shard within one partition
        bounds, _ = partition_bounds(partitioned, options.n_param_shards)
        decay = decay_by_array(model)  # refuses a penalty the partitions cannot split
    checkpoint = options.checkpoint_location(context.dataset)
    states = _resume_states(checkpoint, options, model, rule, bounds)
    return DownpourPlan(context, rows, rule, table, partitioned, bounds, decay, states, checkpoint)


def _row_table(model: Model, data: Dataset, options: DownpourOptions, rule: Any) -> Any:
    """The model's row table on ``data`` when pushes and fetches are row-sparse, else None."""
    table = model.row_table_for(data)
    sparse = options.sparse
    # Exact also with a model's l1: its growing FTRL threshold is applied when rows are read.
    if sparse is None:
        return table if table is not None and rule.sparse_exact and not options.overlap else None
    if sparse and table is None:
        raise ConfigurationError(
            f"sparse=True needs a model with a row table (EmbeddingLM, or a linear model without l2 on sparse data); "
            f"{model!r} has none on this data")
    if sparse and not rule.sparse_exact:
        raise ConfigurationError(
            f"sparse=True needs an update rule where a zero gradient is a zero step; {options.optimizer!r} is not one"
        )
    return table if sparse else None


def _resume_states(path: Location | None, options: DownpourOptions, model: Model, rule: Any,
                   bounds: list[tuple[int, int]]) -> list[dict[str, Any]] | None:
    """The shards' states to start from when resuming from an existing checkpoint at ``path``."""
    if path is None or not (options.resume and checkpoint_exists(path)):
        return None
    states, attrs = read_shard_states(path, model_config=recorded_config(model), rule=rule.name)
    saved_partitions = int(attrs.get("model_partitions", 1))
    if saved_partitions != options.model_partitions:
        raise ConfigurationError(
            f"checkpoint {str(path)!r} holds parameter shards of model_partitions={saved_partitions} (their "
            f"layout follows the partitions); resume with model_partitions={saved_partitions}, not "
            f"{options.model_partitions}")
    if [(s["start"], s["stop"]) for s in states] != bounds:
        raise ConfigurationError(
            f"checkpoint {str(path)!r} has {len(states)} parameter shards "
            f"{[(s['start'], s['stop']) for s in states]}; this run asks for {bounds}"
        )
    return states


class _DownpourRun(Coordinator):
    """The actors and tasks of one run, and the coordinator's bookkeeping.

    The parameter shards are a :class:`ParameterShardGroup`: a shard lost with its worker is
    re-created on a live worker from the latest checkpoint (:meth:`_restore_shards`) and
    published in the run's :class:`ShardDirectory`, where replicas pick it up; Dask itself restarts a replica task
    whose worker died, and the replica resumes at the step the shards have counted for it.

    Dask refuses to retire a worker holding an actor; the run hears of every refused
    retirement (the scheduler's "retire-workers" events) and hands that worker's shards over
    to other workers (:meth:`ParameterShardGroup.hand_over`), so that the next retirement
    succeeds.

    With ``partitioned`` (model_partitions > 1) each replica is K partition tasks beside K
    partition actors (:class:`.partition_tasks.PartitionTasks`); the shards hold the
    partitioned vector, and parameters leave the run in the model's layout.
    """

    def __init__(self, plan: DownpourPlan) -> None:
        super().__init__(plan.context, plan.rows)
        client, model, options, states = self.client, self.model, self.options, plan.states
        bounds = plan.bounds
        self.partitioned, self.decay = plan.partitioned, plan.decay
        self.partitions = None if self.partitioned is None else PartitionTasks(self, self.partitioned,
                                                                               options.n_param_shards)
        self.bounds, self.rule, self.table = bounds, plan.rule, plan.table
        l1 = model.l1_weights()  # minimize lets it through only with optimizer="ftrl"
        self.l1 = None if l1 is None else self.in_shard_layout(l1)
        self.shard_start = self.in_shard_layout(self.x_start)
        self.workers: list[str | None] = [*self.live_workers()] or [None]
        self.homes = (Homes(self.workers, len(bounds)) if self.partitions is None else
                      Homes(self.workers, len(bounds), self.partitions.groups, self.partitions.owners))
        self.planned_memory = self.check_memory()
        self.checkpoint_path = plan.checkpoint
        # what a checkpoint records of the model (refused before the run when it cannot record it)
        self.model_config = model_config(model) if self.checkpoint_path is None else recorded_config(model)
        self.start_steps = 0 if states is None else int(states[0]["steps"])
        self.config = ReplicaConfig(options, self.table)  # what every replica task reads
        self.first_epoch = self.start_steps // global_steps_per_epoch(self.data.n_samples, len(self.rows),
                                                                      options.batch_size)
        # with warmstart_steps, replica 0 trains alone until the shards have counted them
        self.released = options.warmstart_steps == 0 or len(self.rows) == 1
        self.start_loss_pending = False  # with model_partitions: the start loss is read at a poll
        self.directory = ShardDirectory(f"downpour-{self.token}", len(bounds), client)
        self.shards = ParameterShardGroup(self, "downpour-shard", bounds, self._shard_arguments,
                                          directory=self.directory, restore=self._restore_shards,
                                          on_new=self._bring_up_to_date)
        self.shards.start([self.homes.shard(i) for i in range(len(bounds))], states)

    def in_shard_layout(self, vector: np.ndarray) -> np.ndarray:
        """A vector in the model's layout as the shards hold it (partitioned with model_partitions)."""
        return vector if self.partitioned is None else self.partitioned.to_partitioned(vector)

    def check_memory(self) -> dict[str, int]:
        """Refuse (:class:`InsufficientMemoryError`) a run whose shards and replicas would not
        fit a worker's memory (:mod:`.memory`); the bytes planned on each worker (for the stats)."""
        sizes = ([self.model.n_params] if self.partitioned is None
                 else [s.stop - s.start for s in self.partitioned.param_slices])
        k = len(sizes)
        placement = self.homes.placement(len(self.rows), [b - a for a, b in self.bounds], sizes)
        vectors = shard_vectors(self.rule.init(np.zeros(1)), self.l1 is not None,
                                self.options.checkpoint_path is not None)
        remedies = ["workers with more memory"]
        if len(self.rows) > len(self.workers if self.partitions is None else self.partitions.groups):
            remedies.insert(0, "fewer replicas (n_replicas), so that fewer share a worker")
        if type(self.model) in PARTITIONERS and k < len(self.workers):
            remedies.insert(0, f"model_partitions={k + 1} or more ({type(self.model).__name__} can be partitioned: "
                               "each worker then holds its partition's share)")
        return check_run_memory(placement, vectors, self.client.scheduler_info(n_workers=-1)["workers"],
                                remedies=remedies, what=f"Downpour on {self.model!r} ({self.model.n_params} "
                                                        f"parameters, model_partitions={k})")

    def _shard_arguments(self, i: int) -> tuple[Any, ...]:
        """:class:`ParameterShard`'s arguments for shard ``i``: its slice of the start, the
        rule, the row table of row-sparse exchanges and its slice of the l1 weights."""
        a, b = self.bounds[i]
        l1 = None if self.l1 is None else self.l1[a:b]
        return (i, a, b, self.shard_start[a:b], self.rule.name, self.rule.hyper, self.table, l1)

    def _restore_shards(self, lost: list[int]) -> tuple[list[dict[str, Any]], int]:
        """The states to re-create ``lost`` shards from: the latest checkpoint (the start, if
        none was written yet), and the global step it holds."""
        if self.checkpoint_path is None:
            raise WorkerLostError(
                f"parameter shard(s) {lost} were lost with their worker and cannot be restored without "
                "a checkpoint; pass checkpoint_path and checkpoint_every to survive worker failures"
            )
        if checkpoint_exists(self.checkpoint_path):
            states, attrs = read_shard_states(self.checkpoint_path, model_config=self.model_config, rule=self.rule.name)
            return states, int(attrs.get("steps", 0))
        states = [{"start": a, "stop": b, "values": self.shard_start[a:b],
                   "optimizer_state": self.rule.init(self.shard_start[a:b]), "version": 0,
                   "steps": self.start_steps} for a, b in self.bounds]
        return states, self.start_steps

    def _bring_up_to_date(self, shard: Any) -> None:
        """A re-created shard takes the run's step limit and a stop already asked."""
        if self.max_steps is not None:
            shard.stop_at(self.max_steps).result()
        if self.stop_reason is not None:
            shard.request_stop(self.stop_reason).result()

    def fetch_params(self) -> np.ndarray:
        """The parameters in the model's layout."""
        vector = self.shards.fetch()
        return vector if self.partitioned is None else self.partitioned.from_partitioned(vector)

    def request_stop(self, reason: str) -> None:
        self.shards.call("request_stop", reason)

    def launch_replicas(self, replicas: range) -> None:
        arguments: dict[str, Any] = {"bounds": self.bounds, "config": self.config, "first_epoch": self.first_epoch,
                     "directory": self.directory}
        # Shards come from the directory, not as arguments: a task depending on an actor's
        # future is failed by Dask when that actor's worker dies.
        if self.partitions is not None:
            self.partitions.launch(replicas, decay=self.decay, **arguments)
            return
        for r in replicas:
            # After the shards' workers, so that with spare workers replicas and shards do not share.
            self.launch(r, run_replica, self.homes.replica(r), allow_other_workers=True, **arguments)

    def train(self) -> Result:
        self.context.restart_clock()  # training starts: the actors are up, their state restored
        started = self.started = self.context.started
        opts = self.options
        if opts.max_steps is not None:
            self.shards.call("stop_at", opts.max_steps)
            if self.start_steps >= opts.max_steps:
                self.stop(f"max_steps ({opts.max_steps}) reached")
        self.measure_start_loss()
        self.launch_replicas(range(len(self.rows)) if self.released else range(1))
        history, status, message = watch(self, self.start_steps)

        replica_stats = self.replica_tallies()
        shard_stats = self.shards.call("stats")
        x = self.fetch_params()
        wall = time.perf_counter() - started
        steps = max(st["steps"] for st in shard_stats)
        if self.checkpoint_path is not None and status not in (Status.NON_FINITE, Status.DIVERGED):
            self.checkpoint(steps)
        stats = self._stats(replica_stats, shard_stats, wall, steps)
        event: dict[str, Any] = {"pushes_per_shard": stats["pushes_per_shard"]}
        extra: dict[str, Any] = {}
        if self.partitions is not None:
            extra["partitions"] = partitions = self.partitions.report(replica_stats)
            event["partition_bytes"] = sent_per_partition([[p["bytes_sent"] for p in r]
                                                           for r in partitions["replicas"]])
        return self.result(x, steps, (history, status, message), stats, event, **extra)

    def measure_start_loss(self) -> None:
        """With model_partitions no worker holds the whole model, so the loss the run is judged
        against (:mod:`~dasklbfgs.solvers._replicas.ending`) is the loss of the first push
        shard 0 took (computed at the start, on the first mini-batches), read at the first
        poll that has it."""
        self.start_loss_pending = self.partitioned is not None
        if self.start_loss_pending:
            self.start_loss = 0.0  # nothing is judged until then
        else:
            super().measure_start_loss()

    def end_loss(self, x: np.ndarray, history: list[dict[str, Any]]) -> tuple[float, str]:
        """With model_partitions, the mini-batch loss of the last poll that measured one,
        against the first push's (no worker holds the whole model to evaluate it)."""
        if self.partitioned is None:
            return super().end_loss(x, history)
        losses = [entry["loss"] for entry in history if "loss" in entry]
        return (losses[-1] if losses else math.nan), "the mini-batch loss (first push, last poll)"

    def replica_tallies(self) -> list[dict[str, Any]]:
        """Each replica's tallies; a partitioned replica's are its partition 0's (all take the
        same steps and examples) with every partition's under ``"partitions"``."""
        done = {key: f.result() for key, f in self.replica_futures.items()}
        if self.partitioned is None:
            return list(done.values())
        replicas = sorted({r for r, _ in done})
        return [{**done[r, 0], "partitions": [done[r, p] for p in range(self.partitioned.k)]} for r in replicas]

    def _stats(self, replica_stats: list[dict[str, Any]], shard_stats: list[dict[str, Any]], wall: float,
               steps: int) -> DownpourStats:
        """The run's counters: rates, staleness, bytes moved, per shard and per replica."""
        staleness: Counter[int] = Counter()
        where = self.shards.workers()
        for s in shard_stats:
            staleness.update({int(k): v for k, v in s["staleness"].items()})
        pushes = sum(s["version"] for s in shard_stats)
        examples = sum(r["examples"] for r in replica_stats)
        return DownpourStats({
            "wall_seconds": wall,
            "global_steps": steps,
            "epochs": steps / global_steps_per_epoch(self.data.n_samples, len(self.rows), self.options.batch_size),
            "steps_this_run": steps - self.start_steps,
            "updates_per_second": pushes / wall,
            "examples_per_second": examples / wall,
            "staleness": {str(k): v for k, v in sorted(staleness.items())},  # str keys: JSON, repr
            **{key: sum(s[key] for s in shard_stats) for key in ("bytes_in", "bytes_out", "dense_bytes_in",
                                                                  "dense_bytes_out")},
            "sparse": self.table is not None,
            "pushes_per_shard": [s["version"] for s in shard_stats],
            "shard_workers": [where.get(i) for i in range(len(shard_stats))],
            "planned_memory_bytes": self.planned_memory,  # what check_memory expected each worker to hold
            "bytes_in_per_shard": [s["bytes_in"] for s in shard_stats],
            "bytes_out_per_shard": [s["bytes_out"] for s in shard_stats],
            "steps_per_replica": [r["steps"] for r in replica_stats],
            "replica_first_steps": [r["first_step"] for r in replica_stats],
            "replica_reconnects": [r["reconnects"] for r in replica_stats],
            "shard_recoveries": self.shards.recoveries,
            "shard_handovers": self.shards.handovers,
            **step_timing(replica_stats),
        })

    def poll(self) -> Progress:
        """Replica failures, the shards' counters, and the warm start's release."""
        if self.partitions is not None:
            self.partitions.restart_lost()
        finished = self.replicas_finished()
        self.shards.hand_over()
        all_stats = self.shards.call("stats")
        stats = all_stats[0]  # every push reaches every shard: shard 0 has the whole count
        if self.start_loss_pending and stats["first_loss"] is not None:
            self.start_loss, self.start_loss_pending = stats["first_loss"], False
        steps = max(st["steps"] for st in all_stats)  # a restored shard counts from its checkpoint
        if not self.released and steps >= self.options.warmstart_steps:
            self.launch_replicas(range(1, len(self.rows)))
            self.released, finished = True, False
        reason = next((st["stop_reason"] for st in all_stats if st["stop_reason"]), None)
        event = {"pushes": stats["version"], "pushes_per_shard": [st["version"] for st in all_stats],
                 "replicas_running": self.running(),
                 "staleness": {str(k): v for k, v in stats["staleness"].items()}}  # events take str keys
        if self.partitions is not None:
            event["partition_bytes"] = self.partitions.bytes_sent()
        return Progress(steps, stats["loss_sum"], stats["loss_count"], reason, finished, event)

    def current_params(self) -> np.ndarray:
        return self.fetch_params()

    def checkpoint(self, steps: int) -> None:
        states = self.shards.call("get_state")
        partitions = {} if self.partitioned is None else {"model_partitions": self.partitioned.k}  # the layout
        assert self.checkpoint_path is not None  # asked only of runs with checkpoints
        write_shard_states(self.checkpoint_path, states, model_config=self.model_config, rule=self.rule.name,
                           hyper=self.rule.hyper, extra={"steps": int(steps), **partitions})

    def close(self) -> None:
        """Ask replicas still running (a run that failed or was interrupted) to stop, give them
        a moment to leave, then cancel everything of the run."""
        with contextlib.suppress(Exception):  # best effort: a shard may have gone with its worker
            for call in [s.request_stop("the run has ended") for s in self.shards.handles]:
                call.result(timeout=REPLICA_EXIT_SECONDS)
        actors = [] if self.partitions is None else self.partitions.close()  # partitions waiting for a lost peer
        with contextlib.suppress(Exception):
            wait(list(self.replica_futures.values()), timeout=REPLICA_EXIT_SECONDS)
        self.release([*self.replica_futures.values(), *self.shards.close(), *actors])
