"""The straggler policy on its own (no cluster): the one rule the direct calls, the pinned
tasks and streaming all ask (docs/algorithms.md §1, backup tasks)."""

from __future__ import annotations

import math

import pytest

from dasklbfgs.solvers.sandblaster.stragglers import (
    BACKUP_ROUND_TRIP_SECONDS,
    Progress,
    StragglerPolicy,
    Verdict,
    portion_progress,
)

SLACK = 1.5
EXACT = StragglerPolicy(SLACK, floor=0.0)  # the slack alone decides


def idle(rows: int, seconds: float) -> Progress:
    return Progress(assigned=rows, done=rows, in_flight=0, elapsed=seconds)


def test_a_worker_progressing_slack_times_slower_is_a_straggler_and_the_idle_one_helps() -> None:
    progress = {
        "fast": idle(1000, 1.0),  # the reference: 1000 rows/s
        "slow": Progress(assigned=1000, done=100, in_flight=100, elapsed=1.0),  # at best 200 rows/s
        "steady": Progress(assigned=1000, done=800, in_flight=100, elapsed=1.0),  # at best 900 rows/s
    }
    assert StragglerPolicy(SLACK).judge(progress) == Verdict(stragglers=["slow"], helpers=["fast"])


def test_no_worker_is_a_straggler_before_some_worker_is_idle() -> None:
    hung = Progress(assigned=1000, done=0, in_flight=0, elapsed=100.0)
    busy = Progress(assigned=1000, done=999, in_flight=1, elapsed=1.0)
    policy = StragglerPolicy(SLACK)
    assert policy.judge({"hung": hung, "busy": busy}) == Verdict([], [])
    assert policy.next_straggler_after({"hung": hung, "busy": busy}) == math.inf
    # an idle worker that computed nothing sets no pace either
    assert policy.judge({"hung": hung, "empty": idle(0, 1.0)}) == Verdict([], [])


def test_the_slack_is_the_boundary() -> None:
    reference = idle(100, 1.0)  # 100 rows/s: 50 credited rows take it 0.5 s, late after 1.5 x 0.5 = 0.75 s

    def judged(elapsed: float) -> Verdict:
        busy = Progress(assigned=100, done=25, in_flight=25, elapsed=elapsed)
        return EXACT.judge({"ref": reference, "busy": busy})

    assert judged(0.7499) == Verdict([], [])
    assert judged(0.75) == Verdict(["busy"], ["ref"])
    assert EXACT.next_straggler_after({"ref": reference, "busy": Progress(100, 25, 25, 0.1)}) == 0.75


def test_no_worker_is_late_by_less_than_a_backups_round_trip() -> None:
    reference = idle(1000, 0.001)  # 10^6 rows/s: 100 rows take it 0.1 ms
    policy = StragglerPolicy(SLACK)

    def judged(elapsed: float) -> Verdict:
        return policy.judge({"ref": reference, "busy": Progress(100, 0, 100, elapsed)})

    assert judged(0.0001 * SLACK * 10) == Verdict([], [])  # 10x the slack, yet sooner than a round trip
    assert judged(0.0001 + BACKUP_ROUND_TRIP_SECONDS + 0.001) == Verdict(["busy"], ["ref"])


def test_a_direct_call_is_credited_with_all_its_rows_until_it_answers() -> None:
    """A worker answering for all its portions at once shows no progress until then: it is
    late once it has taken ``slack`` times as long as its rows at the fastest answer's rate."""
    answered = idle(800, 0.4)  # 2000 rows/s
    calling = {"answered": answered, "calling": Progress(assigned=600, done=0, in_flight=600, elapsed=0.44)}
    assert EXACT.judge(calling) == Verdict([], [])  # 600 rows take 0.3 s at 2000 rows/s: late after 0.45 s
    assert EXACT.next_straggler_after(calling) == pytest.approx(0.45, rel=1e-12)
    calling["calling"] = Progress(assigned=600, done=0, in_flight=600, elapsed=0.46)
    assert EXACT.judge(calling) == Verdict(["calling"], ["answered"])


def test_pinned_portions_credit_one_in_flight_per_thread() -> None:
    rows = [100] * 6
    finished = [0.2, None, None, 0.5, None, None]
    work = {"one": [0, 1, 2], "two": [3, 4, 5]}
    progress = portion_progress(work, rows, finished, {"one": 1, "two": 2}, elapsed=1.0)
    assert progress == {"one": Progress(assigned=300, done=100, in_flight=100, elapsed=1.0),
                        "two": Progress(assigned=300, done=100, in_flight=200, elapsed=1.0)}
    finished[1] = finished[2] = 0.8
    assert portion_progress(work, rows, finished, {}, elapsed=1.0)["one"] == idle(300, 0.8)  # when it ended


def test_streaming_backs_up_a_slow_last_portion_not_a_fresh_one() -> None:
    """Streaming at its tail, ``fast`` idle (it holds no portion, and none is queued): a
    worker that computed two portions and holds the last is credited with three, as many as
    ``fast`` did, and is on time; one that computed none and still holds the one it took
    first is late."""
    rows = [250] * 6
    finished: list[float | None] = [1.0, 1.0, 2.0, 2.0, 3.0, None]
    on_time = portion_progress({"fast": [0, 2, 4], "other": [1, 3, 5]}, rows, finished, {}, elapsed=3.1)
    assert on_time["fast"] == idle(750, 3.0)
    assert StragglerPolicy(SLACK).judge(on_time) == Verdict([], [])
    late = portion_progress({"fast": [0, 1, 2, 3, 4], "other": [5]}, rows, finished, {}, elapsed=3.1)
    assert late["other"] == Progress(assigned=250, done=0, in_flight=250, elapsed=3.1)
    assert StragglerPolicy(SLACK).judge(late) == Verdict(["other"], ["fast"])


def test_helpers_come_fastest_first() -> None:
    progress = {"b": idle(100, 1.0), "a": idle(100, 1.0), "quick": idle(300, 1.0), "empty": idle(0, 1.0),
                "hung": Progress(100, 0, 0, 5.0)}
    assert StragglerPolicy(SLACK).judge(progress) == Verdict(["hung"], ["quick", "a", "b", "empty"])
