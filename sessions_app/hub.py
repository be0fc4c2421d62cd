"""Wake-ups for event readers: a process-local hub, fed across processes by the channel layer.

Events live in the database (``sessions_app.events``); a reader (an SSE stream, a websocket, a
``wait=true`` request) reads them from there and only needs to be told *when* to look again.
:func:`notify` wakes the readers of this process, from any thread: the streams on every
notification, a reader of one session (:class:`SessionWatch`) only when that session changed.

Every commit is also sent through Channels' channel layer (``CHANNEL_LAYERS["default"]``):
channels-redis's pub/sub layer when the server runs with Redis, the in-memory layer in the
embedded default. Three kinds of groups receive it (docs/api.md §9.8):

- :data:`SERVERS_GROUP`, which every server process joins (:func:`start_listener`) to wake its
  own readers: one ``agents.changed`` message per batch of commits, naming the sessions;
- :func:`session_group` of each changed session and :func:`owner_group` of its owner, which a
  project's own consumer joins with ``group_add``: one ``agents.session.changed`` message per
  session, with the newest ``seq`` the batch wrote for it.

A message is a wake-up, not data: the events are read from the database after the reader's own
cursor, so a message lost while a connection is replaced only delays readers until their next
timed look, and a silent layer (the listener's heartbeat did not come back) wakes every reader.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
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


# --- the channel layer's groups (docs/api.md §9.8) ------------------------------------------------

#: The group every server process joins; its messages are ``{"type": "agents.changed",
#: "sessions": [session id, ...]}``.
SERVERS_GROUP = "agents.events"
#: The ``type`` of the messages sent to :func:`session_group` and :func:`owner_group`: a Channels
#: consumer handles them in its ``agents_session_changed`` method.
SESSION_CHANGED = "agents.session.changed"


def session_group(session_id: uuid.UUID | str) -> str:
    """The channel-layer group of one session: ``agents.session.<session id>``.

    Args:
        session_id: the session's id (a UUID, or its canonical text).
    Returns:
        A valid Channels group name (ASCII letters, digits, ``-`` and ``.``; 51 characters).
    Raises:
        ValueError: ``session_id`` is not a UUID.
    """
    return f"agents.session.{uuid.UUID(str(session_id))}"


def owner_group(owner: str) -> str:
    """The channel-layer group of one owner's sessions: ``agents.owner.<digest>``.

    An owner (``key:…``, ``user:…``, an email) may hold characters Channels forbids in a group
    name, and any length; the digest is the first 32 hexadecimal digits of the SHA-256 of the
    owner's UTF-8 bytes.

    Args:
        owner: the owner of the sessions' root, as events carry it in ``owner``.
    Returns:
        A valid Channels group name of 45 characters.
    """
    return "agents.owner." + hashlib.sha256(owner.encode()).hexdigest()[:32]


@dataclass
class Change:
    """What one batch of commits did to one session: the newest event's ``seq`` it wrote
    (``None`` when it wrote no event, e.g. mail arrived) and the session's owner, when known."""

    seq: int | None = None
    owner: str | None = None

    def merge(self, seq: int | None, owner: str | None) -> None:
        """Fold in a later change of the same session."""
        if seq is not None and (self.seq is None or seq > self.seq):
            self.seq = seq
        self.owner = owner or self.owner


def session_message(session_id: str, change: Change) -> dict[str, Any]:
    """The group message of one changed session:
    ``{"type": "agents.session.changed", "session_id", "seq"}``."""
    return {"type": SESSION_CHANGED, "session_id": session_id, "seq": change.seq}


def _group_messages(changes: Mapping[str, Change]) -> list[tuple[str, dict[str, Any]]]:
    sent: list[tuple[str, dict[str, Any]]] = [(SERVERS_GROUP, {"type": "agents.changed", "sessions": sorted(changes)})]
    for session_id, change in changes.items():
        message = session_message(session_id, change)
        sent.append((session_group(session_id), message))
        if change.owner and change.seq is not None:
            sent.append((owner_group(change.owner), message))
    return sent


def _group_channel(group: str) -> str:
    """The Redis pub/sub channel on which channels-redis's pub/sub layer carries ``group``: its
    prefix (``CONFIG["prefix"]``, ``asgi`` by default), ``__group__``, then the group's name."""
    config = settings.CHANNEL_LAYERS["default"].get("CONFIG", {})
    return f"{config.get('prefix', 'asgi')}__group__{group}"


class _Publisher(threading.Thread):
    """Sends this process's announcements to the groups of the Redis channel layer, several
    commits per batch when they come faster than one round trip, so that a committing thread
    never waits.

    A batch's messages go out in one pipeline of ``PUBLISH`` commands, in the layer's own format
    (its group channels, its serializer), which every consumer of the layer receives as a
    ``group_send``: the layer's asynchronous ``group_send`` costs one round trip and about four
    times the CPU per message, on the path of every event.
    """

    def __init__(self) -> None:
        super().__init__(name="events-announcer", daemon=True)
        self.pending: queue.SimpleQueue[Mapping[str, Change]] = queue.SimpleQueue()

    def run(self) -> None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_keepalive=True)
        layer = _redis_layer()
        while True:
            changes: dict[str, Change] = {}
            batch = self.pending.get()
            while True:
                for sid, change in batch.items():
                    changes.setdefault(sid, Change()).merge(change.seq, change.owner)
                try:
                    batch = self.pending.get_nowait()
                except queue.Empty:
                    break
            pipeline = client.pipeline(transaction=False)
            for group, message in _group_messages(changes):
                pipeline.publish(_group_channel(group), layer.serialize(message))
            try:
                pipeline.execute()
            except redis.RedisError:
                # readers also re-read on a timer, so a lost announcement only delays them
                log.warning("could not announce events", exc_info=True, extra={"kind": "events.announce_failed"})


