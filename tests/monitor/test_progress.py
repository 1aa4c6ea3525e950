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
