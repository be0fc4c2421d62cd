"""Streamed text joined into fewer ``text.delta`` events (docs/api.md §9.6).

A model streams its answer in pieces of a word or so, thousands a second; one event (an INSERT,
a COMMIT and a wake-up) per piece made the stream cost a transaction per token. The pieces of one
session are held for at most :data:`WINDOW_SECONDS` (or until :data:`MAX_CHARS` characters) and
written as one ``text.delta`` carrying their joined text. Events are rows like any other, so a
replayed stream is the same events as the live one, and the texts still concatenate to the answer.

The pieces are written by the thread that receives them when the window has passed, else by one
flusher thread per process, with a connection of its own, when it passes; and always before the
step that streamed them stores its turn (:meth:`DeltaBuffer.flush`).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid

from django.db import DatabaseError, close_old_connections

from sessions_app import events
from sessions_app.event_types import EventKind, TextDelta

log = logging.getLogger("sessions.deltas")

#: Seconds a streamed piece may wait for the pieces after it before it is written.
WINDOW_SECONDS = 0.025
#: Characters that are written at once, whatever the window: an event stays small.
MAX_CHARS = 8192


class DeltaBuffer:
    """The pieces of one session's streamed text not yet written: one per step that streams."""

    def __init__(self, session_id: uuid.UUID, owner: str | None) -> None:
        self.session_id = session_id
        self.owner = owner
        self._lock = threading.Lock()
        self._pieces: list[str] = []
        self._chars = 0
        self._since: float | None = None

    def add(self, piece: str) -> None:
        """Take one streamed piece (the model call's thread); writes the held text when the window
        has passed or it is long enough, else leaves it to the flusher."""
        if not piece:
            return
        with self._lock:
            self._pieces.append(piece)
            self._chars += len(piece)
            now = time.monotonic()
            if self._since is None:
                self._since = now
                _flusher().due(now + WINDOW_SECONDS, self)
            if self._chars >= MAX_CHARS or now - self._since >= WINDOW_SECONDS:
                self._write_locked()

    def flush(self) -> None:
        """Write whatever is held now (the step is over: before its turn is stored)."""
        with self._lock:
            self._write_locked()

    def flush_if_due(self, now: float) -> None:
        """Write what is held if it has waited the whole window (the flusher's call)."""
        with self._lock:
            if self._since is not None and now - self._since >= WINDOW_SECONDS:
                self._write_locked()

    def _write_locked(self) -> None:
        # the lock is held while writing: a later piece can never be written before an earlier one
        if not self._pieces:
            return
        events.emit(EventKind.TEXT_DELTA, self.session_id, self.owner, TextDelta(text="".join(self._pieces)))
        # only once written: a failed write leaves the text for the next one
        self._pieces, self._chars, self._since = [], 0, None


class _Flusher(threading.Thread):
    """Writes the buffers whose window passed with no new piece to write them."""

    def __init__(self) -> None:
        super().__init__(name="text-deltas", daemon=True)
        self._condition = threading.Condition()
        self._queue: list[tuple[float, int, DeltaBuffer]] = []
        self._order = 0

    def due(self, at: float, buffer: DeltaBuffer) -> None:
        """Look at ``buffer`` at monotonic time ``at``."""
        with self._condition:
            self._order += 1
            heapq.heappush(self._queue, (at, self._order, buffer))
            self._condition.notify()

    def run(self) -> None:
        while True:
            with self._condition:
                while not self._queue or self._queue[0][0] > time.monotonic():
                    self._condition.wait(self._queue[0][0] - time.monotonic() if self._queue else None)
                now = time.monotonic()
                ready = []
                while self._queue and self._queue[0][0] <= now:
                    ready.append(heapq.heappop(self._queue)[2])
            close_old_connections()
            for buffer in ready:
                try:
                    buffer.flush_if_due(now)
                except DatabaseError:
                    # the step's own flush writes the text again before its turn is stored
                    log.warning("text delta not written", exc_info=True, extra={"kind": "events.delta_failed"})


_lock = threading.Lock()
_running: _Flusher | None = None


def _flusher() -> _Flusher:
    global _running
    with _lock:
        if _running is None:
            _running = _Flusher()
            _running.start()
        return _running
