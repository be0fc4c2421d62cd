"""Reads of sessions: lookups, listings and the JSON views of docs/api.md §5."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from foundation.auth import Principal
from foundation.common import db_now
from foundation.errors import UnknownSession, UnknownToken
from sessions_app import hub, mailbox
from sessions_app.access import can_see
from sessions_app.models import BackgroundCall, Continuation, MailEnvelope, PeriodicLease, Session

#: Longest sleep between two reads while waiting for a run to stop, in seconds.
WAIT_RECHECK_SECONDS = 1.0


def session_get(session_id: uuid.UUID) -> Session:
    """The session with ``session_id``.

    Raises:
        ApiError: 404 ``unknown_session``.
    """
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        raise UnknownSession(session_id)
    return session


def session_list(
    *,
    agent: str | None,
    statuses: list[str] | None,
    parent: uuid.UUID | None,
    limit: int,
    before: datetime | None,
    owner: str | None = None,
) -> tuple[list[Session], datetime | None]:
    """A page of sessions, newest ``updated_at`` first (docs/api.md §7.2).

    Top-level sessions only, unless ``parent`` asks for that session's children. With ``owner``
    (authentication on), only that owner's top-level sessions (docs/api.md §10.3); the children of
    a parent the caller may see are all of its owner's.

    Returns:
        ``(rows, next_before)``: ``next_before`` is the last row's ``updated_at`` when the page is
        full, else ``None``.
    """
    query = Session.objects.all()
    query = query.filter(parent_id=parent) if parent is not None else query.filter(parent__isnull=True)
    if owner is not None and parent is None:
        query = query.filter(owner=owner)
    if agent:
        query = query.filter(agent_slug=agent)
    if statuses:
        query = query.filter(status__in=statuses)
    if before is not None:
        query = query.filter(updated_at__lt=before)
    rows = list(query.order_by("-updated_at", "-id")[:limit])
    next_before = rows[-1].updated_at if len(rows) == limit else None
    return rows, next_before


def wait_for_run(session_id: uuid.UUID, timeout: float) -> Session:
    """Wait up to ``timeout`` seconds for the session's run to stop; return the session then.

    Sleeps until the session changes (in any process: the hub relays other processes'
    announcements), then reads its status again. A client that goes away while waiting does not
    affect the run: this only reads.
    """
    hub.start_listener()
    deadline = time.monotonic() + timeout
    with hub.SessionWatch(str(session_id)) as watch:
        while True:
            status = session_status(session_id)
            remaining = deadline - time.monotonic()
            if status != Session.Status.RUNNING or remaining <= 0 or hub.shutting_down.is_set():
                return session_get(session_id)
            # woken when the session changes; the cap only bounds the delay of a lost announcement
            watch.wait(min(remaining, WAIT_RECHECK_SECONDS))


def background_calls_live(session_id: uuid.UUID) -> int:
    """How many background calls of the session are still to end: running (or waiting for a
    worker) with a heartbeat younger than a lease. An older one's process died: it is orphaned
    (docs/sessions.md §4.6) and will never end by itself, so it is not counted."""
    cutoff = timezone.now() - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
    live = BackgroundCall.objects.filter(
        session_id=session_id, state=BackgroundCall.State.RUNNING, heartbeat_at__gte=cutoff
    )
    return live.count()


def session_status(session_id: uuid.UUID) -> str | None:
    """The session's status, or ``None`` when it does not exist: one indexed read of one column,
    for the loops that wait on a run."""
    key = Session._meta.pk.get_db_prep_value(session_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status FROM {Session._meta.db_table} WHERE id = %s", [key])  # noqa: S608 - the table name comes from the model's meta; every value is a parameter
        row = cursor.fetchone()
    return row[0] if row else None


def mail_list(session: Session, *, unread: bool) -> list[MailEnvelope]:
    """The session's envelopes, oldest first; with ``unread`` only those not consumed yet."""
    if unread:
        return mailbox.unread(session, session.parsed_document())
    return list(MailEnvelope.objects.filter(session=session).order_by("seq"))


def require_visible(principal: Principal, session_id: uuid.UUID) -> None:
    """Refuse a session the caller may not see, as a missing one (docs/api.md §10.3).

    Raises:
        UnknownSession: it is missing or someone else's.
    """
    if not can_see(principal, session_id):
        raise UnknownSession(session_id)


def require_visible_token(principal: Principal, token: uuid.UUID) -> None:
    """Refuse a continuation of a session the caller may not see, as a missing token (docs/api.md §10.3).

    A token that does not exist is left to the service, which answers the same.

    Raises:
        UnknownToken: the token's session is someone else's.
    """
    owning = Continuation.objects.filter(pk=token).values_list("session_id", flat=True).first()
    if owning is not None and not can_see(principal, owning):
        raise UnknownToken(token)


def health() -> dict[str, Any]:
    """``{"ok": true, "live_sessions": N, "active_runs": N, "recovery": {...}}``: ``live_sessions``
    counts sessions that are neither idle nor failed (work is pending or going on), ``active_runs``
    those running, ``recovery`` is :func:`recovery_health` (docs/api.md §13)."""
    active = Session.objects.filter(status=Session.Status.RUNNING).count()
    live = Session.objects.exclude(status__in=[Session.Status.IDLE, Session.Status.FAILED]).count()
    return {"ok": True, "live_sessions": live, "active_runs": active, "recovery": recovery_health()}


#: Sweep periods without a finished sweep after which recovery is said not to run.
STALE_PERIODS = 3


def recovery_health() -> dict[str, Any]:
    """Whether some process sweeps runs (docs/sessions.md §4.9).

    Returns:
        ``{"last_sweep_at": datetime | None, "sweep_every_seconds": float, "stale": bool}``:
        when the last sweep finished (by the database's clock), the sweep's period, and whether
        no sweep has finished for :data:`STALE_PERIODS` periods (or ever) while none is going
        on: no worker is up (scaled out), or every sweep fails.
    """
    every = settings.AGENTS["SWEEP_EVERY_SECONDS"]
    row = PeriodicLease.objects.filter(name=PeriodicLease.SWEEP).first()
    now = db_now()
    last = row.finished_at if row is not None else None
    sweeping = row is not None and row.held_until is not None and row.held_until >= now
    late = last is None or (now - last).total_seconds() > STALE_PERIODS * every
    return {"last_sweep_at": last, "sweep_every_seconds": every, "stale": late and not sweeping}
