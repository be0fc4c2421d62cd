"""Wake-ups for event readers: a process-local hub, fed across processes by the channel layer.

Events live in the database (``sessions_app.events``); a reader (an SSE stream, a websocket, a
``wait=true`` request) reads them from there and only needs to be told *when* to look again.
:func:`notify` wakes the readers of this process, from any thread: the streams on every
notification, a reader of one session (:class:`SessionWatch`) only when that session changed. When
the server runs with Redis, each commit is also announced on the channel layer group
``agents.events`` with the sessions it changed, and every server process listens to that group
(:func:`start_listener`) and wakes its own readers.

The in-memory channel layer is not safe to use across threads and event loops (the embedded
Celery worker runs in its own thread), so inside one process the hub is the path; between
processes it is channels-redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.conf import settings
from django.db import connection
from django.db.transaction import on_commit as transaction_on_commit

log = logging.getLogger("sessions.hub")

GROUP = "agents.events"

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


_sender_loop: asyncio.AbstractEventLoop | None = None


def _sender() -> asyncio.AbstractEventLoop:
    # One long-lived loop per process sends the announcements: the channel layer keeps its Redis
    # connections per event loop, so a fresh loop per send would open new ones every time.
    global _sender_loop
    with _lock:
        if _sender_loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="events-announcer", daemon=True).start()
            _sender_loop = loop
        return _sender_loop


def _own_layer() -> object:
    # A layer instance of our own: the channel layer object Channels hands out is shared with the
    # server's event loop, and channels-redis refuses receives from two loops on one instance.
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


_announce_layer: object | None = None


async def _group_send(session_ids: list[str]) -> None:
    global _announce_layer
    try:
        if _announce_layer is None:
            _announce_layer = _own_layer()
        await _announce_layer.group_send(GROUP, {"type": "events.committed", "sessions": session_ids})
    except Exception:
        # readers also re-read on a timer, so a lost announcement only delays them
        log.warning("could not announce events", exc_info=True, extra={"kind": "events.announce_failed"})


def announce(session_ids: Iterable[str]) -> None:
    """Tell every process that these sessions changed: wake this one, and the others via Redis.

    Never blocks the caller: the Redis send happens on the announcer thread.
    """
    ids = sorted({str(sid) for sid in session_ids})
    notify(ids)
    if settings.REDIS_URL:
        asyncio.run_coroutine_threadsafe(_group_send(ids), _sender())


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
    """In a server process with Redis, relay the group's announcements to this process's hub.

    Runs in a daemon thread with its own event loop; idempotent.
    """
    global _listener_started
    with _lock:
        if _listener_started or not settings.REDIS_URL:
            return
        _listener_started = True
    threading.Thread(target=lambda: asyncio.run(_listen()), name="events-listener", daemon=True).start()


async def _listen() -> None:
    layer = _own_layer()
    while True:
        try:
            channel = await layer.new_channel()
            await layer.group_add(GROUP, channel)
            while True:
                try:
                    message = await asyncio.wait_for(layer.receive(channel), timeout=3600)
                except TimeoutError:
                    # group membership expires in channels-redis: join again now and then
                    await layer.group_add(GROUP, channel)
                    continue
                notify(message.get("sessions"))
        except Exception:
            log.warning("event listener lost Redis; retrying", exc_info=True, extra={"kind": "events.listener"})
            await asyncio.sleep(1)
