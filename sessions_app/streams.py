"""Live event streams: one reader per server process, fanned out to every open stream.

The database is the source of truth (``sessions_app.events``). Each server process runs one
:class:`Fanout` on its event loop: woken by the hub (or every second, in case an announcement was
lost), it reads the events committed since its position and hands them to the streams whose scope
they match. A stream that resumes (``Last-Event-ID`` / ``after``) subscribes first, learns the
fanout's position ``p``, reads ``(after, p]`` from the database itself and then takes the live
events after ``p`` from its queue: no gap and no duplicate at the seam, whatever is being
written meanwhile (docs/api.md §9.4, §9.7).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, connection

from foundation import metrics
from sessions_app import events, hub
from sessions_app.models import Event

log = logging.getLogger("sessions.streams")

T = TypeVar("T")

#: Database work of the streams runs on these threads, each keeping its own connection.
_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="events-db")

#: Seconds between two reads when no announcement arrives (announcements can be lost).
POLL_SECONDS = 1.0


def _guarded(fn: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return fn()
        except DatabaseError:
            # a broken connection is replaced on the next call
            connection.close()
            raise

    return run


async def in_db_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` (ORM code) on a stream database thread and return its result."""
    return await asyncio.get_running_loop().run_in_executor(_executor, _guarded(fn))


@dataclass(frozen=True, eq=False)
class Frame:
    """One event as sent: its ``seq``, ``kind``, session and the ``data`` JSON line."""

    seq: int
    kind: str
    session_id: str
    owner: str | None
    data: str
    #: when the event was written (epoch seconds; 0 for the end marker)
    written: float = 0.0

    @classmethod
    def of(cls, event: Event) -> Frame:
        """The frame of a stored event."""
        data = events.event_data(event)
        return cls(event.seq, event.kind, str(event.session_id), event.owner, data, event.created_at.timestamp())

    @functools.cached_property
    def sse_text(self) -> str:
        """The server-sent-events text of this frame, made once for all the streams that send it."""
        return f"id: {self.seq}\nevent: {self.kind}\ndata: {self.data}\n\n"

    def sse(self) -> str:
        """The server-sent-events text of this frame."""
        return self.sse_text

    def message(self) -> str:
        """The websocket message of this frame: ``{"id", "event", "data"}``."""
        return f'{{"id":{self.seq},"event":{json.dumps(self.kind)},"data":{self.data}}}'


@dataclass(frozen=True)
class Scope:
    """Which events a stream wants: one session's, or every session's (optionally one owner's)."""

    session_id: str | None = None
    owner: str | None = None
    everyone: bool = True

    def matches(self, frame: Frame) -> bool:
        """Whether ``frame`` belongs to this stream."""
        if self.session_id is not None:
            return frame.session_id == self.session_id
        return self.everyone or frame.owner == self.owner


#: Put in a subscription's queue when the server shuts down: the stream ends.
END = Frame(0, "", "", None, "")


@dataclass(eq=False)
class Subscription:
    """An open stream's registration with the fanout."""

    scope: Scope
    position: int
    queue: asyncio.Queue[Frame] = field(default_factory=asyncio.Queue)


class Fanout:
    """Reads new events once per process and distributes them to subscriptions."""

    def __init__(self) -> None:
        self.position = 0
        self.subscriptions: set[Subscription] = set()
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """The reader loop: wait for an announcement (or the poll period), read, distribute."""
        waiter = hub.AsyncWaiter()
        try:
            self.position = await in_db_thread(events.latest_seq)
            self.started.set()
            while not hub.shutting_down.is_set():
                try:
                    rows = await in_db_thread(partial(_read_frames, self.position, None))
                except DatabaseError:
                    log.warning("event read failed", exc_info=True, extra={"kind": "events.read_failed"})
                    rows = []
                for frame in rows:
                    for sub in self.subscriptions:
                        if sub.scope.matches(frame):
                            sub.queue.put_nowait(frame)
                    self.position = frame.seq
                if len(rows) < 500:
                    await waiter.wait(POLL_SECONDS)
            for sub in self.subscriptions:
                sub.queue.put_nowait(END)
        finally:
            waiter.close()

    def subscribe(self, scope: Scope) -> Subscription:
        """Register a stream; it receives every matching event after ``subscription.position``."""
        sub = Subscription(scope=scope, position=self.position)
        self.subscriptions.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget a stream."""
        self.subscriptions.discard(sub)


_fanouts: dict[asyncio.AbstractEventLoop, Fanout] = {}


async def fanout() -> Fanout:
    """This event loop's fanout, started on first use."""
    loop = asyncio.get_running_loop()
    current = _fanouts.get(loop)
    if current is None:
        hub.start_listener()
        current = _fanouts[loop] = Fanout()
        current.task = loop.create_task(current.run())
    await current.started.wait()
    return current