async def _send_all(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    for group, message in messages:
        await layer.group_send(group, message)


_publisher: _Publisher | None = None


def _publish(changes: Mapping[str, Change]) -> None:
    global _publisher
    with _lock:
        if _publisher is None:
            _publisher = _Publisher()
            _publisher.start()
    _publisher.pending.put(changes)


#: The event loop of this process's ASGI server, where the in-memory layer's consumers run.
_memory_loop: asyncio.AbstractEventLoop | None = None


def _deliver_in_memory(changes: Mapping[str, Change]) -> None:
    loop = _memory_loop
    layer = get_channel_layer()
    if loop is None or layer is None:
        return
    groups = getattr(layer, "groups", None)
    # only the groups someone joined: the hot path pays nothing for groups no consumer reads
    if not groups:
        return
    wanted = [(group, message) for group, message in _group_messages(changes) if group in groups]
    if wanted:
        try:
            asyncio.run_coroutine_threadsafe(_send_all(layer, wanted), loop)
        except RuntimeError:
            # the server's loop has closed: this process is stopping
            pass


def announce(changes: Mapping[str, Change]) -> None:
    """Tell every process that these sessions changed: wake this one, and send the change to the
    channel layer's groups (docs/api.md §9.8).

    Never blocks the caller: with Redis the layer is fed by the announcer thread; in memory the
    messages are handed to the server's event loop.

    Args:
        changes: session id -> what the commits did to it.
    """
    notify(sorted(changes))
    if settings.REDIS_URL:
        _publish(changes)
    elif _memory_loop is not None:
        _deliver_in_memory(changes)


def announce_on_commit(session_id: object, seq: int | None = None, owner: str | None = None) -> None:
    """Announce a change of ``session_id`` once the current transaction commits (at once without one).

    The sessions changed by one transaction are announced together, once: the first callback to
    run takes every pending change. Changes left by a transaction that rolled back go out with
    the next commit of this connection, a harmless extra wake-up.

    Args:
        session_id: the session that changed.
        seq: the ``seq`` of the event the change wrote, if it wrote one.
        owner: the session's owner, when the caller knows it (events carry it).
    """
    # the thread's own connection: ``django.db.connection`` is one proxy object for every thread
    pending: dict[str, Change] = connections[DEFAULT_DB_ALIAS].__dict__.setdefault("agents_announce", {})
    pending.setdefault(str(session_id), Change()).merge(seq, owner)

    def flush() -> None:
        changes = dict(pending)
        pending.clear()
        if changes:
            announce(changes)

    transaction_on_commit(flush)


#: Seconds between two heartbeats the listener sends itself through the layer; one that has not
#: come back by the next means the layer may have lost messages, and every reader reads again.
HEARTBEAT_SECONDS = 5.0

_listener_started = False


def start_listener() -> None:
    """Join this process to the channel layer's :data:`SERVERS_GROUP` (idempotent).

    With Redis, a daemon thread joins the group and relays its messages to this hub. In memory,
    called on the server's event loop (the ASGI application does at its first connection), it
    makes that loop the one that delivers the groups' messages to in-process consumers.
    """
    global _listener_started, _memory_loop
    if _listener_started:
        return
    with _lock:
        if _listener_started:
            return
        if not settings.REDIS_URL:
            try:
                _memory_loop = asyncio.get_running_loop()
            except RuntimeError:
                # a thread without a loop (a wait=true request): the in-process hub suffices
                return
            _listener_started = True
            return
        _listener_started = True
    threading.Thread(target=_listen, name="events-listener", daemon=True).start()


def _listen() -> None:
    while True:
        try:
            asyncio.run(_relay())
        except Exception:
            log.warning("event listener lost the channel layer", exc_info=True, extra={"kind": "events.listener"})
            notify()
            time.sleep(1)


def _redis_layer() -> RedisPubSubChannelLayer:
    """The Redis pub/sub layer the settings configure whenever ``REDIS_URL`` is set (docs/api.md
    §9.8); the announcer and the listener run only then.

    Raises:
        ImproperlyConfigured: ``CHANNEL_LAYERS`` names another backend.
    """
    layer = get_channel_layer()
    if not isinstance(layer, RedisPubSubChannelLayer):
        raise ImproperlyConfigured("with REDIS_URL set, CHANNEL_LAYERS must use channels_redis.pubsub")
    return layer


async def _relay() -> None:
    layer = _redis_layer()
    channel = await layer.new_channel(prefix="agents.server.")
    await layer.group_add(SERVERS_GROUP, channel)
    beats = {"sent": 0, "heard": 0}

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            if beats["heard"] < beats["sent"]:
                log.warning("the channel layer went silent", extra={"kind": "events.listener"})
                notify()
                beats["heard"] = beats["sent"]
            beats["sent"] += 1
            try:
                await layer.send(channel, {"type": "agents.heartbeat", "beat": beats["sent"]})
            except Exception:
                # the next beat finds this one missing and wakes every reader
                log.warning("could not send the listener's heartbeat", exc_info=True, extra={"kind": "events.listener"})

    beating = asyncio.create_task(heartbeat())
    try:
        while True:
            message = await layer.receive(channel)
            if message["type"] == "agents.changed":
                notify(message["sessions"])
            elif message["type"] == "agents.heartbeat":
                beats["heard"] = max(beats["heard"], message["beat"])
    finally:
        beating.cancel()
