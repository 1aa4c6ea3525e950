"""The one result type every solver returns (its ``stats`` are :mod:`dasklbfgs.solvers.stats`)."""

from __future__ import annotations

from scipy.optimize import OptimizeResult

__all__ = ["Result"]


class Result(OptimizeResult):
    """A scipy ``OptimizeResult`` (a dict with attribute access) of one shape for every solver.

    Fields
        ``x`` (final parameters), ``fun`` (Sandblaster: the objective at ``x``; the replica methods:
        the mean mini-batch loss of the last progress poll, ``nan`` if none was reported), ``nit``
        (what ``stats.unit`` says: iterations or global steps), ``status`` (a
        :class:`~dasklbfgs.optim.lbfgs.Status`), ``success`` (``status.succeeded``: ``CONVERGED``,
        or a replica method's ``COMPLETED``), ``message``, ``history`` (one dict per iteration or
        progress poll, every entry with ``step`` and ``time``, with ``loss`` (the quantity
        ``stats.loss_name`` names) where one was measured and ``eval_*`` where held-out data was
        scored), ``solver`` (its registered name), ``run_id`` (the id of its metrics events on the
        dashboard) and ``stats``: the solver family's :class:`~dasklbfgs.solvers.stats.RunStats`, a
        dict that summarises (:meth:`~dasklbfgs.solvers.stats.RunStats.summary`) and renders
        (:meth:`~dasklbfgs.solvers.stats.RunStats.lines`) itself.
    Runs with ``score=True`` also
        ``scores``: ``{"train": metrics, "test": metrics}`` (test with ``eval_data``), every
        metric of the model's task as :func:`dasklbfgs.evaluate` gives them (empty, with a
        :class:`~dasklbfgs.errors.MetricsWarning`, if scoring failed); ``score_curves``: by
        split, what the score figures draw (``evaluate(..., curves=True)``'s ``"curves"``).
    Sandblaster also
        ``jac``, ``nfev``, ``njev`` as scipy's; history entries also have ``gnorm``,
        ``step_length`` and ``nfev``.
    The peer methods also
        ``replicas`` (each replica's parameters, steps and scores).
    Runs with ``model_partitions`` > 1 also
        ``partitions``: each partition's worker, bytes and messages sent to its peers, and the
        re-creations after a lost partition, in the one shape
        :func:`~dasklbfgs.parallel.replica.partitions_report` documents.
    """
