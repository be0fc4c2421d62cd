"""The versioned store of session rows: the only code that writes a ``Session`` row.

Every stored change increments ``version`` and is written with ``UPDATE ... WHERE version = n``
(docs/sessions.md §4.3; docs/architecture.md §1); a run's writes are also fenced
by its lease. Each store appends ``session.updated`` in the same transaction.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, overload

from django.conf import settings
from django.db.models import F, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce, Now

from agentfiles.usage import turn_token_usage
from foundation.common import db_now, dump_json_text
from foundation.errors import UnknownSession
from sessions_app import events, transitions
from sessions_app.models import DOCUMENTS, Session, Turn


class VersionConflict(Exception):
    """A compare-and-store found another version than the one it read."""


def store(session: Session, document: dict[str, Any], *, fence_run: str | None = None, **fields: Any) -> Session:
    """Store a new version of ``session`` if nobody stored one since it was read.

    Only what changed is written: the header (the document without its turns) on the session
    row, and the Turn rows of the turns that are new or replaced (usually one: a step appends a
    turn or replaces the head). The turns are compared with the version ``session`` was read
    at, by identity first (documents built from it share its unchanged turns).

    Args:
        session: the row as read; its ``version`` is the expected one.
        document: the new session document.
        fence_run: when given, the write also requires that this worker (``run_owner``) still
            holds the run ``session.run_id``: a worker that lost its lease cannot write.
        **fields: other columns to set (``status``, ``status_detail``, run fields...); a new
            ``status`` must be a change of ``sessions_app.transitions.TRANSITIONS``.
    Returns:
        The row as stored (version incremented, ``updated_at`` now).
    Raises:
        VersionConflict: the stored version moved, or the fence no longer holds.
        StatusTransitionRefused: a change of status the table does not hold (nothing is written).
    """
    _check_status(session, fields)
    now = db_now()
    query = Session.objects.filter(pk=session.pk, version=session.version)
    if fence_run is not None:
        query = query.filter(run_owner=fence_run, run_id=session.run_id)
    base = session.parsed_document()["turns"][::-1]
    turns = document.get("turns") or []
    new = turns[::-1]
    first = _first_change(base, new)
    header_json = _header_json(document)
    version = session.version + 1
    changed = query.update(
        header_json=header_json, turn_count=len(new), version=F("version") + 1, updated_at=now, **fields
    )
    if changed != 1:
        raise VersionConflict(f"session {session.pk} changed since version {session.version}")
    written = _write_turns(session.pk, version, new, first, len(base))
    old_size = DOCUMENTS.size_of(session.pk) or len(header_json)
    session.header_json = header_json
    session.turn_count = len(new)
    session.version = version
    session.updated_at = now
    for name, value in fields.items():
        setattr(session, name, value)
    DOCUMENTS.put(session.pk, version, _cached_copy(document, turns), old_size + written)
    events.emit_session_updated(session, turns[0] if turns else None)
    return session


def store_params(session: Session, params: dict[str, Any]) -> Session:
    """Set a session's non-secret parameter values while a run holds it (docs/api.md §7.15).

    The one column a request may change under a running run without a version: the run never
    writes it and reads it again at each step, so its fenced stores are not disturbed.
    """
    Session.objects.filter(pk=session.pk).update(params=params)
    session.params = params
    return session


def store_columns(session: Session, *, fence_run: str | None = None, **fields: Any) -> Session:
    """Store a new version of ``session`` that changes its columns only, never its document.

    For a session whose document cannot be read (``UnreadableSession``): its run fails or is
    recovered without the document being looked at. ``session.updated`` has no ``head_turn``.

    Raises:
        VersionConflict: the stored version moved, or the fence no longer holds.
        StatusTransitionRefused: as :func:`store`.
    """
    _check_status(session, fields)
    now = db_now()
    query = Session.objects.filter(pk=session.pk, version=session.version)
    if fence_run is not None:
        query = query.filter(run_owner=fence_run, run_id=session.run_id)
    if query.update(version=F("version") + 1, updated_at=now, **fields) != 1:
        raise VersionConflict(f"session {session.pk} changed since version {session.version}")
    session.version += 1
    session.updated_at = now
    for name, value in fields.items():
        setattr(session, name, value)
    events.emit_session_updated(session, None)
    return session


def _check_status(session: Session, fields: dict[str, Any]) -> None:
    """Refuse, before anything is written, a new status the transition table does not allow."""
    if "status" in fields:
        transitions.check(session.pk, session.status, fields["status"])


def _first_change(base: list[dict[str, Any]], new: list[dict[str, Any]]) -> int:
    """The position (oldest first) of the first turn of ``new`` that ``base`` does not hold."""
    for position, turn in enumerate(new):
        if position >= len(base):
            return position
        if turn is not base[position] and turn != base[position]:
            return position
    return len(new)


def _write_turns(session_id: Any, version: int, oldest_first: list[dict[str, Any]], first: int, stored: int) -> int:
    """Write the turns from position ``first`` on; ``stored`` rows existed. Returns the bytes written."""
    written = 0
    if len(oldest_first) < stored:
        Turn.objects.filter(session_id=session_id, position__gte=len(oldest_first)).delete()
    inserts = []
    now = db_now()
    for position in range(first, len(oldest_first)):
        text = dump_json_text(oldest_first[position])
        written += len(text)
        tokens = _token_columns(oldest_first[position])
        if position < stored:
            # a rewritten row keeps the time it first came in (rows stored before 0012 had none)
            Turn.objects.filter(session_id=session_id, position=position).update(
                turn_json=text, version=version, recorded_at=Coalesce(F("recorded_at"), Value(now)), **tokens
            )
        else:
            inserts.append(
                Turn(
                    session_id=session_id, position=position, version=version, turn_json=text, recorded_at=now, **tokens
                )
            )
    if inserts:
        Turn.objects.bulk_create(inserts)
    return written


def _token_columns(turn: dict[str, Any]) -> dict[str, Any]:
    """The token columns of a turn row: the provider's usage of an ``LlmTurn`` (docs/sessions.md §1.11)."""
    usage = turn_token_usage(turn)
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "reports_usage": False}
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "reports_usage": True,
    }


