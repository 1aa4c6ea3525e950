"""The peer methods' options: the shared replica options plus each method's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dasklbfgs.errors import ConfigurationError
from dasklbfgs.optim.collective import TOPOLOGIES, torus_shape
from dasklbfgs.options import option, override
from dasklbfgs.solvers.common_options import ParamShardOptions, ReplicaOptions

__all__ = ["EASGDOptions", "GossipOptions", "NeighbourOptions", "PeerOptions", "SyncOptions"]


@dataclass(frozen=True, kw_only=True)
class PeerOptions(ReplicaOptions):
    """What every peer method takes on top of the replica options."""

    max_restarts: int = option(3, "times the replicas are restarted after losing a worker (its mailboxes or "
                               "center shards) before the run fails with WorkerLostError", "int", minimum=0)
    wait_timeout: float = option(120.0, "seconds a replica waits for a peer (sync: its sums) before the run fails",
                                 "float", positive=True)

    # What the replicas derive from the options for a run of n_replicas (the defaults: none of it)

    def moving_rate(self, n_replicas: int) -> float:
        """EASGD's moving rate alpha (0: no elastic exchange)."""
        return 0.0

    def grid(self, n_replicas: int) -> tuple[int, int] | None:
        """The neighbours' torus (None: no torus)."""
        return None

    @property
    def weighs_replicas(self) -> bool:
        """Whether each replica carries a weight its parameters are divided by (push-sum)."""
        return False


@dataclass(frozen=True, kw_only=True)
class SyncOptions(PeerOptions):
    solver: ClassVar[str] = "sync"


@dataclass(frozen=True, kw_only=True)
class EASGDOptions(PeerOptions, ParamShardOptions):
    solver: ClassVar[str] = "easgd"

    n_param_shards: int = override(ParamShardOptions, "n_param_shards", default=1)
    tau: int = option(10, "steps between a replica's elastic exchanges with the center", "int", minimum=1)
    alpha: float | None = option(None, "moving rate of the elastic exchange", "float", minimum=0, below=1,
                                 nullable=True, none_means="0.9 / n_replicas, or learning_rate * rho")
    rho: float | None = option(None, "elastic coupling (alpha = learning_rate * rho)", "float", minimum=0,
                               nullable=True, none_means="from alpha")

    def check_together(self) -> None:
        super().check_together()
        if self.alpha is not None and self.rho is not None:
            raise ConfigurationError(
                f"easgd: give alpha ({self.alpha!r}) or rho ({self.rho!r}), not both: alpha = learning_rate * rho"
            )
        if self.rho is not None and not self.learning_rate * self.rho < 1:
            raise ConfigurationError(
                f"easgd: rho ({self.rho!r}) times learning_rate ({self.learning_rate!r}) gives the moving rate "
                f"alpha = {self.learning_rate * self.rho!r}, which must be below 1: lower rho"
            )

    def moving_rate(self, n_replicas: int) -> float:
        """alpha as given, from rho (``learning_rate * rho``), or the paper's 0.9 / n_replicas."""
        if self.alpha is not None:
            return self.alpha
        return self.learning_rate * self.rho if self.rho is not None else 0.9 / n_replicas


@dataclass(frozen=True, kw_only=True)
class GossipOptions(PeerOptions):
    solver: ClassVar[str] = "gossip"

    push_sum: bool = option(False, "push-sum gossip (send half of numerator and weight to a random peer) "
                            "instead of pulling a peer's parameters", "bool")

    @property
    def weighs_replicas(self) -> bool:
        return self.push_sum


@dataclass(frozen=True, kw_only=True)
class NeighbourOptions(PeerOptions):
    solver: ClassVar[str] = "neighbours"

    n_replicas: int = override(ReplicaOptions, "n_replicas", default=4)
    topology: str = option("ring", "who exchanges gradients with whom", "choice", choices=TOPOLOGIES)
    torus_shape: tuple[int, int] | None = option(
        None, "rows, cols of the torus", "ints", length=2, nullable=True,
        none_means="the most nearly square grid of n_replicas")

    def check_together(self) -> None:
        super().check_together()
        if self.torus_shape is not None and self.topology != "torus":
            raise ConfigurationError(
                f"neighbours: torus_shape {self.torus_shape!r} is only for topology='torus', not {self.topology!r}",
                parameters=("torus_shape", "topology"),
            )

    def grid(self, n_replicas: int) -> tuple[int, int] | None:
        """The torus's (rows, cols): as given, or the most nearly square grid (None: a ring)."""
        return torus_shape(n_replicas, self.torus_shape) if self.topology == "torus" else None
