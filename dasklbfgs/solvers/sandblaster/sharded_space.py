"""Sharded L-BFGS state: the coordinator never holds the parameters (docs/algorithms.md §1, §2).

Every d-length vector L-BFGS uses -- the iterate ``x``, the gradient ``g``, the search
direction ``p``, the trial point and its gradient, and the ``m`` pairs ``(s, y)`` -- lives
in slices on :class:`VectorShard` actors. The coordinator (:class:`ShardedSpace`) keeps
only the ``(2m+1)^2`` Gram matrix and scalars:

* the direction: the coordinator computes the two-loop coefficients from the Gram matrix
  and sends those ``2k+1`` numbers; each shard forms its slice of ``p``;
* a trial step ``alpha``: an ``assemble_trial`` task on a worker asks every shard for its
  slice of ``x + alpha p`` and joins them; the portion tasks read the parameters from that
  task's result, their partial sums are added on the workers (the same grouping as the
  local mode, :func:`~dasklbfgs.solvers.sandblaster.tasks.reduce_in_groups`), and a
  ``finish_trial`` task hands each shard its slice of the gradient; only ``f`` and
  ``g . p`` (summed from the shards' partial dot products) come back;
* accepting a step: the shards form ``s`` and ``y`` and return partial dot products with
  the stored pairs, which the coordinator adds into the Gram matrix.

So what reaches the coordinator per iteration does not grow with the number of
parameters (:attr:`ShardedSpace.bytes_received` counts it).

With L1 weights (OWL-QN, docs/algorithms.md §8) or bounds (§12) the shards also do the
element-wise work of :class:`~dasklbfgs.optim.constraints.Constraints` on their slices: the
pseudo-gradient (which their basis holds in place of ``g``; the smooth gradient is kept aside
for the pairs), the alignment of ``p``, the orthant and the projection of each trial point;
the L1 term and ``v . (x_trial - x)`` come back as partial sums like ``g . p``.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
from distributed import Client

from dasklbfgs._wire import aligned
from dasklbfgs.checkpoint_store import checkpoint_root, read_checkpoint, write_checkpoint
from dasklbfgs.data.location import Location
from dasklbfgs.data.shared_paths import workers_not_seeing
from dasklbfgs.errors import CheckpointError, NonFiniteObjectiveError
from dasklbfgs.models.base import Model
from dasklbfgs.models.sums import add_sums, as_dense, reduce_in_groups
from dasklbfgs.optim.basis import GramMatrix, LocalBasis, keep_pair
from dasklbfgs.optim.constraints import Constraints
from dasklbfgs.optim.vectors import max_abs
from dasklbfgs.solvers.sandblaster.lbfgs_checkpoint import SHARD_KIND

__all__ = ["VectorShard", "ShardedSpace", "vector_bounds"]


def vector_bounds(n: int, n_shards: int) -> list[tuple[int, int]]:
    edges = [n * i // n_shards for i in range(n_shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


class VectorShard:
    """Slice ``[start, stop)`` of every L-BFGS vector, and the vector arithmetic on it."""

    index: int = 0

    def __init__(self, index: int, start: int, stop: int, x: np.ndarray | None, m: int,
                 constraints: Constraints | None = None) -> None:
        n = stop - start
        self.index, self.start, self.stop = index, start, stop
        self.constraints = constraints  # L1 weights and bounds of this slice (None: plain L-BFGS)
        self.x = np.zeros(n) if x is None else np.array(x, dtype=np.float64)  # None: start from zeros
        if constraints is not None:
            constraints.project(self.x)  # a start outside the box starts on its nearest point
        self.g = np.zeros(n)  # the smooth gradient; the basis holds the pseudo-gradient under constraints
        self.orthant: np.ndarray | None = None
        self.p = np.zeros(n)
        self.x_trial = self.x.copy()
        self.g_trial = np.zeros(n)
        # This slice of the pairs and of g; the coordinator keeps the Gram matrix (the
        # basis' own, of the slice alone, goes unused).
        self.basis = LocalBasis(n, m)

    async def trial_params(self, alpha: float | None) -> np.ndarray:
        """This slice of ``x + alpha p`` (``None``: of ``x``), remembered as the trial point."""
        self.x_trial = self.x.copy() if alpha is None else self.x + alpha * self.p
        if self.constraints is not None and alpha is not None:
            self.constraints.project_trial(self.x_trial, self.orthant)
        return self.x_trial

    async def set_trial_gradient(self, g: np.ndarray) -> tuple[float, float, float]:
        """Store this slice of the trial point's gradient; return its parts of ``g . p``, of
        the L1 term and of ``v . (x_trial - x)`` (both 0 without constraints)."""
        self.g_trial = aligned(np.asarray(g, dtype=np.float64))  # arrived over the wire
        if self.constraints is None:
            return float(self.g_trial @ self.p), 0.0, 0.0
        return (float(self.g_trial @ self.p), self.constraints.l1_term(self.x_trial),
                float(self.basis.g @ (self.x_trial - self.x)))

    async def set_direction(self, delta: np.ndarray, k: int) -> float:
        """``p = sum_l delta_l b_l`` over ``[s_0..s_{k-1}, y_0..y_{k-1}, g]`` (with constraints:
        aligned with ``-v`` and the box, and the orthant set); returns this slice's part of ``g . p``."""
        if k != self.basis.k:
            raise RuntimeError(f"vector shard {self.index} holds {self.basis.k} pairs, the coordinator {k}")
        self.p = self.basis.combine(aligned(delta))  # delta arrived over the wire
        if self.constraints is not None:
            self.constraints.align(self.x, self.p, self.basis.g)
            self.orthant = self.constraints.orthant(self.x, self.basis.g)
        return float(self.basis.g @ self.p)

    async def curvature(self) -> np.ndarray:
        """Parts of ``s . y`` and ``-g . s`` for the trial step (see :func:`keep_pair`; ``y``
        from the smooth gradients, ``g`` the basis' own: the pseudo-gradient under L1)."""
        s, y = self.x_trial - self.x, self.g_trial - self.g
        return np.array([s @ y, -(self.basis.g @ s)])

    async def accept(self, push: bool) -> dict[str, Any]:
        """Move to the trial point (storing the pair when ``push``); return the partial dot
        products the Gram matrix needs and this slice's ``max |g|``."""
        pair = (self.x_trial - self.x, self.g_trial - self.g) if push else None
        self.x = self.x_trial.copy()
        return self._take_gradient(self.g_trial.copy(), pair)

    def _take_gradient(self, g: np.ndarray, pair: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
        """Take the smooth gradient ``g`` (after storing ``pair``); the basis gets it, or with
        constraints the pseudo-gradient."""
        self.g = g
        v = g if self.constraints is None else self.constraints.pseudo_gradient(self.x, g)
        pair_dots, grad_dots = self.basis.advance(pair, v)
        return {"grad": grad_dots, "gmax": max_abs(v)} | ({} if pair_dots is None else {"pair": pair_dots})

    async def drop_pairs(self) -> None:
        self.basis.drop_pairs()

    async def get(self, name: str) -> np.ndarray:
        """This slice of ``x`` or ``g`` (for the final result)."""
        return {"x": self.x, "g": self.basis.g}[name].copy()

    async def save(self, path: Location) -> None:
        """Write this slice of ``x``, ``g`` and the pairs as a checkpoint at ``path`` (from
        this worker: a URL is reached with the location's storage options)."""
        S, Y = self.basis.pairs()
        write_checkpoint(path, {"x": self.x, "g": self.g, "S": S, "Y": Y}, kind=SHARD_KIND,
                         attrs={"index": self.index, "start": self.start, "stop": self.stop,
                                "slots": self.basis.slots})

    async def restore(self, path: Location) -> dict[str, Any]:
        """Take this slice's state from the checkpoint at ``path`` (verified); return the
        gradient's partial dot products, as after accepting a step."""
        arrays, attrs = read_checkpoint(path, kind=SHARD_KIND)
        if (attrs.get("start"), attrs.get("stop")) != (self.start, self.stop):
            raise CheckpointError(
                f"checkpoint {str(path)!r} holds slice [{attrs.get('start')}, {attrs.get('stop')}), "
                f"not vector shard {self.index}'s [{self.start}, {self.stop})"
            )
        k = arrays["S"].shape[0]
        if k > self.basis.m:
            raise CheckpointError(f"checkpoint {str(path)!r} holds {k} pairs; this run keeps {self.basis.m} (history)")
        self.x = arrays["x"].copy()
        self.x_trial = self.x.copy()
        self.basis.restore_pairs(arrays["S"], arrays["Y"], attrs.get("slots"))
        return self._take_gradient(arrays["g"].copy())


def assemble_trial(shards: list[Any], alpha: float | None) -> np.ndarray:
    """On a worker: the parameters ``x + alpha p``, joined from the shards' slices."""
    calls = [s.trial_params(alpha) for s in shards]
    return np.concatenate([c.result() for c in calls])


def finish_trial(model: Model, params: np.ndarray, n: int, bounds: list[tuple[int, int]], shards: list[Any],
                 total: tuple[float, np.ndarray], transform: Any = None) -> tuple[float, float, float]:
    """On a worker: the objective from the added sums; each shard gets its slice of the
    gradient (in the optimizer's coordinates when a ``transform`` standardizes them) and
    answers with its parts of ``g . p``, the L1 term and ``v . (x_trial - x)``. Returns
    ``(f + L1 term, g . p, v . (x_trial - x))``. Arrays that arrived over the wire are
    aligned first, so the bits do not depend on placement."""
    f, g = model.objective_from_sums(aligned(params), total[0], aligned(as_dense(total[1])), n)
    if transform is not None:
        g = transform.gradient_to_theta(g)
    calls = [s.set_trial_gradient(g[a:b]) for s, (a, b) in zip(shards, bounds)]
    gp, l1, predicted = (float(sum(part)) for part in zip(*(c.result() for c in calls)))
    return float(f) + l1, gp, predicted


def standardized_to_params(transform: Any, theta: np.ndarray) -> np.ndarray:
    """On a worker: the model's parameters from the shards' standardized coordinates."""
    transform.mean, transform.std = aligned(transform.mean), aligned(transform.std)
    return transform.to_params(aligned(theta))


class ShardedSpace:
    """The coordinator's side: Gram matrix and scalars; vectors on :class:`VectorShard` actors."""

    def __init__(self, client: Client, evaluator: Any, model: Model, total_weight: float, x0: np.ndarray | None,
                 m: int, n_shards: int, transform: Any = None, constraints: Constraints | None = None) -> None:
        """``x0`` in the optimizer's coordinates (None: zeros, made on the shards); ``transform`` (a
        :class:`~dasklbfgs.solvers.sandblaster.standardize.Standardizer`, per-feature scales only)
        maps them to the model's parameters on the workers; ``constraints`` (L1 weights and bounds
        in the optimizer's coordinates) make it a space for OWL-QN and the projected method
        (:func:`~dasklbfgs.optim.owlqn.owlqn_minimize`)."""
        self.client, self.evaluator, self.model, self.n = client, evaluator, model, total_weight
        self.transform = transform
        self.size = model.n_params
        self.orthants = constraints is not None
        self.bounds = vector_bounds(model.n_params, n_shards)
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"]) or [None]
        self._futures = [
            client.submit(VectorShard, i, a, b, None if x0 is None else x0[a:b], m,
                          None if constraints is None else constraints.part(a, b),
                          actor=True, pure=False,
                          workers=None if workers[0] is None else [workers[i % len(workers)]])
            for i, (a, b) in enumerate(self.bounds)
        ]
        # actor handles (distributed.actor.Actor, whose method calls return futures; Dask types
        # an actor task's result as the class itself)
        self.shards: list[Any] = [f.result() for f in self._futures]
        self.basis = GramMatrix(m)
        self.bytes_received = 0  # what reached this process from shards and tasks
        self._gmax = np.inf
        self._last: tuple[float | None, float] | None = None  # (alpha, f) of the last trial

    def _receive(self, value: Any) -> Any:
        self.bytes_received += len(pickle.dumps(value, protocol=5))
        return value

    def _on_shards(self, method: str, *args: Any) -> list[Any]:
        calls = [getattr(s, method)(*args) for s in self.shards]
        return [self._receive(c.result()) for c in calls]

    def _evaluate(self, alpha: float | None) -> tuple[float, float, float]:
        """``(f + L1 term, g . p, v . (x_trial - x))`` at ``x + alpha p`` (projected under L1)."""
        client = self.client
        theta = client.submit(assemble_trial, self.shards, alpha, pure=False)
        params = theta if self.transform is None else client.submit(standardized_to_params, self.transform, theta,
                                                                      pure=False)
        parts = self.evaluator.portion_sums(params)
        total = reduce_in_groups(parts, lambda *ps: client.submit(add_sums, *ps, pure=False))
        finish = client.submit(finish_trial, self.model, params, self.n, self.bounds, self.shards, total,
                               self.transform, pure=False)
        f, gp, predicted = self._receive(finish.result())
        for future in {theta, params, *parts, total, finish}:
            future.release()
        self._last = (alpha, f)
        return f, gp, predicted

    def _take_gradient(self, replies: list[dict[str, Any]]) -> None:
        k = self.basis.k
        grad = np.sum([r["grad"] for r in replies], axis=0)
        self.basis.set_gradient_dots(grad[:k], grad[k : 2 * k], float(grad[2 * k]))
        self._gmax = max(r["gmax"] for r in replies)

    # -- what lbfgs_minimize asks of a space ---------------------------------------------

    def start(self) -> float:
        f, _, _ = self._evaluate(None)
        self._take_gradient(self._on_shards("accept", False))  # the first point is the iterate
        if not (np.isfinite(f) and np.isfinite(self._gmax)):
            raise NonFiniteObjectiveError(
                f"the objective at x0 is not finite (f = {f}); check the data scale and x0")
        return f

    def set_direction(self, delta: np.ndarray) -> float:
        """Point along the coefficients ``delta``; returns ``g . p`` (OWL-QN: ``v . p`` after
        the sign alignment)."""
        if self.basis.k == 0:
            self._on_shards("drop_pairs")  # mirror a restart from steepest descent
        return float(sum(self._on_shards("set_direction", np.asarray(delta, dtype=np.float64), self.basis.k)))

    def trial(self, alpha: float) -> tuple[float, float]:
        """L-BFGS: ``(f, g . p)``; OWL-QN: ``(F, v . (x_trial - x))`` at the projected point."""
        f, gp, predicted = self._evaluate(alpha)
        return (f, predicted) if self.orthants else (f, gp)

    def accept(self, alpha: float) -> float:
        if self._last is None or self._last[0] != alpha:
            raise RuntimeError(f"step {alpha} is not the last trial evaluated ({self._last})")
        sy, descent = np.sum(self._on_shards("curvature"), axis=0)
        push = keep_pair(sy, descent)
        if push:
            self.basis.make_room()
        replies = self._on_shards("accept", push)
        if push:
            k = self.basis.k
            pair = np.sum([r["pair"] for r in replies], axis=0).reshape(4, k + 1)
            self.basis.add_pair(*pair)
        self._take_gradient(replies)
        return self._last[1]

    def gmax(self) -> float:
        return float(self._gmax)

    # -- checkpoints (dasklbfgs.solvers.sandblaster.lbfgs_checkpoint) -----------------------------------

    def save_shards(self, group: Location) -> None:
        """Each shard writes its slices to ``group/shards/<i>`` from its own worker (a local
        ``group`` only if the workers share its folder: else the commit would publish a
        checkpoint without them)."""
        blind = workers_not_seeing(self.client, group / "zarr.json")
        if blind:
            raise CheckpointError(
                f"worker {blind[0]} cannot see the folder the checkpoint is written in ({group.url!r}): with "
                "state='sharded' the workers write their slices of it, so a local checkpoint path must be on a "
                "filesystem they share with this process; on a cluster without one, give a URL (s3://, gs://, ...)")
        calls = [s.save(group / "shards" / str(i)) for i, s in enumerate(self.shards)]
        for c in calls:
            c.result()

    def restore(self, checkpoint: Location, basis: GramMatrix) -> None:
        """Continue from a checkpoint: the coordinator's Gram matrix, the shards' slices
        (below the checkpoint's group: at a URL, the version its manifest names)."""
        root = checkpoint_root(checkpoint)
        calls = [s.restore(root / "shards" / str(i)) for i, s in enumerate(self.shards)]
        replies = [self._receive(c.result()) for c in calls]
        self.basis = basis
        self._take_gradient(replies)

    def x(self) -> np.ndarray:
        """The iterate, gathered from the shards (only for callbacks and the final result)."""
        return np.concatenate([c.result() for c in [s.get("x") for s in self.shards]])

    def g(self) -> np.ndarray:
        return np.concatenate([c.result() for c in [s.get("g") for s in self.shards]])

    def close(self) -> None:
        self.client.cancel(self._futures, force=True)  # handles passed to tasks must not keep them alive
        self.shards = []
