"""Which workers straggle in an evaluation, and which may take their work: one rule for
the three ways an evaluation runs (docs/algorithms.md §1, backup tasks).

The rule is MapReduce's: back up the work of those progressing markedly slower than the
rest, once some worker is idle. Nothing is a straggler until some worker is *idle* (none
of the evaluation's work left for it). The fastest idle worker's rate, the rows it
computed over the seconds it took, is the *reference*. A busy worker is a straggler once
it has been at its work ``slack`` times as long as the reference would take for the rows
it is credited with (its rate is then ``slack`` times below the reference's), and at
least ``floor`` seconds longer than that: a backup's own round trip through the
scheduler takes about that long, so it could not win sooner. The stragglers' outstanding
portions go to the idle workers, fastest first.

A busy worker is credited with the rows it reported done plus the rows it is computing
(in flight), as if those were about to end: no worker is a straggler merely because the
work in its hands has not ended yet. What each way of evaluating feeds the rule:

- **direct calls** (:mod:`.direct_calls`): a worker answers for all its portions at
  once, so all of them are in flight until it answers;
- **tasks** pinned to the holders of the shards: a worker's portions are those pinned to
  it, each reported as it ends, one per thread of the worker in flight;
- **streaming** (no pinning, Dask hands portions to free workers): a worker's portions are
  those it computed and those it holds; it is idle only when it holds none and none waits
  in the scheduler's queue.

Pure: the evaluation gathers the progress from Dask (:mod:`.collection`) and the direct
calls from their answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BACKUP_ROUND_TRIP_SECONDS", "Progress", "StragglerPolicy", "Verdict", "portion_progress"]

#: A worker is never a straggler while it is less late than this: a backup's own trip
#: through the scheduler takes about as long, so it could not win (and a millisecond of
#: jitter would send every small evaluation down the slower task path).
BACKUP_ROUND_TRIP_SECONDS = 0.025


@dataclass(frozen=True)
class Progress:
    """One worker's progress in one evaluation, in rows."""

    assigned: int  # rows it was given
    done: int  # rows it reported done
    in_flight: int  # rows it is computing, reported only when they end
    elapsed: float  # seconds since the evaluation started: until it finished when idle, until now when busy

    @property
    def idle(self) -> bool:
        return self.done >= self.assigned

    @property
    def credited(self) -> int:
        """The rows it may have computed by now: those done, and those in flight."""
        return min(self.assigned, self.done + self.in_flight)

    @property
    def rate(self) -> float:
        """Rows per second: delivered when idle, at best when busy."""
        return self.credited / max(self.elapsed, 1e-9)


@dataclass(frozen=True)
class Verdict:
    """The stragglers (by name) and the idle workers that may take their work, fastest first."""

    stragglers: list[str]
    helpers: list[str]


@dataclass(frozen=True)
class StragglerPolicy:
    """The rule of the module docstring, for a given ``slack`` (``backup_slack``) and ``floor``."""

    slack: float
    floor: float = BACKUP_ROUND_TRIP_SECONDS

    def judge(self, progress: Mapping[str, Progress]) -> Verdict:
        """The stragglers among the workers of ``progress`` and who may take their work."""
        reference = self._reference(progress)
        stragglers = sorted(w for w, p in progress.items()
                            if not p.idle and p.elapsed >= self._late_after(p, reference))
        if not stragglers:
            return Verdict([], [])
        helpers = sorted((w for w, p in progress.items() if p.idle), key=lambda w: (-progress[w].rate, w))
        return Verdict(stragglers, helpers)

    def next_straggler_after(self, progress: Mapping[str, Progress]) -> float:
        """Seconds after the evaluation's start at which the first busy worker becomes a
        straggler if nobody reports more (``inf`` when none would): when to look again."""
        reference = self._reference(progress)
        return min((self._late_after(p, reference) for p in progress.values() if not p.idle), default=math.inf)

    @staticmethod
    def _reference(progress: Mapping[str, Progress]) -> float:
        """The fastest idle worker's rate (0 while no worker is idle)."""
        return max((p.rate for p in progress.values() if p.idle), default=0.0)

    def _late_after(self, busy: Progress, reference: float) -> float:
        """Seconds after the start from which ``busy`` is a straggler, against ``reference``."""
        if reference <= 0:
            return math.inf
        expected = busy.credited / reference
        return max(self.slack * expected, expected + self.floor)


def portion_progress(portions_of: Mapping[str, Sequence[int]], rows: Sequence[int],
                     finished: Sequence[float | None], threads: Mapping[str, int],
                     elapsed: float) -> dict[str, Progress]:
    """The progress of workers given whole portions, each reported as it ends (tasks and
    streaming): ``portions_of`` maps a worker to its portions (indices), ``rows`` and
    ``finished`` give each portion's rows and the seconds after the start when it was done
    (None: not yet), ``threads`` how many portions a worker computes at once (its first
    unfinished ones are in flight; 1 when unknown), ``elapsed`` the seconds since the start."""
    out: dict[str, Progress] = {}
    for worker, portions in portions_of.items():
        ended = [t for t in (finished[i] for i in portions) if t is not None]
        left = [i for i in portions if finished[i] is None]
        out[worker] = Progress(
            assigned=sum(rows[i] for i in portions),
            done=sum(rows[i] for i in portions if finished[i] is not None),
            in_flight=sum(rows[i] for i in left[:threads.get(worker, 1)]),
            elapsed=max(ended) if ended and not left else elapsed,
        )
    return out
