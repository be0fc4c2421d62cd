"""tools_app.bash.progress: output lines as rate-limited progress reports (docs/tools.md §3.4)."""

from __future__ import annotations

from tools_app.bash.progress import LINE_MAX_CHARS, LineProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch() -> tuple[LineProgress, Clock, list[tuple[str, str, int, int]]]:
    clock = Clock()
    reports: list[tuple[str, str, int, int]] = []
    return LineProgress(lambda *report: reports.append(report), clock=clock), clock, reports


def test_the_first_line_is_reported_at_once_and_the_newest_once_the_interval_is_over() -> None:
    watch, clock, reports = _watch()
    watch.feed("stdout", b"one\ntw")
    assert reports == [("stdout", "one", 1, 6)]
    watch.feed("stdout", b"o\nthree\n")
    clock.now += 0.3
    watch.tick()
    assert len(reports) == 1
    clock.now += 0.2
    watch.tick()
    assert reports[-1] == ("stdout", "three", 3, 14)
    clock.now += 5
    watch.tick()
    assert len(reports) == 2  # nothing new: nothing reported


def test_streams_are_limited_separately_and_partial_lines_wait_for_their_end() -> None:
    watch, clock, reports = _watch()
    watch.feed("stdout", b"out 1\n")
    watch.feed("stderr", b"err 1\r\n")
    watch.feed("stderr", b"no end yet")
    assert reports == [("stdout", "out 1", 1, 6), ("stderr", "err 1", 1, 7)]
    clock.now += 1
    watch.tick()
    assert len(reports) == 2


def test_a_long_line_is_cut_and_bad_utf8_replaced() -> None:
    watch, _, reports = _watch()
    watch.feed("stdout", b"x" * (LINE_MAX_CHARS + 50) + b"\n")
    watch.feed("stderr", b"\xff\xfeok\n")
    assert len(reports[0][1]) == LINE_MAX_CHARS
    assert reports[1][1] == "\ufffd\ufffdok"


def test_a_failing_sink_never_stops_the_tool() -> None:
    def sink(*report: object) -> None:
        raise RuntimeError("database gone")

    watch = LineProgress(sink)
    watch.feed("stdout", b"line\n")
    watch.tick()
