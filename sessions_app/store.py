"""The versioned store of session rows: the only code that writes a ``Session`` row.

Every stored change increments ``version`` and is written with ``UPDATE ... WHERE version = n``
(docs/sessions.md §4.3; the README's "How it is built"); a run's writes are also fenced
by its lease. Each store appends ``session.updated`` in the same transaction.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F

from agentsite.common import db_now, dump_json_text
from agentsite.errors import UnknownSession
from sessions_app import events
from sessions_app.models import Session

RUN_MODES = ("step", "until_blocked")


class VersionConflict(Exception):
    """A compare-and-store found another version than the one it read."""


def store(session: Session, document: dict[str, Any], *, fence_run: str | None = None, **fields: Any) -> Session:
    """Store a new version of ``session`` if nobody stored one since it was read.

    Args:
        session: the row as read; its ``version`` is the expected one.
        document: the new session document.
        fence_run: when given, the write also requires that this worker (``run_owner``) still
            holds the run ``session.run_id``: a worker that lost its lease cannot write.
        **fields: other columns to set (``status``, ``status_detail``, run fields...).
    Returns:
        The row as stored (version incremented, ``updated_at`` now).
    Raises:
        VersionConflict: the stored version moved, or the fence no longer holds.
    """
    now = db_now()
    query = Session.objects.filter(pk=session.pk, version=session.version)
    if fence_run is not None:
        query = query.filter(run_owner=fence_run, run_id=session.run_id)
    document_json = dump_json_text(document)
    changed = query.update(document_json=document_json, version=F("version") + 1, updated_at=now, **fields)
    if changed != 1:
        raise VersionConflict(f"session {session.pk} changed since version {session.version}")
    session.document_json = document_json
    session.version += 1
    session.updated_at = now
    for name, value in fields.items():
        setattr(session, name, value)
    events.emit_session_updated(session)
    return session


def insert_session(document: dict[str, Any], **fields: Any) -> Session:
    """Store a new session at version 1 and emit ``session.created`` and ``session.updated``.

    Args:
        document: its session document.
        **fields: the other columns (id, agent_slug, owner, status or run fields, ...).
    """
    now = db_now()
    session = Session.objects.create(
        version=1, created_at=now, updated_at=now, document_json=dump_json_text(document), **fields
    )
    events.emit_session_created(session)
    events.emit_session_updated(session)
    return session


def run_fields(mode: str) -> dict[str, Any]:
    """Columns that request a run: ``status=running`` and a fresh ``run_id`` for the task to claim."""
    return {
        "status": Session.Status.RUNNING,
        "status_detail": None,
        "run_id": uuid.uuid4(),
        "run_mode": mode,
        "run_owner": None,
        "run_lease_until": None,
    }


def lock_session(session_id: uuid.UUID) -> Session:
    """The session row, locked for the rest of the transaction (``SELECT ... FOR UPDATE``).

    Raises:
        ApiError: 404 ``unknown_session``.
    """
    try:
        return Session.objects.select_for_update().get(pk=session_id)
    except Session.DoesNotExist as exc:
        raise UnknownSession(session_id) from exc


def run_is_active(session: Session) -> bool:
    """Whether a run is requested or going on ``session``."""
    return session.status == Session.Status.RUNNING


def lease_deadline(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` expires (``AGENTS_LEASE_SECONDS``, default 30 s)."""
    return now + timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
