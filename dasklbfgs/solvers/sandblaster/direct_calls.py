"""The client's side of the direct calls (:mod:`.portion_service`): which worker computes which
portions, what each is sent, and the answers as sums.

:class:`DirectPath` is what an evaluator holds when its evaluations go by direct calls: the
service on the workers, each shard's positions (the parameters its portions read, when the
rows are sparse: a worker is sent only those) and the calls of each evaluation
(:func:`call_workers`: one message to each worker and one back, the straggler rule applied
while waiting). What a call does not bring back, the evaluator computes with tasks.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np
from distributed import Client
from distributed.protocol import to_serialize

from dasklbfgs.models.sums import BlockCuts, SparseSum
from dasklbfgs.solvers.sandblaster.active import ActiveParameters
from dasklbfgs.solvers.sandblaster.portion_service import ABANDON, HANDLER, start_service
from dasklbfgs.solvers.sandblaster.portions import Portion
from dasklbfgs.solvers.sandblaster.shard_cache import ShardCache
from dasklbfgs.solvers.sandblaster.stragglers import Progress, StragglerPolicy

__all__ = ["DIRECT_UPLOAD_BYTES", "DirectCalls", "DirectPath", "Plan", "Sent", "as_gather_index", "as_sums",
           "call_workers", "parameters_to_send", "reaches_workers"]

#: How often a wait for answers asks the scheduler whether the workers it waits for are
#: still in the cluster (a worker that hangs, or dies before it is reached, never answers).
LIVENESS_SECONDS = 1.0
#: The parameters a client sends per evaluation by direct calls (one copy per worker asked):
#: past this (a wide model on many workers) the evaluation goes by tasks, which scatter the
#: parameters once and let the workers copy them from each other, off the client's link.
DIRECT_UPLOAD_BYTES = 64 * 2**20
#: How long a client that leaves the choice to Dask (``direct_to_workers=None``: ``Client(cluster)``,
#: ``Client("tcp://...")``) waits for a worker to answer a direct call before its evaluations
#: go by tasks (:func:`reaches_workers`).
PROBE_SECONDS = 2.0
_REACHED: weakref.WeakKeyDictionary[Client, set[str]] = weakref.WeakKeyDictionary()  # workers that answered


def reaches_workers(client: Client, workers: list[str]) -> bool:
    """Whether evaluations may call ``workers`` directly. A client says so with
    ``direct_to_workers=True`` (as :func:`dasklbfgs.connect` makes it) and says no with
    ``False`` (workers this process cannot reach). Dask's default, ``None``, leaves the choice:
    then each worker is asked, directly, and the calls go direct if all of them answer within
    ``PROBE_SECONDS`` (a worker that answered is remembered per client; one that did not is
    asked again by the next evaluator)."""
    if client.direct_to_workers is not None:
        return bool(client.direct_to_workers)
    reached = _REACHED.setdefault(client, set())
    unasked = [w for w in workers if w not in reached]
    if unasked:  # a worker that did not answer is asked again by the next evaluator (it may have been busy)
        reached.update(w for w, answered in client.sync(_probe, client, unasked).items() if answered)
    return all(w in reached for w in workers)


async def _probe(client: Client, workers: list[str]) -> dict[str, bool]:
    async def answers(worker: str) -> tuple[str, bool]:
        try:
            await asyncio.wait_for(client.rpc(worker).identity(), PROBE_SECONDS)
        except Exception:  # whatever stands at that address and does not answer as a worker: tasks
            return worker, False
        return worker, True

    return dict(await asyncio.gather(*(answers(w) for w in workers)))


@dataclass
class DirectCalls:
    """What the direct calls of one evaluation brought back."""

    sums: dict[int, Any] = field(default_factory=dict)  # portion index -> its (loss, sums)
    computed_on: dict[int, str] = field(default_factory=dict)  # portion index -> the worker that answered it
    finished: dict[str, float] = field(default_factory=dict)  # worker -> when its answer arrived (perf_counter)
    rows: dict[str, int] = field(default_factory=dict)  # worker -> the rows it computed (those finished only)
    compute_seconds: dict[str, float] = field(default_factory=dict)  # worker -> the seconds it computed
    lost: set[str] = field(default_factory=set)  # workers that could not be reached
    late: set[str] = field(default_factory=set)  # workers given up on as stragglers
    gather_seconds: float = 0.0  # this process gathering the parameters each worker is sent


#: A direct call's plan: worker -> its portions as ``(index, shard key, first row, stop row)``.
Plan = dict[str, list[tuple[int, str, int, int]]]
#: What a direct call sends a worker: the whole parameters (None: none of its portions need
#: them) and, per shard key, the parameters that shard's portions read.
Sent = tuple[np.ndarray | None, dict[str, np.ndarray]]


def as_gather_index(positions: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """Each shard's positions (None: every parameter) as ``np.intp``, the index numpy gathers
    and ``np.add.at`` take without converting: a 4-byte index is converted at every call,
    which made adding a million-wide evaluation's compact sums about 1.5x slower
    (``benchmarks.coordinator``)."""
    return [None if p is None else np.asarray(p, dtype=np.intp) for p in positions]


def parameters_to_send(x: np.ndarray, plan: Plan, positions: list[np.ndarray | None]) -> tuple[dict[str, Sent], int]:
    """What a direct call sends each worker of ``plan``, and the bytes in all: per shard key,
    ``x`` at the positions its portions read (``positions``, per portion index; each shard's
    gathered once), and the whole ``x`` only to a worker with a portion that reads every
    parameter (None)."""
    sent: dict[str, Sent] = {}
    gathered: dict[str, np.ndarray] = {}  # shard key -> x at its positions
    for worker, items in plan.items():
        whole: np.ndarray | None = None
        compact: dict[str, np.ndarray] = {}
        for index, shard_key, _, _ in items:
            at = positions[index]
            if at is None:
                whole = x
            elif shard_key not in compact:
                if shard_key not in gathered:
                    gathered[shard_key] = x[at]
                compact[shard_key] = gathered[shard_key]
        sent[worker] = (whole, compact)
    upload = sum((0 if whole is None else whole.nbytes) + sum(v.nbytes for v in compact.values())
                 for whole, compact in sent.values())
    return sent, upload


def as_sums(answers: dict[int, Any], positions: list[np.ndarray | None], size: int) -> None:
    """Turn, in place, the answers of portions sent compact parameters (the gradient's values
    at their ``positions``) into the :class:`~dasklbfgs.models.sums.SparseSum` a task returns."""
    for index, (loss, values) in answers.items():
        at = positions[index]
        if at is not None:
            answers[index] = (loss, SparseSum(size, at, values))


def call_workers(client: Client, call: str, model: Any, sent: dict[str, Sent], plan: Plan, started: float,
                 stragglers: StragglerPolicy | None) -> DirectCalls:
    """Ask every worker of ``plan`` for the sums of its portions, at once, with the
    parameters ``sent`` to it, and wait for the answers.

    A worker that cannot be reached is ``lost``. With ``stragglers`` (the policy of
    :mod:`.stragglers`), a worker still computing is given up on (``late``) once the policy
    calls it a straggler; a worker answers for all its rows at once, so until then they are
    all in flight, and it is late once it has taken ``backup_slack`` times as long as its
    rows would take at the fastest answer's rate (and a backup's round trip longer at
    least). Its portions are then computed by tasks, as the task path backs up a
    straggler's (its answer, if it comes, is dropped, and the worker told to stop computing
    it). ``call`` names the calls of this evaluation, unique. Any other error (the model's)
    is raised.
    """
    return client.sync(_call_workers, client, call, cloudpickle.dumps(model), sent, plan, started, stragglers)


async def _call_workers(client: Client, call: str, blob: bytes, sent: dict[str, Sent], plan: Plan, started: float,
                        stragglers: StragglerPolicy | None) -> DirectCalls:
    out = DirectCalls()
    calls = {
        asyncio.ensure_future(getattr(client.rpc(worker), HANDLER)(
            call=call, model=blob, x=to_serialize(sent[worker][0]), local_params=to_serialize(sent[worker][1]),
            items=[(key, start, stop) for _, key, start, stop in items])): worker
        for worker, items in plan.items()
    }
    rows = {worker: sum(stop - start for _, _, start, stop in items) for worker, items in plan.items()}
    pending = set(calls)

    def progress(now: float) -> dict[str, Progress]:
        """What the straggler policy is told: the workers that answered, idle after the rows
        they computed, and those still computing, all their rows in flight."""
        answered = {w: Progress(n, n, 0, out.finished[w] - started) for w, n in out.rows.items()}
        return answered | {calls[t]: Progress(rows[calls[t]], 0, rows[calls[t]], now - started) for t in pending}

    def give_up(given_up: set[asyncio.Future], why: set[str]) -> None:
        """Stop waiting for ``given_up`` (noting their workers in ``why``) and tell those
        workers to compute no more of this call."""
        why.update(calls[t] for t in given_up)
        _forget(given_up)
        _forget({asyncio.ensure_future(getattr(client.rpc(calls[t]), ABANDON)(call=call)) for t in given_up})

    next_liveness_check = started + LIVENESS_SECONDS
    while pending:
        wake = next_liveness_check
        if stragglers is not None:
            wake = min(wake, started + stragglers.next_straggler_after(progress(time.perf_counter())))
        done, pending = await asyncio.wait(pending, timeout=max(0.0, wake - time.perf_counter()),
                                           return_when=asyncio.FIRST_COMPLETED)
        now = time.perf_counter()
        if stragglers is not None:
            late = {t for t in pending if calls[t] in stragglers.judge(progress(now)).stragglers}
            give_up(late, out.late)
            pending -= late
        if pending and now >= next_liveness_check:  # a worker that left without a word (or hangs unreachable)
            workers = (await client.scheduler.identity(n_workers=-1))["workers"]
            gone = {t for t in pending if calls[t] not in workers}
            give_up(gone, out.lost)
            pending -= gone
            next_liveness_check = time.perf_counter() + LIVENESS_SECONDS
        for answered in done:
            worker = calls[answered]
            error = answered.exception()
            if error is not None and not isinstance(error, OSError):  # the model's: raised as itself
                _forget(done)
                give_up(pending, out.lost)  # the other workers told to stop
                raise error
            answer = None if error is not None else answered.result()
            if not isinstance(answer, dict):
                # CommClosedError, a refused connection: the worker is gone; no answer at all:
                # a worker closing (its plugins torn down before it stops listening)
                out.lost.add(worker)
                continue
            out.compute_seconds[worker] = answer["seconds"]
            computed = 0
            for (index, _, start, stop), sums in zip(plan[worker], answer["sums"]):
                if sums is not None:
                    out.sums[index], out.computed_on[index] = sums, worker
                    computed += stop - start
            if computed:  # a worker that held none of its shards any more says nothing of speed
                out.finished[worker], out.rows[worker] = now, computed
    return out


def _forget(calls: set[asyncio.Future]) -> None:
    """Drop the answers still to come (a late or lost worker's): retrieved when they arrive, unused."""
    for future in calls:
        future.add_done_callback(lambda done: done.cancelled() or done.exception())


class DirectPath:
    """The direct calls of an evaluator's evaluations (module docstring)."""

    def __init__(self, client: Client, model: Any, token: str, n_shards: int) -> None:
        start_service(client)
        self.client, self.model, self.token = client, model, token
        #: Per shard, the parameters its portions read (None: all of them)
        self.positions: list[np.ndarray | None] = [None] * n_shards
        #: The positions cut at the blocks the sums are added by, when they are (the portions'
        #: sums come back on these very arrays; :func:`~dasklbfgs.models.sums.reduce_in_blocks`)
        self.blocks = BlockCuts([])
        self._calls = 0

    def read_positions(self, cached: ShardCache) -> None:
        """Ask each cached shard once which parameters its portions read
        (``Model.compact_positions``): from now on a worker is sent only those of its shards."""
        self._set_positions(cached.compact_positions(self.model))

    def restrict_to(self, active: ActiveParameters) -> None:
        """Each shard's positions among the ``active`` parameters, for evaluations at those alone."""
        self._set_positions([None if p is None else active.index_of(p) for p in self.positions])

    def _set_positions(self, positions: list[np.ndarray | None]) -> None:
        self.positions = as_gather_index(positions)
        self.blocks = BlockCuts([p for p in self.positions if p is not None])

    def portion_positions(self, portions: list[Portion]) -> list[np.ndarray | None]:
        """Per portion, the parameters it reads (its shard's :attr:`positions`)."""
        return [self.positions[p.shard] for p in portions]

    def call(self, x: np.ndarray, plan: Plan, portions: list[Portion], started: float,
             stragglers: StragglerPolicy | None) -> DirectCalls:
        """Each worker of ``plan`` asked for the sums of its portions at ``x`` (:func:`call_workers`),
        the answers as the sums a task returns; nothing asked when the parameters to send would
        exceed ``DIRECT_UPLOAD_BYTES``."""
        positions = self.portion_positions(portions)
        gathering = time.perf_counter()
        sent, upload = parameters_to_send(x, plan, positions)
        gathered = time.perf_counter() - gathering
        if upload > DIRECT_UPLOAD_BYTES:
            return DirectCalls(gather_seconds=gathered)
        self._calls += 1
        calls = call_workers(self.client, f"{self.token}-direct-{self._calls}", self.model, sent, plan, started,
                             stragglers)
        calls.gather_seconds = gathered
        as_sums(calls.sums, positions, x.size)
        return calls
