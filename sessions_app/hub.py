"""Wake-ups for event readers: a process-local hub, fed across processes by the channel layer.

Events live in the database (``sessions_app.events``); a reader (an SSE stream, a websocket, a
``wait=true`` request) reads them from there and only needs to be told *when* to look again.
:func:`notify` wakes every reader of this process, from any thread. When the server runs with
Redis, each commit of events is also announced on the channel layer group ``agents.events``, and
every server process listens to that group (:func:`start_listener`) and wakes its own readers.

The in-memory channel layer is not safe to use across threads and event loops (the embedded
Celery worker runs in its own thread), so inside one process the hub is the path; between
processes it is channels-redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.conf import settings

log = logging.getLogger("sessions.hub")

GROUP = "agents.events"

_lock = threading.Lock()
_condition = threading.Condition(_lock)

#: Set when this process shuts down: streams end, waiters answer, runs hand their session back.
shutting_down = threading.Event()
_generation = 0
_async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()


def notify() -> None:
    """Wake every reader of this process (thread-safe, never blocks)."""
    global _generation
    with _condition:
        _generation += 1
        _condition.notify_all()
        waiters = list(_async_waiters)
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


async def _group_send() -> None:
    global _announce_layer
    try:
        if _announce_layer is None:
            _announce_layer = _own_layer()
        await _announce_layer.group_send(GROUP, {"type": "events.committed"})
    except Exception:
        # readers also re-read on a timer, so a lost announcement only delays them
        log.warning("could not announce events", exc_info=True, extra={"kind": "events.announce_failed"})


def announce() -> None:
    """Tell every process that events were committed: wake this one, and the others via Redis.

    Never blocks the caller: the Redis send happens on the announcer thread.
    """
    notify()
    if settings.REDIS_URL:
        asyncio.run_coroutine_threadsafe(_group_send(), _sender())


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
                    await asyncio.wait_for(layer.receive(channel), timeout=3600)
                except TimeoutError:
                    # group membership expires in channels-redis: join again now and then
                    await layer.group_add(GROUP, channel)
                    continue
                notify()
        except Exception:
            log.warning("event listener lost Redis; retrying", exc_info=True, extra={"kind": "events.listener"})
            await asyncio.sleep(1)
