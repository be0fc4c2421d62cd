"""A bash tool's output lines as progress reports (docs/tools.md §3.4).

While a tool runs, the newest complete line of each stream is reported with how many lines and
bytes that stream has printed, at most once per :data:`REPORT_INTERVAL` seconds per stream: a
tool printing thousands of lines costs a handful of reports, and a line printed during a quiet
interval is still reported once the interval is over, even if nothing follows it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("tools.bash")

#: Seconds between two reports of one stream.
REPORT_INTERVAL = 0.5
#: Characters of a line a report carries (a longer line is cut).
LINE_MAX_CHARS = 1000
#: Bytes of an unfinished line kept while waiting for its end.
_PARTIAL_KEEP = 4 * LINE_MAX_CHARS

#: Told ``(stream, line, lines, bytes)``: the newest line of ``stream`` and the totals so far.
LineSink = Callable[[str, str, int, int], None]


@dataclass
class _Stream:
    partial: bytearray = field(default_factory=bytearray)
    lines: int = 0
    bytes: int = 0
    newest: str | None = None
    reported_at: float | None = None


class LineProgress:
    """An ``OutputWatcher`` (``tools_app.bash.process``) that turns output into rate-limited reports.

    Args:
        sink: told each report; an exception it raises is logged and never stops the tool.
        interval: seconds between two reports of one stream.
        clock: monotonic seconds (replaceable in tests).
    """

    def __init__(self, sink: LineSink, interval: float = REPORT_INTERVAL, clock: Callable[[], float] = time.monotonic):
        self._sink = sink
        self._interval = interval
        self._clock = clock
        self._streams: dict[str, _Stream] = {}

    def feed(self, stream: str, data: bytes) -> None:
        """Count ``data`` and remember the newest complete line in it; report when due."""
        state = self._streams.setdefault(stream, _Stream())
        state.bytes += len(data)
        # counted and searched, never split: a tool may print millions of short lines
        ends = data.count(b"\n")
        if ends:
            last = data.rfind(b"\n")
            previous = data.rfind(b"\n", 0, last)
            line = data[previous + 1 : last] if previous >= 0 else bytes(state.partial) + data[:last]
            state.lines += ends
            state.newest = line[: 4 * LINE_MAX_CHARS].decode("utf-8", errors="replace").rstrip("\r")[:LINE_MAX_CHARS]
            state.partial = bytearray(data[last + 1 :][-_PARTIAL_KEEP:])
        else:
            state.partial.extend(data)
            del state.partial[:-_PARTIAL_KEEP]
        self._report_if_due(stream, state)

    def tick(self) -> None:
        """Report each stream's newest unreported line whose interval is over."""
        for stream, state in self._streams.items():
            self._report_if_due(stream, state)

    def _report_if_due(self, stream: str, state: _Stream) -> None:
        if state.newest is None:
            return
        now = self._clock()
        if state.reported_at is not None and now - state.reported_at < self._interval:
            return
        line, state.newest, state.reported_at = state.newest, None, now
        try:
            self._sink(stream, line, state.lines, state.bytes)
        except Exception:
            log.exception("progress report failed", extra={"kind": "tools.progress_failed"})
