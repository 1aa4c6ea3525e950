"""How a replica method's run is judged (pure: no cluster)."""

from __future__ import annotations

import pytest

from dasklbfgs import Status
from dasklbfgs.solvers._replicas.ending import Divergence, judged_end, sample_ranges
from dasklbfgs.solvers.common_options import replica_rows


def _polls(losses: list[float], start: float = 2.0) -> list[str | None]:
    check = Divergence()
    return [check.seen({"step": step, "loss": loss}, start) for step, loss in enumerate(losses, 1)]


def test_an_overshoot_at_the_first_poll_is_not_a_divergence() -> None:
    """Adagrad's first steps: 8.5 times the start at the first poll, below it at the second."""
    assert _polls([17.0, 1.9, 1.5, 9.0, 9.0, 1.0, 9.0, 9.0]) == [None] * 8  # never 3 polls in a row


def test_a_loss_that_stays_above_four_times_the_start_diverged() -> None:
    found = _polls([1.5, 9.0, 9.0, 8.1])
    assert found[:3] == [None] * 3
    assert found[3] == ("the mini-batch loss stayed above 4 times the loss at the start (2) for 3 polls, at 8.1 at "
                        "global step 4: the run diverged and was stopped; lower learning_rate")


def test_an_explosion_diverged_at_once() -> None:
    assert _polls([201.0])[0] == ("the mini-batch loss reached 201 at global step 1, more than 100 times the loss at "
                                  "the start (2): the run diverged and was stopped; lower learning_rate")
    held_out = Divergence().seen({"step": 5, "eval_objective": 300.0, "loss": 1.0}, 2.0)
    assert held_out is not None and held_out.startswith("the held-out loss reached 300 at global step 5")
    assert Divergence().seen({"step": 1, "loss": 1e9}, 0.0) is None  # a start of 0: never judged
    assert Divergence().seen({"step": 1}, 2.0) is None  # nothing measured


@pytest.mark.parametrize(("start", "end", "status", "message"), [
    (1.0986, 0.6031, Status.COMPLETED, "done; the loss fell from 1.099 at the start to 0.6031"),
    (1.0986, 1.184, Status.NO_PROGRESS,
     "done, but the loss went from 1.099 at the start to 1.184: the run made no progress; lower learning_rate"),
    (1.0986, 1.0986, Status.NO_PROGRESS, "done, but the loss went from 1.099 at the start to 1.099: the run made "
                                         "no progress; raise learning_rate or train longer"),
    (1.09861, 1.098612, Status.NO_PROGRESS, "done, but the loss went from 1.09861 at the start to 1.098612: the "
                                            "run made no progress; lower learning_rate"),  # digits until they differ
    (0.5, 0.0, Status.COMPLETED, "done; the loss fell from 0.5 at the start to 0"),
])
def test_the_end_is_judged_by_the_loss_against_its_start(start, end, status, message) -> None:
    assert judged_end("done", start, end, "the loss") == (status, message)
    assert status.succeeded == (status == Status.COMPLETED)


def test_the_judged_rows_come_from_up_to_eight_replicas_blocks() -> None:
    assert sample_ranges(replica_rows(6000, 2)) == [(0, 500), (3000, 3500)]
    assert sample_ranges(replica_rows(1001, 3)) == [(0, 333), (333, 667), (667, 1001)]  # a block smaller than its share
    many = sample_ranges(replica_rows(100_000, 64))
    assert len(many) == 8 and many[1] == (12_500, 12_625) and sum(b - a for a, b in many) == 1000
