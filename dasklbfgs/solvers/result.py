"""The one result type every solver returns."""

from __future__ import annotations

from scipy.optimize import OptimizeResult

__all__ = ["Result"]


class Result(OptimizeResult):
    """A scipy ``OptimizeResult`` (a dict with attribute access) with these fields.

    Every solver
        ``x`` (final parameters), ``nit`` (iterations for Sandblaster, global steps for the
        replica methods), ``status`` (a :class:`~dasklbfgs.optim.lbfgs.Status`),
        ``success`` (``status == Status.CONVERGED``), ``message``, ``history`` (one dict
        per iteration or progress poll), ``solver`` (its registered name), ``run_id`` (the
        id of its metrics events on the dashboard).
    Sandblaster
        ``fun``, ``jac``, ``nfev``, ``njev`` as scipy's; ``timing`` (total and
        per-evaluation seconds, backups launched and won, whether shards were cached,
        bytes the coordinator received in sharded mode); ``n_portions``. History entries:
        ``nit, fun, gnorm, step_length, nfev, time`` and ``eval_*`` when scored.
    Downpour and the peer methods
        ``stats`` (updates/s, examples/s, steps per replica, bytes moved; Downpour:
        staleness, pushes per shard, recoveries; peers: messages between replicas, the
        chosen replica), ``final`` (the last history entry: time, step, held-out scores);
        the peers also ``replicas`` (each replica's parameters, steps and scores).
        History entries: ``step, time``, ``train_loss`` (mean mini-batch loss since the
        previous entry) and ``eval_*`` when scored.
    Sandblaster and Downpour with ``model_partitions`` > 1
        ``partitions``: each partition's worker, bytes and messages sent to its peers, and the
        re-creations after a lost partition, in the one shape
        :func:`~dasklbfgs.parallel.replica.partitions_report` documents.
    """