@dataclass
class OpenedStream:
    """A stream ready to send: its replay mode, an optional snapshot, then frames."""

    replay: str
    snapshot: dict[str, Any] | None
    frames: AsyncIterator[list[Frame] | None]


async def open_stream(scope: Scope, after: int | None, snapshot: Callable[[], dict[str, Any]] | None) -> OpenedStream:
    """Subscribe and decide the replay mode (docs/api.md §9.4).

    Args:
        scope: the events wanted.
        after: the last ``seq`` the client saw (``Last-Event-ID`` or ``after``), or ``None``.
        snapshot: reads the SessionMetaView for a per-session stream; ``None`` for ``/v1/events``.
    Returns:
        ``replay``: ``live`` (no ``after``), ``replayed`` (every event after it is still stored), or
        ``unavailable`` (older than retention, or from the future: sent like a fresh connection).
        ``frames`` yields batches of frames in ``seq`` order (all that were ready at once, so that
        they go out in one write), and ``None`` after ``keepalive`` seconds of silence; it ends
        when the server shuts down, and a one-session stream after its ``session.deleted``.
    """
    hub_fanout = await fanout()
    sub = hub_fanout.subscribe(scope)
    try:
        if after is not None and await in_db_thread(lambda: events.replay_available(after)):
            replay, start, first = "replayed", after, None
        else:
            replay, start = ("live" if after is None else "unavailable"), sub.position
            first = await in_db_thread(snapshot) if snapshot is not None else None
    except BaseException:
        hub_fanout.unsubscribe(sub)
        raise
    return OpenedStream(replay, first, _frames(hub_fanout, sub, start))


async def _frames(hub_fanout: Fanout, sub: Subscription, start: int) -> AsyncIterator[list[Frame] | None]:
    keepalive = settings.AGENTS["SSE_KEEPALIVE_SECONDS"]
    try:
        last = start
        # the stored events between the client's position and the subscription's
        while last < sub.position:
            batch = await in_db_thread(partial(_read_frames, last, sub.scope.session_id))
            batch = [f for f in batch if f.seq <= sub.position]
            if not batch:
                break
            last = batch[-1].seq
            matching, deleted = _until_deleted(sub.scope, [frame for frame in batch if sub.scope.matches(frame)])
            if matching:
                yield matching
            if deleted:
                return
        while not hub.shutting_down.is_set():
            try:
                frame = await asyncio.wait_for(sub.queue.get(), keepalive)
            except TimeoutError:
                yield None
                continue
            ready = [frame]
            while not sub.queue.empty():
                ready.append(sub.queue.get_nowait())
            ended = any(f is END for f in ready)
            fresh, deleted = _until_deleted(sub.scope, [f for f in ready if f is not END and f.seq > last])
            if fresh:
                last = fresh[-1].seq
                now = time.time()
                for fresh_frame in fresh:
                    metrics.EVENT_FANOUT_SECONDS.observe(max(0.0, now - fresh_frame.written))
                yield fresh
            if ended or deleted:
                return
    finally:
        hub_fanout.unsubscribe(sub)


def _until_deleted(scope: Scope, frames: list[Frame]) -> tuple[list[Frame], bool]:
    """A one-session stream ends with its ``session.deleted`` (docs/api.md §9.2): the frames up
    to it, and whether it was among them."""
    if scope.session_id is None:
        return frames, False
    for index, frame in enumerate(frames):
        if frame.kind == "session.deleted":
            return frames[: index + 1], True
    return frames, False


def _read_frames(after: int, session_id: str | None) -> list[Frame]:
    return [Frame.of(e) for e in events.read_after(after, session_id=session_id)]


def parse_after(value: str | None) -> int | None:
    """A ``Last-Event-ID`` / ``after`` value: a non-negative integer, or ``None`` when absent.

    Raises:
        ValueError: anything else.
    """
    if value is None or value.strip() == "":
        return None
    number = int(value.strip())
    if number < 0:
        raise ValueError("negative")
    return number


def session_uuid(value: str) -> uuid.UUID | None:
    """The UUID in a path, or ``None`` when malformed."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
