"""How a replica method's run is judged: stopped as diverged while it runs, and at its end,
whether it made progress.

Downpour and the peer methods have no tolerance to meet: they run their epochs (or
``max_steps``). Finishing them says nothing about the result, so a run is judged against
its start instead. Before the replicas start, the objective at the starting parameters is
measured on a fixed sample of training rows (:func:`sample_ranges`: the first rows of
the replicas' blocks, so that it sees what their mini-batches see). While the run
goes, polls whose mini-batch loss average, or held-out objective, grow far past that start
stop the run as ``DIVERGED`` (:class:`Divergence`).
At the end, the objective at the final parameters on the same rows decides
(:func:`judged_end`): ``COMPLETED`` (a success) if it fell below the start, ``NO_PROGRESS``
(not a success) if not.

The rule: a poll's loss is an average over many mini-batches, so mini-batch noise moves it
by tens of percent, not by a factor, and a run that trains falls below its start within its
first polls and stays there. Its very first steps may overshoot, though: Adagrad's first
step moves every coordinate by the full rate, and a 128-class MLP measured at 8.5 times its
start at its first poll was below it at the second. So a run has diverged when its loss
stays above ``DIVERGENCE_FACTOR`` (4) times the start for ``SUSTAINED_POLLS`` (3) polls in
a row, or exceeds ``EXPLOSION_FACTOR`` (100) times it once (a rate 1e3 times too large gets
there within its first steps). A run that wanders above its start without exploding (plain
SGD at too large a rate) is caught at its end, by :func:`judged_end`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dasklbfgs._typing import Dataset
from dasklbfgs.models.base import Model
from dasklbfgs.optim.lbfgs import Status

__all__ = ["DIVERGENCE_FACTOR", "EXPLOSION_FACTOR", "SAMPLE_ROWS", "SUSTAINED_POLLS", "Divergence", "judged_end",
           "sample_objective", "sample_ranges"]

#: a loss above this multiple of the start for SUSTAINED_POLLS polls in a row has diverged
DIVERGENCE_FACTOR = 4.0
SUSTAINED_POLLS = 3
#: a loss above this multiple of the start has diverged at once
EXPLOSION_FACTOR = 100.0
#: training rows the objective at the start and at the end is measured on
SAMPLE_ROWS = 1000
#: replicas' blocks those rows are taken from, at most (evenly spread over the replicas)
SAMPLED_BLOCKS = 8


def sample_ranges(rows: list[tuple[int, int]], total: int = SAMPLE_ROWS) -> list[tuple[int, int]]:
    """The rows the run is judged on: the first ``total / k`` rows (at least one) of the
    blocks ``rows`` of ``k`` replicas, evenly spread, at most ``SAMPLED_BLOCKS`` of them
    (each range reads the chunk that holds it: a hundred replicas would read a hundred)."""
    blocks = rows[:: math.ceil(len(rows) / SAMPLED_BLOCKS)]
    each = max(1, math.ceil(total / len(blocks)))
    return [(a, min(b, a + each)) for a, b in blocks]


def sample_objective(model: Model, data: Dataset, ranges: list[tuple[int, int]], params: np.ndarray) -> float:
    """Task: the objective of ``model`` at ``params`` on the rows ``ranges`` of ``data``
    (weighted, and with the penalty, as the run minimises it)."""
    loss, sums, n = 0.0, None, 0.0
    for a, b in ranges:
        X, y = data.load_rows(a, b)
        w = data.load_weights(a, b)
        part_loss, part_sums = model.sums_of(params, X, y, w, data.load_offsets(a, b))
        loss += float(part_loss)
        sums = np.asarray(part_sums, dtype=np.float64) if sums is None else sums + part_sums
        n += (b - a) if w is None else float(np.sum(w, dtype=np.float64))
    assert sums is not None, "judged on at least one range"
    return float(model.objective_from_sums(params, loss, sums, n)[0])


class Divergence:
    """The divergence check of one run, poll after poll (see above)."""

    def __init__(self) -> None:
        self.polls_above = 0  # polls in a row whose loss exceeded DIVERGENCE_FACTOR times the start

    def seen(self, entry: dict[str, Any], start: float) -> str | None:
        """Why the run has diverged, if the losses of this history ``entry`` (held-out
        objective, mini-batch average) make it so, against the loss at the ``start`` (of 0
        or less: never)."""
        losses = [(entry[key], name) for key, name in (("eval_objective", "held-out"), ("loss", "mini-batch"))
                  if key in entry]
        if start <= 0 or not losses:
            return None
        loss, name = max(losses)
        if loss > EXPLOSION_FACTOR * start:
            return (f"the {name} loss reached {loss:.4g} at global step {entry['step']}, more than "
                    f"{EXPLOSION_FACTOR:g} times the loss at the start ({start:.4g}): the run diverged and was "
                    "stopped; lower learning_rate")
        self.polls_above = self.polls_above + 1 if loss > DIVERGENCE_FACTOR * start else 0
        if self.polls_above < SUSTAINED_POLLS:
            return None
        return (f"the {name} loss stayed above {DIVERGENCE_FACTOR:g} times the loss at the start ({start:.4g}) for "
                f"{SUSTAINED_POLLS} polls, at {loss:.4g} at global step {entry['step']}: the run diverged and was "
                "stopped; lower learning_rate")


def judged_end(message: str, start: float, end: float, measured: str) -> tuple[Status, str]:
    """The status and message of a run that ran its course (``message`` says how: its
    epochs or ``max_steps``), by the ``measured`` loss (what it is, for the message) at
    the ``start`` and at the ``end``: ``COMPLETED`` if it fell (or is zero), else ``NO_PROGRESS``."""
    before, after = _apart(start, end)
    if end < start or end == 0:
        return Status.COMPLETED, f"{message}; {measured} fell from {before} at the start to {after}"
    advice = "raise learning_rate or train longer" if end == start else "lower learning_rate"
    return Status.NO_PROGRESS, (f"{message}, but {measured} went from {before} at the start to {after}: "
                                f"the run made no progress; {advice}")


def _apart(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` to 4 significant digits, or as many more as tell them apart."""
    for digits in range(4, 18):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1] or a == b:
            return shown
    return shown
