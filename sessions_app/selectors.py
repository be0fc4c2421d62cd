"""Reads of sessions: lookups, listings and the JSON views of docs/api.md §5."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from foundation.auth import Principal
from foundation.common import db_now
from foundation.errors import BadRequest, UnknownSession, UnknownToken
from sessions_app import hub, mailbox
from sessions_app.access import can_see
from sessions_app.models import BackgroundCall, Continuation, MailEnvelope, PeriodicLease, Session, Turn

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
    search: str | None = None,
) -> tuple[list[Session], datetime | None]:
    """A page of sessions, newest ``updated_at`` first (docs/api.md §7.2).

    Top-level sessions only, unless ``parent`` asks for that session's children. With ``owner``
    (authentication on), only that owner's top-level sessions (docs/api.md §10.3); the children of
    a parent the caller may see are all of its owner's. With ``search`` (checked by
    :func:`search_text`), only the sessions whose conversation contains it
    (:func:`conversation_contains`).

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
    query = query.order_by("-updated_at", "-id")
    rows = sessions_saying(query, search, limit) if search else list(query[:limit])
    next_before = rows[-1].updated_at if len(rows) == limit else None
    return rows, next_before


#: The longest ``q`` of ``GET /v1/sessions``, in characters (docs/api.md §7.2).
SEARCH_MAX_CHARS = 200

#: Keys whose string values are not words of the conversation: turn kinds, call states, media bytes.
_NOT_SAID = frozenset({"tag", "tcState", "tcId", "tcContinuation", "base64Data", "mimeType", "id", "type"})

#: How many words of a session's first message make its title, and at most how many characters.
TITLE_WORDS = 8
TITLE_MAX_CHARS = 80


def search_text(raw: str) -> str:
    """The ``q`` of ``GET /v1/sessions``, trimmed (docs/api.md §7.2).

    Raises:
        BadRequest: 400 ``bad_request`` for a value of only spaces, longer than
            :data:`SEARCH_MAX_CHARS`, or holding a control character.
    """
    text = raw.strip()
    if not text or len(text) > SEARCH_MAX_CHARS or any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise BadRequest(f"q must be 1 to {SEARCH_MAX_CHARS} characters of text, without control characters")
    return text


def _said(turn: dict[str, Any]) -> list[str]:
    """The conversation's words in one stored turn: what the person and other mail said, the
    model's answer and its calls' arguments, and the tools' results; never the system prompt or
    the tool descriptions every turn repeats."""
    contents = turn.get("contents") or {}
    parts: list[Any] = [contents.get("userQuery"), (contents.get("llmResponse") or {}).get("responseText")]
    parts += [envelope.get("body") for envelope in contents.get("userMail") or [] if isinstance(envelope, dict)]
    parts += [((call or {}).get("function") or {}).get("arguments") for call in contents.get("llmToolCalls") or []]
    parts += [pair[1] for pair in contents.get("userToolResponses") or [] if isinstance(pair, list) and len(pair) == 2]
    parts += [tracked.get("tcResult") for tracked in contents.get("trackedCalls") or [] if isinstance(tracked, dict)]
    texts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                if key not in _NOT_SAID:
                    walk(item)

    walk(parts)
    return texts


def conversation_contains(turn_texts: list[str], needle: str) -> bool:
    """Whether any of a session's stored turns (JSON texts) says ``needle``, compared casefolded."""
    folded = needle.casefold()
    return any(folded in said.casefold() for text in turn_texts for said in _said(json.loads(text)))


def _prefilter(needle: str) -> str | None:
    """A piece of ``needle`` that the stored JSON text of a matching turn holds, for the database
    to compare case-insensitively: its longest run of ASCII letters and digits (JSON text escapes
    every other character, so an escaped form would compare case-sensitively); ``None`` when it
    has none, and every session is read."""
    runs = re.findall(r"[A-Za-z0-9]+", needle)
    return max(runs, key=len) if runs else None


def sessions_saying(query: Any, search: str, limit: int) -> list[Session]:
    """The first ``limit`` sessions of the ordered ``query`` whose conversation contains
    ``search`` (docs/api.md §7.2).

    The database keeps the sessions with a turn whose JSON text holds a piece of the word
    (:func:`_prefilter`); their turns are then read a chunk of sessions at a time, one query a
    chunk, and the conversation's own words are compared (a key or the system prompt does not
    count).
    """
    piece = _prefilter(search)
    if piece is not None:
        query = query.filter(turn_rows__turn_json__icontains=piece).distinct()
    chunk = max(limit, 100)
    rows: list[Session] = []
    offset = 0
    while len(rows) < limit:
        batch = list(query[offset : offset + chunk])
        if not batch:
            break
        offset += chunk
        turns = Turn.objects.filter(session_id__in=[session.pk for session in batch])
        if piece is not None:
            turns = turns.filter(turn_json__icontains=piece)
        texts: dict[uuid.UUID, list[str]] = {}
        for session_id, text in turns.values_list("session_id", "turn_json"):
            texts.setdefault(session_id, []).append(text)
        rows += [session for session in batch if conversation_contains(texts.get(session.pk, []), search)]
    return rows[:limit]


def _first_words(turn: dict[str, Any]) -> str | None:
    """The title of a conversation whose oldest turn is ``turn``: the first words of what the
    person said in it, or ``None`` when it holds no text."""
    contents = turn.get("contents") or {}
    mail = [envelope for envelope in contents.get("userMail") or [] if isinstance(envelope, dict)]
    # a turn that folded mail renders it into userQuery behind a "[mail ID from ...]" line: the
    # mail's own words come first, so that the title is what the person wrote
    queries = [(envelope.get("body") or {}).get("query") for envelope in mail]
    queries.append(contents.get("userQuery"))
    for query in queries:
        text = query.get("text") if isinstance(query, dict) else query
        words = text.split() if isinstance(text, str) else []
        if words:
            whole = " ".join(words)
            title = " ".join(words[:TITLE_WORDS])[: TITLE_MAX_CHARS - 1].rstrip()
            return title if title == whole else f"{title}…"
    return None


def session_titles(sessions: list[Session]) -> dict[uuid.UUID, str | None]:
    """Each session's title, the first words of its conversation (docs/api.md §7.2), by id:
    one query for the oldest turns of them all."""
    titles: dict[uuid.UUID, str | None] = dict.fromkeys((session.pk for session in sessions), None)
    oldest = Turn.objects.filter(session_id__in=list(titles), position=0).values_list("session_id", "turn_json")
    for session_id, text in oldest:
        titles[session_id] = _first_words(json.loads(text))
    return titles


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
