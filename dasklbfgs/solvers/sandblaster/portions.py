"""Splitting the mega-batch into portions: contiguous row ranges inside one data shard."""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

from dasklbfgs.errors import ConfigurationError, PerformanceWarning

DEFAULT_PORTIONS = 8
MANY_PORTIONS = 2000  # past this many tasks per evaluation, Dask's overhead dominates


class Portion(NamedTuple):
    """Rows ``[start, stop)`` of the dataset, inside shard ``shard`` whose first row is
    ``shard_start``; ``index`` fixes its place in the reduction order."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (the method), on purpose: never searched
    shard: int
    shard_start: int
    start: int
    stop: int

    @property
    def local(self) -> slice:
        """The portion's rows as a slice of its shard."""
        return slice(self.start - self.shard_start, self.stop - self.shard_start)


def default_portion_rows(n_samples: int, shard_rows: int) -> int:
    """The data cut into about ``DEFAULT_PORTIONS`` portions, never more than a shard each.

    It depends on the data alone, never on the cluster, so the portion plan and with it the
    summation order, and the bits of every result, are the same on any number of workers
    (docs/algorithms.md §1). Few, large portions keep Dask's per-task overhead (about a
    millisecond) small next to the work. Only the shards bound how many workers share the
    work (a portion runs where its shard is); ``portion_rows`` cuts finer for workers with
    many threads.
    """
    return max(1, min(shard_rows, math.ceil(n_samples / DEFAULT_PORTIONS)))


def plan_portions(shard_bounds: list[tuple[int, int]], portion_rows: int) -> list[Portion]:
    """Cut every shard into portions of at most ``portion_rows`` rows, in row order."""
    if isinstance(portion_rows, bool) or not isinstance(portion_rows, int) or portion_rows < 1:
        raise ConfigurationError(f"portion_rows must be a positive integer, got {portion_rows!r}")
    portions: list[Portion] = []
    for shard, (lo, hi) in enumerate(shard_bounds):
        pieces = math.ceil((hi - lo) / portion_rows)
        # Equal-sized pieces: 10 rows in portions of 4 become 4+3+3, not 4+4+2.
        edges = [lo + (hi - lo) * i // pieces for i in range(pieces + 1)]
        for start, stop in zip(edges[:-1], edges[1:]):
            portions.append(Portion(len(portions), shard, lo, start, stop))
    return portions


def warn_if_many(portions: list[Portion], portion_rows: int) -> None:
    """Warn when there are so many portions that Dask's per-task overhead would dominate."""
    if len(portions) > MANY_PORTIONS:
        warnings.warn(f"portion_rows={portion_rows} cuts the data into {len(portions):,} portions, one Dask task "
                      f"each per evaluation (about a millisecond apiece); fewer, larger portions (portion_rows=None "
                      f"chooses {DEFAULT_PORTIONS}) evaluate much faster", PerformanceWarning, stacklevel=3)


CACHE_FRACTION = 0.5  # of the workers' summed memory limit that cached shards may take


def shards_fit(data_bytes: int, memory_limits: list[int], fraction: float = CACHE_FRACTION) -> bool:
    """Whether shards of ``data_bytes`` in all fit in ``fraction`` of the workers' memory
    limits (a limit of 0 means none: then they fit)."""
    if not memory_limits or any(limit <= 0 for limit in memory_limits):
        return True
    return data_bytes <= fraction * sum(memory_limits)


def planned_portions(data: Any, portion_rows: int | None, cache: bool) -> list[Portion]:
    """The portions an evaluator cuts ``data`` into (``portion_rows``: the option; None, the
    default plan: cached, :func:`default_portion_rows`; streaming, one per shard)."""
    if portion_rows is None:
        shard_rows = max((stop - start for start, stop in data.shard_bounds), default=1)
        portion_rows = default_portion_rows(data.n_samples, shard_rows) if cache else shard_rows
    return plan_portions(data.shard_bounds, portion_rows)