def _header_json(document: dict[str, Any]) -> str:
    """The document without its turns, as JSON text; ``turns`` keeps its place among the keys."""
    return dump_json_text({key: (None if key == "turns" else value) for key, value in document.items()})


def _cached_copy(document: dict[str, Any], turns: list[dict[str, Any]]) -> dict[str, Any]:
    """What the cache keeps of a stored document: the caller's dict and list are its own to change."""
    if "turns" not in document:
        return {"turns": list(turns), **document}
    return {key: (list(turns) if key == "turns" else value) for key, value in document.items()}


def insert_session(document: dict[str, Any], **fields: Any) -> Session:
    """Store a new session at version 1 and emit ``session.created`` and ``session.updated``.

    Args:
        document: its session document.
        **fields: the other columns (id, agent_slug, owner, status or run fields, ...); the
            status (``ready`` when not given) must be one a new session may take
            (``sessions_app.transitions.TRANSITIONS``).
    Raises:
        StatusTransitionRefused: a status a new session may not start with.
    """
    transitions.check(fields.get("id"), None, fields.get("status", Session.Status.READY))
    now = db_now()
    turns = document.get("turns") or []
    header_json = _header_json(document)
    session = Session.objects.create(
        version=1, created_at=now, updated_at=now, header_json=header_json, turn_count=len(turns), **fields
    )
    written = _write_turns(session.pk, 1, turns[::-1], 0, 0)
    DOCUMENTS.put(session.pk, 1, _cached_copy(document, turns), len(header_json) + written)
    events.emit_session_created(session)
    events.emit_session_updated(session, turns[0] if turns else None)
    return session


def run_fields(mode: Session.RunMode) -> dict[str, Any]:
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
    """Whether ``session`` is running: a run is requested or going, or a helper session works for
    it (docs/decisions.md §21); either way the session is busy to its clients."""
    return session.status == Session.Status.RUNNING


def run_requested(session: Session) -> bool:
    """Whether a run of ``session`` is requested or going (a worker has it, or will claim it):
    running, and not only waiting on its helpers."""
    return session.status == Session.Status.RUNNING and session.run_id is not None


@overload
def lease_deadline(now: datetime) -> datetime: ...
@overload
def lease_deadline(now: Now) -> CombinedExpression: ...
def lease_deadline(now: datetime | Now) -> datetime | CombinedExpression:
    """When a lease taken or renewed at ``now`` expires (``AGENTS_LEASE_SECONDS``, default 30 s):
    a datetime for a datetime, an expression for ``Now()``
    (:func:`foundation.common.db_now_in_statement`)."""
    return now + timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
