"""Wake-ups for event readers: a process-local hub, fed across processes by the channel layer.

Events live in the database (``sessions_app.events``); a reader (an SSE stream, a websocket, a
``wait=true`` request) reads them from there and only needs to be told *when* to look again.
:func:`notify` wakes the readers of this process, from any thread: the streams on every
notification, a reader of one session (:class:`SessionWatch`) only when that session changed. When
the server runs with Redis, each commit is also published on the Redis channel ``agents.events``
with the sessions it changed, and every server process subscribes to it (:func:`start_listener`)
and wakes its own readers.

Inside one process the hub is the path; between processes, Redis pub/sub: an announcement is a
wake-up, not data (the events are in the database), so one lost while a connection is replaced
only delays readers until their next timed look.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable

import redis
from django.conf import settings
from django.db import connection
from django.db.transaction import on_commit as transaction_on_commit

log = logging.getLogger("sessions.hub")

_lock = threading.Lock()
_condition = threading.Condition(_lock)

#: Set when this process shuts down: streams end, waiters answer, runs hand their session back.
shutting_down = threading.Event()
_generation = 0
_async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
#: session id -> the watches of readers of that session in this process
_session_watches: dict[str, set[threading.Event]] = {}


def notify(session_ids: Iterable[str] | None = None) -> None:
    """Wake the readers of this process (thread-safe, never blocks).

    Args:
        session_ids: the sessions that changed; ``None`` when unknown, which wakes every watch.
    """
    global _generation
    with _condition:
        _generation += 1
        _condition.notify_all()
        waiters = list(_async_waiters)
        if session_ids is None:
            watches = [watch for group in _session_watches.values() for watch in group]
        else:
            watches = [watch for sid in session_ids for watch in _session_watches.get(sid, ())]
    for watch in watches:
        watch.set()
    for loop, event in waiters:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            # the reader's loop has closed; it unregisters itself on the way out
            pass


def begin_shutdown() -> None:
    """Start this process's shutdown and wake every reader so that it notices."""
    shutting_down.set()
    notify()


class SessionWatch:
    """A reader of one session: :meth:`wait` returns when that session changed (or on shutdown).

    Open it before reading the session, so that a change between the read and the wait is not
    lost; use it as a context manager.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = str(session_id)
        self.event = threading.Event()

    def __enter__(self) -> SessionWatch:
        with _condition:
            _session_watches.setdefault(self.session_id, set()).add(self.event)
        return self

    def __exit__(self, *exc: object) -> None:
        with _condition:
            group = _session_watches.get(self.session_id)
            if group is not None:
                group.discard(self.event)
                if not group:
                    del _session_watches[self.session_id]

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; ``True`` when the session changed (the flag is cleared)."""
        changed = self.event.wait(timeout)
        self.event.clear()
        return changed


def generation() -> int:
    """A counter that moves on every :func:`notify`; pass it to :func:`wait_sync`."""
    with _condition:
        return _generation


def wait_sync(seen: int, timeout: float) -> int:
    """Block until a notification newer than ``seen`` or ``timeout`` seconds; return the counter."""
    with _condition:
        _condition.wait_for(lambda: _generation != seen, timeout=timeout)
        return _generation


class AsyncWaiter:
    """An asyncio reader's registration: ``await waiter.wait(timeout)`` returns on a notification.

    Register before reading, so that a notification between the read and the wait is not lost.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        with _condition:
            _async_waiters.add((self.loop, self.event))

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; ``True`` when notified (the flag is then cleared)."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    def close(self) -> None:
        """Stop receiving notifications."""
        with _condition:
            _async_waiters.discard((self.loop, self.event))


#: The Redis pub/sub channel every process publishes its commits on.
CHANNEL = "agents.events"


class _Publisher(threading.Thread):
    """Publishes this process's announcements on Redis, several commits per message when they
    come faster than one round trip, so that a committing thread never waits for Redis."""

    def __init__(self) -> None:
        super().__init__(name="events-announcer", daemon=True)
        self.pending: queue.SimpleQueue[list[str]] = queue.SimpleQueue()

    def run(self) -> None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_keepalive=True)
        while True:
            ids = set(self.pending.get())
            while True:
                try:
                    ids.update(self.pending.get_nowait())
                except queue.Empty:
                    break
            try:
                client.publish(CHANNEL, json.dumps(sorted(ids)))
            except redis.RedisError:
                # readers also re-read on a timer, so a lost announcement only delays them
                log.warning("could not announce events", exc_info=True, extra={"kind": "events.announce_failed"})


_publisher: _Publisher | None = None


def _publish(ids: list[str]) -> None:
    global _publisher
    with _lock:
        if _publisher is None:
            _publisher = _Publisher()
            _publisher.start()
    _publisher.pending.put(ids)


def announce(session_ids: Iterable[str]) -> None:
    """Tell every process that these sessions changed: wake this one, and the others via Redis.

    Never blocks the caller: the Redis publish happens on the announcer thread.
    """
    ids = sorted({str(sid) for sid in session_ids})
    notify(ids)
    if settings.REDIS_URL:
        _publish(ids)


def announce_on_commit(session_id: object) -> None:
    """Announce a change of ``session_id`` once the current transaction commits (at once without one).

    The sessions changed by one transaction are announced together, once: the first callback to
    run takes every pending id. Ids left by a transaction that rolled back go out with the next
    commit of this connection, a harmless extra wake-up.
    """
    pending: set[str] = connection.__dict__.setdefault("agents_announce", set())
    pending.add(str(session_id))

    def flush() -> None:
        ids = set(pending)
        pending.clear()
        if ids:
            announce(ids)

    transaction_on_commit(flush)


_listener_started = False


def start_listener() -> None:
    """In a server process with Redis, relay the other processes' announcements to this hub.

    Runs in a daemon thread subscribed to :data:`CHANNEL`; idempotent. When the connection breaks
    it wakes every reader of this process (they read again) and subscribes again.
    """
    global _listener_started
    with _lock:
        if _listener_started or not settings.REDIS_URL:
            return
        _listener_started = True
    threading.Thread(target=_listen, name="events-listener", daemon=True).start()


def _listen() -> None:
    while True:
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_keepalive=True, health_check_interval=30)
            subscription = client.pubsub(ignore_subscribe_messages=True)
            subscription.subscribe(CHANNEL)
            while True:
                # a timeout, so that the health check pings a connection that stays quiet
                message = subscription.get_message(timeout=5.0)
                if message is not None:
                    notify(json.loads(message["data"]))
        except (redis.RedisError, OSError, ValueError):
            log.warning("event listener lost Redis; retrying", exc_info=True, extra={"kind": "events.listener"})
            notify()
            time.sleep(1)
