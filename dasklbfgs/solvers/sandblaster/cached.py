"""A dataset's shards kept in the workers' memory across fits: :func:`cached`.

Nobody fits one model: a regularization path, a cross-validation or a user's own loop fits
many on the same rows. A Sandblaster run loads each shard from Zarr into a worker's memory
and releases it when it returns; the next run loads it again. Within ``with cached(data) as
shards:`` the shards are loaded once, every Sandblaster run given ``shards`` (and
:func:`dasklbfgs.evaluate`) uses them where they are, and they are released when the block
ends, whatever happened in it. The runs' results are the bits they have on a dataset they
load themselves: the shards are the same arrays, and the sums are added in portion order.
"""

from __future__ import annotations

import contextlib
import uuid
from types import TracebackType
from typing import Any

import numpy as np
from distributed import Client, Future

from dasklbfgs.cluster import active_client, connect
from dasklbfgs.data.sharded import ShardedDataset, as_dataset
from dasklbfgs.errors import ConfigurationError
from dasklbfgs.solvers.sandblaster.shard_cache import ShardCache

__all__ = ["CachedDataset", "cached"]


class CachedDataset:
    """A :class:`~dasklbfgs.data.ShardedDataset` whose shards stay in the memory of
    ``client``'s workers until :meth:`close` (or the end of its ``with`` block).

    Pass it as a run's ``data`` or ``eval_data`` (any solver's, ``regularization_path``'s) or
    to ``evaluate``: Sandblaster runs compute on its shards, held-out scoring and ``evaluate``
    summarise them where they are, other solvers and ``predict`` read its store as usual. It
    serves the client it was made with only; a run given it and no client runs on that client.
    """

    def __init__(self, dataset: ShardedDataset, client: Client, *, owns_client: bool = False,
                 cache: ShardCache | None = None) -> None:
        self.dataset, self.client = dataset, client
        self._owns_client = owns_client
        if cache is None:
            workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
            if not workers:
                raise ConfigurationError(f"the client's cluster ({client.scheduler.address}) has no workers to "
                                         f"cache {dataset.url!r} on")
            cache = ShardCache(client, dataset, f"cached-{uuid.uuid4().hex[:8]}", workers)
        self._cache: ShardCache | None = cache

    @classmethod
    def of_shards(cls, dataset: ShardedDataset, client: Client, cache: ShardCache) -> CachedDataset:
        """``dataset``'s shards already in memory as ``cache`` (a view of other cached shards:
        a cross-validation fold's), released with it."""
        return cls(dataset, client, cache=cache)

    @property
    def closed(self) -> bool:
        return self._cache is None

    def check_open(self) -> ShardCache:
        """The cached shards; refused once closed."""
        if self._cache is None:
            raise ConfigurationError(f"the cached dataset {self.dataset.url!r} was closed: its shards are no longer "
                                     "in the workers' memory (use it inside its with block)")
        return self._cache

    def shard_cache(self, client: Client) -> ShardCache:
        """The cached shards, for work on ``client``: refused once closed, or on another client."""
        cache = self.check_open()
        if client is not self.client:
            raise ConfigurationError(
                f"the cached dataset {self.dataset.url!r} holds its shards on the cluster of another client "
                f"({self.client.scheduler.address}); run on that client (client=cached.client)")
        return cache

    def shards_for(self, client: Client) -> list[Future]:
        """The futures of the shards, in shard order (each ``(X, y, sample weights)``), for
        work on ``client`` (:meth:`shard_cache`'s refusals)."""
        return list(self.shard_cache(client).shards)

    def objective(self, model: Any, params: np.ndarray) -> tuple[float, np.ndarray]:
        """``model``'s objective and its gradient at ``params`` over the cached rows (penalty
        included; an l1 term is the optimizer's and is not): one evaluation by the workers."""
        from dasklbfgs.solvers.sandblaster.evaluator import MegaBatchEvaluator

        params = model.check_params(params, "params")
        model.check_data(self.dataset)
        evaluator = MegaBatchEvaluator(self.client, model, self.dataset, shards=self.shard_cache(self.client))
        try:
            loss, sums = evaluator.evaluate(params)
        finally:
            evaluator.close()
        return model.objective_from_sums(params, loss, sums, self.dataset.total_weight)

    def close(self) -> None:
        """Release the shards from the workers' memory (and an embedded cluster it started)."""
        cache, self._cache = self._cache, None
        try:
            if cache is not None:
                cache.close()
        finally:
            if self._owns_client:
                self._owns_client = False
                self.client.close()

    def __enter__(self) -> CachedDataset:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        """The dataset's own attributes (``n_samples``, ``schema``, ...)."""
        if name.startswith("_") or name in ("dataset", "client"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"CachedDataset({self.dataset!r}, {'closed' if self.closed else 'cached'})"


def cached(data: Any, *, client: Client | None = None, storage_options: dict[str, Any] | None = None
           ) -> CachedDataset:
    """``data`` (a :class:`~dasklbfgs.data.ShardedDataset`, or its path or URL) loaded into the
    memory of ``client``'s workers (default: the active client, else an embedded cluster that
    closes with it) for many fits::

        with dasklbfgs.cached("ctr.zarr") as shards:
            for l2 in (1e-2, 1e-3, 1e-4):
                result = dasklbfgs.minimize(Logistic(shards.n_features, l2=l2), shards)

    The shards are released at the end of the block (or by :meth:`CachedDataset.close`).
    """
    dataset = as_dataset(data, storage_options)
    if client is not None:
        return CachedDataset(dataset, client)
    existing = active_client()
    if existing is not None:
        return CachedDataset(dataset, existing)
    embedded = connect(dashboard_address=None)
    with contextlib.ExitStack() as on_error:
        on_error.callback(embedded.close)
        made = CachedDataset(dataset, embedded, owns_client=True)
        on_error.pop_all()
    return made
