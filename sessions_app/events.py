"""The only writer of events: durable rows, announced after commit (docs/api.md §9).

An event's ``data`` is ``{"kind", "seq", "session_id", "owner", ...payload}``. It is rendered from
the stored row the same way every time, so a replayed event is byte-for-byte the event sent live
(docs/api.md §9.7).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any, cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.utils import timezone

from foundation import metrics
from foundation.common import once_per_transaction
from foundation.postgresql.base import DatabaseWrapper as NumberingWrapper
from foundation.postgresql.base import before_commit
from sessions_app import hub
from sessions_app.dispatch import enqueue_watched_event
from sessions_app.event_types import (
    EventKind,
    SessionMeta,
    SessionUpdated,
    ToolFinished,
    ToolProgressed,
    ToolStarted,
    bounded_turn,
)
from sessions_app.models import Event, EventRetention, Session, SessionWatch
from sessions_app.serializers import meta_view

#: Any constant works: it only has to be the same in every process writing events.
_ADVISORY_LOCK_KEY = 0x6167656E7473


def emit(kind: EventKind, session_id: uuid.UUID | str, owner: str | None, payload: Mapping[str, Any]) -> Event:
    """Append an event in the current transaction (a new one when there is none).

    Args:
        kind: the event's kind.
        session_id: the session it is about.
        owner: the owner of the session's root (``None`` without authentication).
        payload: the kind's fields, a :data:`~sessions_app.event_types.PAYLOADS` TypedDict.
    Returns:
        The stored row; readers are woken once the transaction commits. On PostgreSQL its
        ``seq`` is provisional (negative) until the transaction commits, then the final one
        (docs/api.md §9.7).
    """
    # inside the change's transaction (the usual case) no savepoint is needed: the event and the
    # change commit or roll back together
    event = Event(
        session_id=session_id, owner=owner, kind=str(kind), payload_json=json.dumps(payload), created_at=timezone.now()
    )
    with transaction.atomic(savepoint=False):
        numbered_at_commit = isinstance(connections[DEFAULT_DB_ALIAS], NumberingWrapper)
        if connection.vendor == "postgresql" and not numbered_at_commit:
            # another project's PostgreSQL backend, without the hook: the lock to the end
            once_per_transaction("events_lock", _take_sequence_lock)
        # one INSERT ... RETURNING: events are written at every step and every streamed token,
        # and the model layer's save costs several times the statement itself
        with connection.cursor() as cursor:
            cursor.execute(
                _INSERT_PROVISIONAL if numbered_at_commit else _INSERT,
                [_db_value(name, getattr(event, name)) for name in _COLUMNS],
            )
            event.seq = cursor.fetchone()[0]
        if numbered_at_commit:
            pending = once_per_transaction("events_pending", _numbered_at_commit)
            pending.append(event)
            # one callback per event, as a savepoint that rolls back drops the callbacks made in it
            transaction.on_commit(partial(_announce_numbered, pending))
        else:
            hub.announce_on_commit(session_id, event.seq, owner)
            if _watched(session_id, str(kind)):
                enqueue_watched_event(event.seq)
            for hook in _event_hooks:
                hook(event)
    metrics.EVENTS.labels(kind=str(kind)).inc()
    return event


#: Called with every event inside the transaction that writes it (:func:`register_event_hook`).
EventHook = Callable[[Event], None]
_event_hooks: list[EventHook] = []


def register_event_hook(hook: EventHook) -> None:
    """Call ``hook`` with every event, inside the transaction that writes it, from now on.

    A higher layer (the webhooks' outbox, docs/webhooks.md §3) writes its own rows beside the
    event this way: they commit or roll back with it. The event has its final ``seq``: on
    PostgreSQL, where events are numbered just before commit (docs/api.md §9.7), hooks run then,
    still inside the transaction (``transaction.on_commit`` works there too). A hook that raises
    fails the change that emitted the event, so nothing is committed that the hook did not see.
    Hooks run on the hot path of every event, streamed tokens included, and must return at once
    for kinds they do not want. Registering the same hook twice keeps one.
    """
    if hook not in _event_hooks:
        _event_hooks.append(hook)


def tool_event_emitter(session: Session) -> Callable[[EventKind, ToolStarted | ToolProgressed | ToolFinished], None]:
    """What a step calls as its tool calls start, progress and end: the event of that kind."""

    def emit_tool_event(kind: EventKind, payload: ToolStarted | ToolProgressed | ToolFinished) -> None:
        emit(kind, session.pk, session.owner, payload)

    return emit_tool_event


def _take_sequence_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_ADVISORY_LOCK_KEY])
    return True


def _announce_numbered(events: list[Event]) -> None:
    """After commit: wake the readers of ``events`` (their seq now final) and their watchers, in
    one announcement; empties the list, so the first callback of a transaction sends them all."""
    changes: dict[str, hub.Change] = {}
    for event in events:
        changes.setdefault(str(event.session_id), hub.Change()).merge(event.seq, event.owner)
        if _watched(event.session_id, event.kind):
            enqueue_watched_event(event.seq)
    events.clear()
    if changes:
        hub.announce(changes)


def _numbered_at_commit() -> list[Event]:
    """The events of this PostgreSQL transaction, numbered just before it commits.

    Taking the sequence's lock at the first event and holding it to the end (as SQLite's single
    writer does) would make every event-writing transaction of the fleet wait for the others';
    here it is held for one statement and the ``COMMIT`` (docs/api.md §9.7).
    """
    pending: list[Event] = []

    def number() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT provisional, final FROM sessions_app_number_events(%s)", [_ADVISORY_LOCK_KEY])
            finals = dict(cursor.fetchall())
        # events of a savepoint that rolled back are gone, and keep no number
        pending[:] = [event for event in pending if event.seq in finals]
        for event in pending:
            event.seq = finals[event.seq]
        for event in pending:
            for hook in _event_hooks:
                hook(event)

    before_commit(number)
    return pending


#: Event kinds never forwarded to watchers: one mail per streamed token would flood them.
UNWATCHABLE_KINDS = frozenset({"text.delta", "snapshot"})


#: Seconds a process trusts its list of watched sessions: events are the hot path, and asking the
#: database about watches at every one of them tripled the cost of an event.
WATCHED_REFRESH_SECONDS = 1.0
_watched_ids: tuple[float, frozenset[str]] = (float("-inf"), frozenset())


def _watched(session_id: uuid.UUID | str, kind: str) -> bool:
    """Whether a live ``watch-session`` may want this event (docs/guide-sessions.md §3)."""
    global _watched_ids
    if kind in UNWATCHABLE_KINDS:
        return False
    loaded_at, ids = _watched_ids
    if time.monotonic() - loaded_at > WATCHED_REFRESH_SECONDS:
        live = SessionWatch.objects.filter(expires_at__gt=timezone.now()).values_list("watched_id", flat=True)
        ids = frozenset(str(watched) for watched in live.distinct())
        _watched_ids = (time.monotonic(), ids)
    return str(session_id) in ids


def forget_watched_sessions() -> None:
    """Make this process read the watched sessions again at its next event (a watch was made)."""
    global _watched_ids
    _watched_ids = (float("-inf"), frozenset())


_COLUMNS = ("session_id", "owner", "kind", "payload_json", "created_at")
_INSERT = (
    f"INSERT INTO {Event._meta.db_table} ({', '.join(_COLUMNS)}) "  # noqa: S608 - the table name comes from the model's meta; every value is a parameter
    f"VALUES ({', '.join(['%s'] * len(_COLUMNS))}) RETURNING seq"
)
#: The same with a provisional ``seq`` (PostgreSQL), numbered at commit by :func:`_numbered_at_commit`.
_INSERT_PROVISIONAL = (
    f"INSERT INTO {Event._meta.db_table} (seq, {', '.join(_COLUMNS)}) "  # noqa: S608 - as above
    f"VALUES (-nextval('sessions_app_event_pending'), {', '.join(['%s'] * len(_COLUMNS))}) RETURNING seq"
)


def _db_value(name: str, value: Any) -> Any:
    field = Event._meta.get_field(name)
    assert isinstance(field, models.Field)  # noqa: S101 - narrows the type (an Event column, not a relation)
    return field.get_db_prep_value(value, connection, prepared=False)


def emit_session_created(session: Session) -> Event:
    """``session.created``: the SessionMetaView of a new session."""
    # meta_view renders SessionMetaSerializer, whose fields are SessionMeta's
    return emit(EventKind.SESSION_CREATED, session.pk, session.owner, cast(SessionMeta, meta_view(session)))


def emit_session_updated(session: Session, head: dict[str, Any] | None) -> Event:
    """``session.updated``: the SessionMetaView of the stored version plus its ``head_turn``, its
    large values summarised (docs/api.md §9.6)."""
    shown = bounded_turn(head, settings.AGENTS["EVENT_VALUE_MAX_BYTES"])
    payload = cast(SessionUpdated, {**meta_view(session), "head_turn": shown})
    return emit(EventKind.SESSION_UPDATED, session.pk, session.owner, payload)


def event_data(event: Event) -> str:
    """The ``data`` of an event: one line of JSON, the same bytes on every read."""
    data = {"kind": event.kind, "seq": event.seq, "session_id": str(event.session_id), "owner": event.owner}
    data.update(json.loads(event.payload_json))
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def read_after(after: int, *, session_id: uuid.UUID | str | None = None, limit: int = 500) -> list[Event]:
    """Events with ``seq > after``, oldest first; one session's only when ``session_id`` is given."""
    query = Event.objects.filter(seq__gt=after)
    if session_id is not None:
        query = query.filter(session_id=session_id)
    return list(query.order_by("seq")[:limit])


