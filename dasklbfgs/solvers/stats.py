"""Each solver family's statistics (``result.stats``): what its numbers mean and how a
report renders them.

Kept apart from :class:`~dasklbfgs.solvers.result.Result` (a scipy ``OptimizeResult``) so that
registering a solver, which names its statistics class, does not import scipy.optimize: the
command line's flags and the workers read the registry.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from dasklbfgs._format import human_bytes, table_lines

if TYPE_CHECKING:
    from dasklbfgs.solvers.result import Result

__all__ = ["DownpourStats", "PeerStats", "RunStats", "SandblasterStats"]


class RunStats(dict[str, Any]):
    """One run's statistics, as plain JSON-ready facts, and what the family's numbers mean.

    ``unit`` is what ``result.nit`` and a history entry's ``step`` count, ``loss_name`` what
    a history entry's ``loss`` is. A family's subclass says how to summarise
    (:meth:`summary`: the figures a report keeps) and render (:meth:`lines`) itself, so no
    front end needs to know which solver ran.
    """

    unit: ClassVar[str]
    loss_name: ClassVar[str]
    #: the dashboard's Training page shows a panel of per-replica progress
    has_replicas: ClassVar[bool] = False
    #: the other figures the run's step events carry that the Training page draws (it reserves
    #: their panels when the run starts, so that none appears mid-run)
    event_figures: ClassVar[tuple[str, ...]] = ()

    def summary(self, result: Result) -> dict[str, Any]:
        """The figures a report keeps of ``result`` (its ``objective`` where the run measured
        the full objective; reports score the others on the data)."""
        raise NotImplementedError

    def lines(self, result: Result) -> list[str]:
        """The report's lines about the work done, each starting with a 10-wide label."""
        raise NotImplementedError

    def iterations(self, nit: int) -> int:
        """Passes of the optimizer as scikit-learn's ``n_iter_`` counts them."""
        raise NotImplementedError


class SandblasterStats(RunStats):
    """Total and per-evaluation seconds, evaluations, backups launched and won, whether the
    shards were cached, portions, and the bytes the coordinator received in sharded mode."""

    unit = "iteration"
    loss_name = "objective"
    event_figures = ("gnorm", "rows_per_worker")

    def summary(self, result: Result) -> dict[str, Any]:
        return {"objective": result.fun, "iterations": result.nit, "evaluations": result.nfev,
                "seconds": self["total_seconds"],
                "seconds_per_evaluation": self["eval_seconds_median"],
                "backup_tasks": {"launched": self["backups_launched"], "won": self["backups_won"]}}

    def lines(self, result: Result) -> list[str]:
        per_evaluation = self["eval_seconds_median"] or math.nan
        return [f"work       {result.nit} iterations, {result.nfev} evaluations, {self['total_seconds']:.2f} s "
                f"({1e3 * per_evaluation:.1f} ms per evaluation)",
                *_backup_lines(self["backups_launched"], self["backups_won"]),
                *_online_lines(self.get("online"))]

    def iterations(self, nit: int) -> int:
        return nit


def _backup_lines(launched: int, won: int) -> list[str]:
    """The report's line on Sandblaster's backup tasks, in words, if it launched any: copies of a
    slow worker's share of an evaluation run on an idle worker, the first to finish counted."""
    if not launched:
        return []
    return [f"backups    {launched} slow task{'' if launched == 1 else 's'} copied to idle workers; "
            f"{won} cop{'y' if won == 1 else 'ies'} finished first"]


def _online_lines(online: dict[str, Any] | None) -> list[str]:
    """The report's line on Sandblaster's online start, if it made one."""
    if not online:
        return []
    passes = online["passes"]
    losses = ", ".join(f"{loss:.4g}" for loss in online["progressive_loss"])
    return [f"online     {passes} pass{'' if passes == 1 else 'es'} of Adagrad before L-BFGS, "
            f"{online['seconds']:.2f} s (progressive loss {losses})"]


class _ReplicaStats(RunStats):
    """Updates/s, examples/s, steps per replica, per-step timing and ``epochs`` (global
    steps over the global steps of one epoch)."""

    unit = "global step"
    loss_name = "mini-batch loss"
    has_replicas = True

    def summary(self, result: Result) -> dict[str, Any]:
        return {"steps": result.nit, "seconds": self["wall_seconds"], "updates_per_second": self["updates_per_second"],
                "examples_per_second": self["examples_per_second"], "steps_per_replica": self["steps_per_replica"]}

    def lines(self, result: Result) -> list[str]:
        return [f"work       {result.nit} steps over replicas {self['steps_per_replica']} in "
                f"{self['wall_seconds']:.2f} s "
                f"({self['updates_per_second']:.0f} updates/s, {self['examples_per_second']:.0f} examples/s)"]

    def iterations(self, nit: int) -> int:
        return max(1, math.ceil(self["epochs"]))


class DownpourStats(_ReplicaStats):
    """Also staleness, pushes and bytes per shard, recoveries and hand-overs of shards."""

    event_figures = ("pushes_per_shard", "staleness")

    def summary(self, result: Result) -> dict[str, Any]:
        return {**super().summary(result), "staleness": self["staleness"]}

    def lines(self, result: Result) -> list[str]:
        lags = sorted((int(lag), pushes) for lag, pushes in self["staleness"].items())  # str keys from events
        return [*super().lines(result), *table_lines("staleness", ("updates behind", "pushes"), lags)]


class PeerStats(_ReplicaStats):
    """Also messages and bytes between replicas, center exchanges (EASGD), restarts and the
    chosen replica (neighbours)."""

    def summary(self, result: Result) -> dict[str, Any]:
        summary = {**super().summary(result),
                   "between_replicas": {"messages": self["messages_between_replicas"],
                                        "bytes": self["bytes_between_replicas"],
                                        "center_exchanges": self["center_exchanges"]}}
        if self["chosen_replica"] is not None:
            summary["chosen_replica"] = self["chosen_replica"]
        return summary

    def lines(self, result: Result) -> list[str]:
        lines = [*super().lines(result),
                 f"exchange   {self['messages_between_replicas']} messages, "
                 f"{human_bytes(self['bytes_between_replicas'])} between replicas; "
                 f"{self['center_exchanges']} center exchanges"]
        if self["chosen_replica"] is not None:
            lines.append(f"returned   replica {self['chosen_replica']} (best held-out objective, else recent loss)")
        return lines
