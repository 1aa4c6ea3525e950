"""One evaluation's wait for its portions: every copy started, the first to finish of each,
rescues and backups.

A portion may run as several *attempts* (:mod:`.launcher`): its primary task, backups on
idle workers, a rescue from Zarr when its worker left. :class:`Collection` records every
attempt by its task key, keeps the first finished copy of each portion (its *winner*) and
cancels the others, re-runs stranded portions from Zarr, and asks the straggler policy
(:mod:`.stragglers`) which portions to back up, telling it each worker's portions: on
cached shards, those pinned to it; streaming, those it computed and those it holds, once
none waits in the scheduler's queue (before that no worker can be idle: a free one takes
the next).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from dask.typing import Key
from distributed import Future, wait

from dasklbfgs.errors import PartitionLostError
from dasklbfgs.solvers.sandblaster.direct_calls import DirectCalls
from dasklbfgs.solvers.sandblaster.launcher import ClusterWorkers, TaskLauncher
from dasklbfgs.solvers.sandblaster.portions import Portion
from dasklbfgs.solvers.sandblaster.stragglers import Progress, StragglerPolicy, portion_progress

__all__ = ["DIRECT", "Collection", "EvaluationLost", "wait_polling"]

POLL_SECONDS = 0.01  # with backup tasks: how often to compare the workers' progress
RESCUE_CHECK_SECONDS = 1.0  # how often to look for lost workers
#: Streaming: with more portions outstanding than this many per thread, some still wait in the
#: scheduler's queue (Dask sends a worker at most ceil(worker-saturation x threads) queued tasks,
#: 1.1 by default), so no worker can be idle for long; below it, the scheduler is asked. A
#: straggler may hold two portions (one running, one sent) while another worker sits idle.
TASKS_SENT_PER_THREAD = 2
STREAMING_CHECK_SECONDS = 0.03  # streaming: how often to look for an idle worker when no portion finished
DIRECT = "direct"  # a winner: the portion was answered by a direct call


def wait_polling(futures: set[Future], timeout: float, return_when: str) -> tuple[set[Future], set[Future]]:
    """``distributed.wait`` that returns ``(done, pending)`` at the timeout instead of raising.

    The ``TimeoutError`` it raises sits in a reference cycle inside Dask's ``sync`` (a frame
    holding the error it re-raises), and its traceback holds every frame up to the caller,
    with their arrays (trial points, gradients, the portions' sums): left to the cyclic
    garbage collector, a polling evaluation kept ~170 MB an iteration alive at 2^22
    parameters. Dropping the traceback leaves the cycle nothing of ours.
    """
    try:
        done, pending = wait(futures, timeout=timeout, return_when=return_when)
        return set(done), set(pending)
    except TimeoutError as timed_out:
        timed_out.__traceback__ = None
    done = {f for f in futures if f.done()}
    return done, set(futures) - done


class EvaluationLost(Exception):
    """A worker died with data this evaluation still needed: start it over."""


@dataclass(frozen=True)
class Attempt:
    """One copy of one portion in flight: the portion, the kind of copy (``"gradient"``,
    ``"backup"`` or ``"rescue"``), the worker it was placed on (None: wherever Dask runs it)
    and its future."""

    portion: int
    kind: str
    worker: str | None
    future: Future


class Collection:
    """The bookkeeping of one evaluation's wait for its portions (:meth:`run`): winners,
    pending copies, rescues and backups. ``primaries`` and ``pinned`` give each portion's
    task (None: answered by ``direct`` calls) and the worker it is pinned to (None:
    anywhere); ``stragglers`` is None without backup tasks."""

    def __init__(self, launcher: TaskLauncher, portions: list[Portion], workers: ClusterWorkers,
                 stragglers: StragglerPolicy | None, primaries: list[Future | None], pinned: list[str | None],
                 started: float, direct: DirectCalls) -> None:
        self.launcher, self.portions, self.workers, self.stragglers = launcher, portions, workers, stragglers
        self.pinned, self.started = pinned, started
        self.rows = [p.stop - p.start for p in portions]
        self.winners: list[Future | str | None] = [DIRECT if i in direct.sums else None for i in range(len(portions))]
        #: per portion: seconds after the start when its winner finished (None until then)
        self.finished: list[float | None] = [direct.finished[direct.computed_on[i]] - started if i in direct.sums
                                             else None for i in range(len(portions))]
        self.pending: set[Future] = set()
        #: every copy of a portion this evaluation started, by its task key (the keys the
        #: scheduler reports are this evaluation's exactly when they are in here)
        self.attempts: dict[Key, Attempt] = {}
        self.copied: dict[str, set[int]] = {"gradient": set(), "backup": set(), "rescue": set()}  # portions by kind
        self.backups_launched = self.backups_won = 0
        self.pinned_work = {w: [i for i, on in enumerate(pinned) if on == w]
                            for w in dict.fromkeys(pinned) if w is not None}
        self.computed_on: dict[int, str] = {}  # streaming: the worker that computed a winner
        self.next_rescue_check = started + RESCUE_CHECK_SECONDS
        #: streaming: (portions done, time): no new look at the scheduler before then unless more are done
        self.next_look = (-1, 0.0)
        self._started("gradient", [(i, pinned[i], f) for i, f in enumerate(primaries) if f is not None])

    def run(self) -> list[Future | str]:
        """Wait for one finished copy of every portion; returns them in portion order.

        Every ``POLL_SECONDS`` (one ``wait`` per poll, no per-task overhead), the outstanding
        portions of stragglers are backed up, and portions pinned to a worker that has left
        the cluster (or whose copies were all lost) are rescued: re-run from Zarr wherever
        Dask likes, backups on or off.
        """
        poll = POLL_SECONDS if self.stragglers is not None else RESCUE_CHECK_SECONDS
        while self.n_done() < len(self.portions):
            when = "FIRST_COMPLETED" if self.backed_up else "ALL_COMPLETED"
            done, self.pending = wait_polling(self.pending, poll, when)
            now = time.perf_counter()
            self.check_parameters()
            self.take(done, now)
            if self.n_done() == len(self.portions):
                break
            self.rescue_stranded(now)
            self.back_up_stragglers(now)
        return [f for f in self.winners if f is not None]

    def _started(self, kind: str, copies: list[tuple[int, str | None, Future]]) -> None:
        """Record ``copies`` (portion, worker, future) of ``kind`` as pending attempts."""
        for i, worker, future in copies:
            self.attempts[future.key] = Attempt(i, kind, worker, future)
            self.copied[kind].add(i)
            self.pending.add(future)

    @property
    def backed_up(self) -> bool:
        """Whether a backup was launched (then each finished copy is worth a look at once)."""
        return bool(self.copied["backup"])

    def n_done(self) -> int:
        return sum(f is not None for f in self.winners)

    def unclaimed(self) -> list[Portion]:
        """Portions without a winner, backup or rescue, last queued first (they would finish last)."""
        claimed = self.copied["backup"] | self.copied["rescue"]
        return [p for p in reversed(self.portions) if self.winners[p.index] is None and p.index not in claimed]

    def check_parameters(self) -> None:
        """Raise when the task producing the parameters failed or they were lost (parameters
        carried inline by the tasks cannot be)."""
        x = self.launcher.x
        if not isinstance(x, Future):
            return
        if x.status == "error":
            x.result()  # the task producing the parameters failed: its exception
        if x.status in ("lost", "cancelled"):  # the parameters were lost with their worker
            raise EvaluationLost()

    def take(self, done: set[Future], now: float) -> None:
        """Record the first finished copy of each portion; cancel the other copies."""
        for f in done:
            attempt = self.attempts[f.key]
            i = attempt.portion
            if self.winners[i] is not None:
                continue
            if f.status == "error":
                if isinstance(f.exception(), PartitionLostError):  # the replica is re-created, then a retry
                    raise EvaluationLost()
                f.result()  # re-raise the task's exception
            if f.status != "finished":  # lost with its worker, or cancelled
                continue
            self.winners[i], self.finished[i] = f, now - self.started
            if attempt.kind == "backup":
                self.backups_won += 1
                if self.launcher.cached is not None and attempt.worker is not None:  # streaming keeps nothing
                    self.launcher.cached.keep_copy(self.portions[i].shard, attempt.worker)
            losers = [g for g in self.pending if self.attempts[g.key].portion == i]
            if losers:
                self.launcher.client.cancel(losers)
                self.pending.difference_update(losers)
        for i, winner in enumerate(self.winners):  # a finished copy lost with its worker: not a winner after all
            if isinstance(winner, Future) and winner.status != "finished":
                self.winners[i] = self.finished[i] = None
                self.computed_on.pop(i, None)

    def rescue_stranded(self, now: float) -> None:
        """Re-run from Zarr the portions whose worker left or whose copies were all lost."""
        covered = {self.attempts[f.key].portion for f in self.pending}
        orphans = [i for i, f in enumerate(self.winners) if f is None and i not in covered]
        if now < self.next_rescue_check and not orphans:
            return
        self.next_rescue_check = now + RESCUE_CHECK_SECONDS
        alive = set(self.workers.live())
        rescued = self.copied["rescue"]
        stranded = [p for p in self.portions
                    if self.winners[p.index] is None and p.index not in rescued
                    and (p.index not in covered or self.pinned[p.index] not in {*alive, None})]
        if stranded:
            rescues = self.launcher.from_store("rescue", stranded)
            self._started("rescue", [(p.index, None, f) for p, f in zip(stranded, rescues)])

    def back_up_stragglers(self, now: float) -> None:
        """Copy the outstanding portions of the workers the policy calls stragglers to the
        idle workers it names, round-robin, fastest first."""
        if self.stragglers is None:
            return
        streaming = self.launcher.cached is None
        work = self._streaming_work(now) if streaming else self.pinned_work
        verdict = self.stragglers.judge(self._progress(work, now))
        if not verdict.stragglers:
            return
        theirs = {i for w in verdict.stragglers for i in work[w]}
        late = [p for p in self.unclaimed() if p.index in theirs]
        for j, p in enumerate(late):
            worker = verdict.helpers[j % len(verdict.helpers)]
            self._started("backup", [(p.index, worker, self.launcher.backup(p, worker))])
        self.backups_launched += len(late)

    def _progress(self, work: dict[str, list[int]], now: float) -> dict[str, Progress]:
        """Each worker's progress on its portions ``work``, as the straggler policy reads it."""
        return portion_progress(work, self.rows, self.finished, self.workers.threads, now - self.started)

    def _streaming_work(self, now: float) -> dict[str, list[int]]:
        """Streaming: each worker's portions, those it computed and those it holds, once a
        worker may be idle: none of the outstanding portions waits in the scheduler's queue.
        Empty before, and between looks: the scheduler is asked when a portion finished (a
        worker goes idle then, or when a cancelled copy stops), else every
        ``STREAMING_CHECK_SECONDS``. Idle means the whole worker (one with free threads and a
        portion running is busy), and running: not one being retired, nor one still running
        a copy that lost (a backup there would wait behind it)."""
        outstanding, n_done = self.unclaimed(), self.n_done()
        if not outstanding or n_done == 0 or (self.next_look[0] == n_done and now < self.next_look[1]):
            return {}
        self.next_look = (n_done, now + STREAMING_CHECK_SECONDS)
        workers = self.workers.live()
        if len(outstanding) > TASKS_SENT_PER_THREAD * sum(self.workers.threads.values()):
            return {}
        held = {w: {self.attempts[key].portion for key in map(str, keys) if key in self.attempts}
                for w, keys in self.launcher.client.processing().items()}
        if {p.index for p in outstanding} - set().union(*held.values()):  # queued: a free worker takes it
            return {}
        computed: dict[str, set[int]] = {}
        for i, w in self._computed_on().items():
            computed.setdefault(w, set()).add(i)
        work = {}
        for w, info in workers.items():
            unfinished = {i for i in held.get(w, ()) if self.winners[i] is None}
            if unfinished or (w in held and not held[w] and info.get("status", "running") == "running"):
                work[w] = sorted(unfinished | computed.get(w, set()))
        return work

    def _computed_on(self) -> dict[int, str]:
        """Streaming: the worker that computed each winner (where its result is), asking the
        scheduler about the winners not asked about yet."""
        new = [f for i, f in enumerate(self.winners) if isinstance(f, Future) and i not in self.computed_on]
        if new:
            where = self.launcher.client.who_has(new)
            for f in new:
                if where.get(f.key):
                    self.computed_on[self.attempts[f.key].portion] = min(where[f.key])
        return self.computed_on

    def delivered(self, ended: float) -> tuple[list[str | None], dict[str, tuple[int, float]]]:
        """Where each portion was computed (None: read from Zarr by a task wherever Dask ran
        it: streamed, or rescued from a lost worker), and for each worker given portions or
        winning backups, the rows it computed and the seconds it was busy (until its pinned
        portions were done, or the end when it won a backup)."""
        won = {i: self.attempts[f.key] for i, f in enumerate(self.winners) if isinstance(f, Future)}
        helped = {i: attempt.worker for i, attempt in won.items() if attempt.kind == "backup"}
        rows: Counter[str] = Counter({w: 0 for w in self.pinned_work})
        placement: list[str | None] = []
        for p in self.portions:
            worker = helped.get(p.index, self.pinned[p.index])
            placement.append(None if p.index in won and won[p.index].kind == "rescue" else worker)
            if worker is not None:
                rows[worker] += self.rows[p.index]
        progress = self._progress(self.pinned_work, ended)
        busy = {w: progress[w].elapsed if w in progress and progress[w].idle and w not in helped.values()
                else ended - self.started for w in rows}
        return placement, {w: (rows[w], busy[w]) for w in rows}