def latest_seq() -> int:
    """The newest event's ``seq`` (0 when there is none)."""
    last = Event.objects.order_by("-seq").values_list("seq", flat=True).first()
    return last or 0


def replay_available(after: int) -> bool:
    """Whether every event after ``after`` is still stored (none pruned, none from the future).

    Pruning deletes the oldest rows, so the events after ``after`` are complete exactly when no
    event newer than ``after`` has been deleted: when ``after`` is at least the newest pruned seq.
    """
    if after > latest_seq():
        return False
    pruned = EventRetention.objects.filter(pk=1).values_list("pruned_through", flat=True).first() or 0
    return after >= pruned


def prune(max_age: timedelta) -> int:
    """Delete events older than ``max_age``; return how many were deleted."""
    cutoff = timezone.now() - max_age
    with transaction.atomic():
        newest_old = Event.objects.filter(created_at__lt=cutoff).order_by("-seq").values_list("seq", flat=True).first()
        if newest_old is None:
            return 0
        deleted, _ = Event.objects.filter(seq__lte=newest_old).delete()
        mark, _ = EventRetention.objects.select_for_update().get_or_create(pk=1)
        if newest_old > mark.pruned_through:
            mark.pruned_through = newest_old
            mark.save(update_fields=["pruned_through"])
    return deleted
