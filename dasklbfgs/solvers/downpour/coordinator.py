"""``downpour_sgd``: asynchronous SGD with sharded parameter servers (ALGORITHMS.md §3).

P :class:`ParameterShard` actors own contiguous slices of the parameters and apply the
update rule (Adagrad by default); R replica tasks, one per training subset, fetch, compute
and push without ever waiting for each other. The coordinator, in the client process, only
launches them, watches progress (history, held-out evaluation, checkpoints) and tells the
shards when to stop.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import Client, Future
from scipy.optimize import OptimizeResult

from dasklbfgs._checks import check_int
from dasklbfgs.cluster import resolve_client
from dasklbfgs.solvers.downpour.shard_checkpoint import read_shard_states, write_shard_states
from dasklbfgs.solvers.downpour.directory import ShardDirectory
from dasklbfgs.solvers.downpour.replica import ReplicaConfig, run_replica
from dasklbfgs.solvers._replicas.run_checks import check_replica_run
from dasklbfgs.solvers.downpour.shard import ParameterShard
from dasklbfgs.solvers._replicas.watch import Progress, step_timing, watch
from dasklbfgs.solvers.downpour.wire import param_bounds
from dasklbfgs.errors import ConfigurationError, WorkerLostError
from dasklbfgs.monitor.events import MetricsStream
from dasklbfgs.models.metrics import held_out_metrics
from dasklbfgs.models.persist import model_config
from dasklbfgs.optim.updates import make_rule

__all__ = ["downpour_sgd", "param_bounds"]


def downpour_sgd(
    model: Any,
    data: Any,
    *,
    client: Client | None = None,
    n_replicas: int = 2,
    n_param_shards: int = 2,
    batch_size: int = 128,
    n_fetch: int = 1,
    n_push: int = 1,
    learning_rate: float = 0.1,
    optimizer: str = "adagrad",
    local_learning_rate: float | None = None,
    epochs: int = 1,
    max_steps: int | None = None,
    warmstart_steps: int = 0,
    x0: np.ndarray | None = None,
    seed: int = 0,
    eval_data: Any = None,
    eval_every: int | None = None,
    defer_eval: bool = False,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    callback: Callable[[OptimizeResult], Any] | None = None,
    wire_dtype: str = "float64",
    sparse: bool | None = None,
    overlap: bool = False,
    poll_interval: float = 0.05,
) -> OptimizeResult:
    """Train ``model`` on ``data`` with Downpour SGD on Dask actors.

    Parameters
    ----------
    model, data
        A model from :mod:`dasklbfgs.models`; a :class:`ShardedDataset` or its path.
    client
        Dask client (default: the active one, else an embedded cluster closed on return).
    n_replicas
        Model replicas; replica r trains on the r-th contiguous block of rows.
    n_param_shards
        Parameter-shard actors, spread over the workers.
    batch_size, n_fetch, n_push
        Mini-batch rows; fetch every ``n_fetch`` steps, push every ``n_push`` steps.
    learning_rate, optimizer
        The shards' update rule: ``"adagrad"`` (default; gamma, usually ~10x the best
        fixed SGD rate), ``"sgd"`` or ``"momentum"``.
    local_learning_rate
        Rate of the replica's local step on its own copy between fetches; default
        ``learning_rate`` for sgd/momentum and 0 (no local step) for Adagrad, whose
        per-parameter rates live on the shards.
    epochs, max_steps
        Each replica passes over its rows ``epochs`` times; ``max_steps`` stops the run once
        the global step (mini-batch steps summed over replicas) reaches it (replicas finish
        the step they are on, so a few more may be applied).
    warmstart_steps
        Train one replica alone for this many steps before releasing the others (paper).
    x0, seed
        Starting parameters (default zeros) and the seed of the batch order.
    eval_data, eval_every
        Held-out dataset scored every ``eval_every`` global steps and at the end.
    defer_eval
        Keep the parameters due for scoring and score them after training (the history
        keeps the times they were taken at). Scoring then takes no CPU from the replicas:
        use it where the coordinator shares cores with the workers, as on a laptop, and
        when timing a run. Costs a copy of the parameters per scoring point.
    checkpoint_path, checkpoint_every, resume
        Write every shard's slice and optimizer state to this Zarr path every
        ``checkpoint_every`` global steps and at the end (atomically); ``resume=True``
        starts from the checkpoint there.
    wire_dtype
        dtype of parameters and gradients in transit (``"float32"`` halves the bytes;
        shards keep float64 values and optimizer state).
    sparse
        Push and fetch only the rows of the model's row table (word embeddings) that
        batches touch, plus the dense rest; default: on when the model has a row table
        and the update rule allows it exactly (Adagrad, SGD; not momentum), unless
        ``overlap`` is on.
    overlap
        Keep each push (and the fetch riding on its reply) in flight while the replica
        computes its next gradient: hides the round trip to the shards, adds one step of
        staleness. Dense transfer only.
    callback
        Called with each history entry (an ``OptimizeResult`` with ``time``, ``step``,
        ``train_loss`` and held-out metrics when scored); ``StopIteration`` stops the run.

    Returns
    -------
    OptimizeResult
        ``x``, ``nit`` (global steps), ``status``/``success``/``message``, ``history`` and
        ``stats`` (updates/s, examples/s, staleness histogram, bytes moved, pushes per
        shard and steps per replica).
    """
    checked = check_replica_run(model, data, n_replicas=n_replicas, batch_size=batch_size, epochs=epochs,
                                max_steps=max_steps, eval_data=eval_data, eval_every=eval_every,
                                defer_eval=defer_eval)
    dataset, rows, batch_size, epochs = checked.dataset, checked.rows, checked.batch_size, checked.epochs
    max_steps, eval_set, eval_every = checked.max_steps, checked.eval_set, checked.eval_every
    n_param_shards = check_int(n_param_shards, "n_param_shards")
    n_fetch, n_push = check_int(n_fetch, "n_fetch"), check_int(n_push, "n_push")
    if n_param_shards > model.n_params:
        raise ConfigurationError(
            f"n_param_shards ({n_param_shards}) is larger than the model's {model.n_params} parameters"
        )
    rule = make_rule(optimizer, learning_rate=learning_rate)
    if wire_dtype not in ("float64", "float32"):
        raise ConfigurationError(f"wire_dtype must be 'float64' or 'float32', got {wire_dtype!r}")
    if local_learning_rate is None:
        local_learning_rate = 0.0 if optimizer == "adagrad" else rule.hyper["learning_rate"]
    if checkpoint_every is not None:
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every")
    if (checkpoint_every is not None or resume) and checkpoint_path is None:
        raise ConfigurationError("checkpoint_every and resume need checkpoint_path")
    warmstart_steps = check_int(warmstart_steps, "warmstart_steps", minimum=0)
    x_start = model.init_params(None) if x0 is None else model.check_params(x0, "x0")
    table = getattr(model, "row_table", None)
    if sparse is None:
        sparse = table is not None and rule.sparse_exact and not overlap
    elif sparse and table is None:
        raise ConfigurationError(f"sparse=True needs a model with a row table (e.g. EmbeddingLM); {model!r} has none")
    elif sparse and not rule.sparse_exact:
        raise ConfigurationError(
            f"sparse=True needs an update rule where a zero gradient is a zero step; {optimizer!r} is not one"
        )
    if not isinstance(overlap, bool):
        raise ConfigurationError(f"overlap must be True or False, got {overlap!r}")
    if overlap and sparse:
        raise ConfigurationError(
            "overlap=True needs dense transfer: a row-sparse fetch must arrive before the batch that reads "
            "its rows; pass sparse=False"
        )
    bounds = param_bounds(model.n_params, n_param_shards, table)
    config = model_config(model)

    states = None
    if resume and checkpoint_path is not None and os.path.exists(checkpoint_path):
        states, _ = read_shard_states(checkpoint_path, model_config=config, rule=rule.name)
        if [(s["start"], s["stop"]) for s in states] != bounds:
            raise ConfigurationError(
                f"checkpoint {str(checkpoint_path)!r} has {len(states)} parameter shards "
                f"{[(s['start'], s['stop']) for s in states]}; this run asks for {bounds}"
            )

    with resolve_client(client) as active:
        run = _DownpourRun(active, model, dataset, rows, bounds, rule, x_start, states, eval_set,
                           table if sparse else None)
        try:
            return run.train(
                ReplicaConfig(batch_size, n_fetch, n_push, epochs, float(local_learning_rate), seed,
                              wire_dtype, bool(sparse), overlap),
                max_steps=max_steps, warmstart_steps=warmstart_steps, eval_every=eval_every, defer_eval=defer_eval,
                checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                callback=callback, poll_interval=poll_interval, model_config=config,
            )
        finally:
            run.close()


class _DownpourRun:
    """The actors and tasks of one run, and the coordinator's bookkeeping.

    A parameter shard lost with its worker is re-created on a live worker from the latest
    checkpoint (:meth:`recover_lost_shards`) and published in the run's
    :class:`ShardDirectory`, where replicas pick it up; Dask itself restarts a replica task
    whose worker died, and the replica resumes at the step the shards have counted for it.
    """

    def __init__(self, client, model, data, rows, bounds, rule, x_start, states, eval_set, table) -> None:
        self.client, self.model, self.data, self.rows = client, model, data, rows
        self.bounds, self.rule, self.eval_set, self.table = bounds, rule, eval_set, table
        self.x_start = x_start
        self.token = uuid.uuid4().hex[:8]
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"]) or [None]
        self.workers = workers
        self.shard_futures: list[Future] = [self._new_shard(i, workers[i % len(workers)]) for i in range(len(bounds))]
        self.shards = [f.result() for f in self.shard_futures]
        self.start_steps = 0
        if states is not None:
            for shard, state in zip(self.shards, states):
                shard.set_state(state).result()
            self.start_steps = int(states[0]["steps"])
        self.directory = ShardDirectory(f"downpour-{self.token}", len(bounds), client)
        self.generation = 0
        self.directory.publish(self.shard_futures, self.generation)
        self.replica_futures: dict[int, Future] = {}
        self.metrics = MetricsStream(client, "downpour")
        self.recoveries: list[dict[str, Any]] = []
        self.checkpoint_path: Any = None
        self.model_config: dict[str, Any] = {}
        self.max_steps: int | None = None
        self.stop_reason: str | None = None

    def _new_shard(self, i: int, worker: str | None, generation: int = 0) -> Future:
        a, b = self.bounds[i]
        return self.client.submit(
            ParameterShard, i, a, b, self.x_start[a:b], self.rule.name, self.rule.hyper, self.table,
            actor=True, key=f"downpour-shard-{self.token}-{i}-{generation}",
            workers=None if worker is None else [worker], pure=False,
        )

    # -- shards, with recovery ------------------------------------------------------------

    def recover_lost_shards(self) -> None:
        """Re-create every shard whose worker died, from the latest checkpoint, on a live worker."""
        lost = [i for i, f in enumerate(self.shard_futures) if f.status == "error"]
        if not lost:
            return
        started = time.perf_counter()
        if self.checkpoint_path is None:
            raise WorkerLostError(
                f"parameter shard(s) {lost} were lost with their worker and cannot be restored without "
                "a checkpoint; pass checkpoint_path and checkpoint_every to survive worker failures"
            )
        if os.path.exists(self.checkpoint_path):
            states, attrs = read_shard_states(self.checkpoint_path, model_config=self.model_config, rule=self.rule.name)
            restored_step = int(attrs.get("steps", 0))
        else:  # no checkpoint written yet: the latest state saved is the start
            states = [{"start": a, "stop": b, "values": self.x_start[a:b],
                       "optimizer_state": self.rule.init(self.x_start[a:b]), "version": 0,
                       "steps": self.start_steps} for a, b in self.bounds]
            restored_step = self.start_steps
        live = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        if not live:
            raise WorkerLostError(f"parameter shard(s) {lost} were lost and no worker is left to re-create them on")
        holding = {w for f in self.shard_futures if f.status != "error" for w in self.client.who_has([f]).get(f.key, ())}
        candidates = [w for w in live if w not in holding] or live
        self.generation += 1
        for n, i in enumerate(lost):
            self.shard_futures[i].release()
            future = self._new_shard(i, candidates[n % len(candidates)], self.generation)
            shard = future.result()
            shard.set_state(states[i]).result()
            if self.max_steps is not None:
                shard.stop_at(self.max_steps).result()
            if self.stop_reason is not None:
                shard.request_stop(self.stop_reason).result()
            self.shard_futures[i], self.shards[i] = future, shard
        self.directory.publish(self.shard_futures, self.generation)
        self.recoveries.append({"shards": lost, "restored_step": restored_step,
                                "seconds": time.perf_counter() - started})

    def shard_calls(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` on every shard in parallel, re-creating lost shards first."""
        for _ in range(3):
            self.recover_lost_shards()
            calls = [getattr(s, method)(*args) for s in self.shards]
            try:
                return [c.result() for c in calls]
            except Exception:
                if not any(f.status == "error" for f in self.shard_futures):
                    raise
        raise WorkerLostError(f"parameter shards kept failing during {method!r}")

    def fetch_params(self) -> np.ndarray:
        return np.concatenate([reply[0] for reply in self.shard_calls("fetch")])

    def stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self.shard_calls("request_stop", reason)

    def launch(self, replicas: range, config: ReplicaConfig, first_epoch: int) -> None:
        for r in replicas:
            # After the shards' workers, so that with spare workers replicas and shards do not share.
            worker = self.workers[(len(self.bounds) + r) % len(self.workers)]
            self.replica_futures[r] = self.client.submit(
                run_replica, r, model=self.model, data=self.data, rows=self.rows[r],
                # Shards come from the directory, not as arguments: a task depending on an
                # actor's future is failed by Dask when that actor's worker dies.
                shards=None, bounds=self.bounds, config=config, first_epoch=first_epoch,
                directory=self.directory, key=f"downpour-replica-{self.token}-{r}",
                workers=None if worker is None else [worker], allow_other_workers=True,
                pure=False,
            )

    def train(self, config: ReplicaConfig, *, max_steps, warmstart_steps, eval_every, defer_eval,
              checkpoint_path, checkpoint_every, callback, poll_interval, model_config) -> OptimizeResult:
        started = time.perf_counter()
        n_replicas = len(self.rows)
        steps_per_epoch = sum(math.ceil((b - a) / config.batch_size) for a, b in self.rows)
        first_epoch = self.start_steps // steps_per_epoch
        self.checkpoint_path, self.model_config, self.max_steps = checkpoint_path, model_config, max_steps
        if max_steps is not None:
            self.shard_calls("stop_at", max_steps)
            if self.start_steps >= max_steps:
                self.stop(f"max_steps ({max_steps}) reached")
        self.config, self.first_epoch, self.warmstart_steps = config, first_epoch, warmstart_steps
        self.released = warmstart_steps == 0 or n_replicas == 1
        self.launch(range(n_replicas) if self.released else range(1), config, first_epoch)
        history, status, message = watch(self, started=started, start_steps=self.start_steps, eval_every=eval_every,
                                         checkpoint_every=checkpoint_every, callback=callback,
                                         poll_interval=poll_interval, defer_eval=defer_eval)

        replica_stats = [f.result() for f in self.replica_futures.values()]
        shard_stats = self.shard_calls("stats")
        x = self.fetch_params()
        wall = time.perf_counter() - started
        steps = max(st["steps"] for st in shard_stats)
        if checkpoint_path is not None and status != 3:
            self.checkpoint(steps)
        final: dict[str, Any] = {"time": wall, "step": steps}
        if self.eval_set is not None:
            final.update(held_out_metrics(self.model, x, self.eval_set))
            history.append(final)
        staleness: Counter[int] = Counter()
        for s in shard_stats:
            staleness.update({int(k): v for k, v in s["staleness"].items()})
        pushes = sum(s["version"] for s in shard_stats)
        examples = sum(r["examples"] for r in replica_stats)
        stats_out = {
            "wall_seconds": wall,
            "global_steps": steps,
            "steps_this_run": steps - self.start_steps,
            "updates_per_second": pushes / wall,
            "examples_per_second": examples / wall,
            "staleness": {str(k): v for k, v in sorted(staleness.items())},  # str keys: JSON, repr
            "bytes_in": sum(s["bytes_in"] for s in shard_stats),
            "bytes_out": sum(s["bytes_out"] for s in shard_stats),
            "dense_bytes_in": sum(s["dense_bytes_in"] for s in shard_stats),
            "dense_bytes_out": sum(s["dense_bytes_out"] for s in shard_stats),
            "sparse": self.table is not None,
            "pushes_per_shard": [s["version"] for s in shard_stats],
            "steps_per_replica": [r["steps"] for r in replica_stats],
            "replica_first_steps": [r["first_step"] for r in replica_stats],
            "replica_reconnects": [r["reconnects"] for r in replica_stats],
            "shard_recoveries": self.recoveries,
            **step_timing(replica_stats),
        }
        self.metrics.send(**final, pushes_per_shard=stats_out["pushes_per_shard"], finished=True)
        return OptimizeResult(
            x=x, nit=steps, status=status, success=status == 0, message=message,
            history=history, stats=stats_out, final=final, run_id=self.metrics.run,
        )

    def poll(self) -> Progress:
        """Replica failures, the shards' counters, and the warm start's release."""
        finished = all(f.done() for f in self.replica_futures.values())
        for f in self.replica_futures.values():
            if f.status == "error":
                self.stop("a replica failed")
                f.result()
        all_stats = self.shard_calls("stats")
        stats = all_stats[0]  # every push reaches every shard: shard 0 has the whole count
        steps = max(st["steps"] for st in all_stats)  # a restored shard counts from its checkpoint
        if not self.released and steps >= self.warmstart_steps:
            self.launch(range(1, len(self.rows)), self.config, self.first_epoch)
            self.released, finished = True, False
        reason = next((st["stop_reason"] for st in all_stats if st["stop_reason"]), None)
        running = sum(not f.done() for f in self.replica_futures.values())
        return Progress(steps, stats["loss_sum"], stats["loss_count"], reason, finished,
                        {"pushes": stats["version"], "staleness": stats["staleness"], "replicas_running": running})

    def current_params(self) -> np.ndarray:
        return self.fetch_params()

    def checkpoint(self, steps: int) -> None:
        states = self.shard_calls("get_state")
        write_shard_states(self.checkpoint_path, states, model_config=self.model_config, rule=self.rule.name,
                           hyper=self.rule.hyper, extra={"steps": int(steps)})

    def close(self) -> None:
        for f in self.replica_futures.values():
            f.cancel()
        for f in self.shard_futures:
            f.release()
        self.shards = []
        self.directory.delete()
