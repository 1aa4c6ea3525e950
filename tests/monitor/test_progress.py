"""The terminal progress line: shown on a terminal, silent otherwise."""

from __future__ import annotations

import io

from dasklbfgs.monitor.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_draws_on_a_terminal_and_ends_the_line() -> None:
    stream = FakeTerminal()
    progress = Progress(10, "sandblaster", stream=stream, min_interval=0.0)
    for i in range(1, 11):
        progress.update(i, objective=1.0 / i)
    progress.close()
    text = stream.getvalue()
    assert text.count("\r") == 10 and text.endswith("\n")
    assert "[####################] 10/10 objective=0.1" in text


def test_silent_when_not_a_terminal_or_quiet() -> None:
    pipe = io.StringIO()
    progress = Progress(5, "x", stream=pipe, min_interval=0.0)
    progress.update(3)
    progress.close()
    quiet = Progress(5, "x", stream=FakeTerminal(), enabled=False)
    quiet.update(3)
    assert pipe.getvalue() == "" and quiet.stream.getvalue() == ""


def test_close_draws_a_throttled_last_update_once() -> None:
    stream = FakeTerminal()
    progress = Progress(None, "writing train", stream=stream, min_interval=3600.0)
    progress.update(100, unit="rows")  # drawn: the first update
    progress.update(250, unit="rows")  # throttled
    progress.close()
    progress.close()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.count("\n") == 1
    assert "writing train 250 unit=rows" in text.splitlines()[-1]


def test_data_make_reports_rows_as_they_are_written(tmp_path) -> None:
    from dasklbfgs.data import make_dataset

    seen: list[tuple[str, int]] = []
    make_dataset("logistic", tmp_path / "d", rows=5000, features=3, shard_rows=1000, test_fraction=0.2,
                 on_progress=lambda split, rows: seen.append((split, rows)))
    assert seen[-1] == ("test", 1000) and ("train", 5000) in seen
    assert [r for s, r in seen if s == "train"] == sorted(r for s, r in seen if s == "train")


def test_the_line_shows_the_epoch_and_the_time_left_at_the_rate_so_far() -> None:
    progress = Progress(100, "downpour", per_epoch=25, stream=FakeTerminal(), min_interval=0.0)
    progress.update(10, loss=0.5)  # the rate is measured from here
    start = progress._first[1]
    line = progress.line(30, {"loss": 0.25}, start + 2.0)  # 20 steps in 2 s: 70 left take 7 s
    assert "[######..............] 30/100 epoch 2/4 loss=0.25" in line and line.endswith("ETA 7s")
    assert progress.line(100, {}, start + 9.0).split()[-1] != "ETA"  # done: nothing left to estimate
    assert progress.line(11, {}, start + 3.0).endswith("ETA 4m27s")  # 1 step in 3 s: 89 left take 267 s
    limit = Progress(1000, "sandblaster", total_is_limit=True, stream=FakeTerminal(), min_interval=0.0)
    limit.update(1)
    assert limit.line(2, {}, limit._first[1] + 1.0).endswith("ETA <= 16m38s")  # may converge sooner
