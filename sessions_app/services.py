"""Every change to sessions and continuations goes through here (services write, selectors read).

Each service writes its change in one transaction and, for changes that start a run, enqueues
the run task on commit (spec/ARCHITECTURE.md "The flow of one run", step 1). Session rows are
written with a compare-and-store on ``version`` (spec/server-api.md §7).
"""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agents_app.registry import get_registry
from agentsite.api import require_unicode
from agentsite.errors import ApiError, bad_request, run_in_progress, unknown_agent, unknown_session, unknown_token
from sessions_app import background, events, hub, mailbox, selectors
from sessions_app import document as doc
from sessions_app.engine import NewChild, NewContinuation, apply_result
from sessions_app.models import Continuation, MailEnvelope, Session, dump_document
from sessions_app.runtime import runtime_agent
from sessions_app.selectors import meta_view
from sessions_app.serializers import is_base64

RUN_MODES = ("step", "until_blocked")


class VersionConflict(Exception):
    """A compare-and-store found another version than the one it read."""


def db_now() -> datetime:
    """The current time from the database's clock on PostgreSQL (shared by every process),
    from this process's clock on SQLite (one machine)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]
    return timezone.now()


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
    document_json = dump_document(document)
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


def _insert_session(document: dict[str, Any], **fields: Any) -> Session:
    """Store a new session at version 1 and emit ``session.created`` and ``session.updated``.

    Args:
        document: its session document.
        **fields: the other columns (id, agent_slug, owner, status or run fields, ...).
    """
    now = db_now()
    session = Session.objects.create(
        version=1, created_at=now, updated_at=now, document_json=dump_document(document), **fields
    )
    events.emit("session.created", session.pk, session.owner, **meta_view(session))
    events.emit_session_updated(session)
    return session


def _enqueue_run(session_id: uuid.UUID, run_id: uuid.UUID) -> None:
    from sessions_app.tasks import run_session_task

    transaction.on_commit(lambda: run_session_task.delay(str(session_id), str(run_id)))


def _run_fields(mode: str) -> dict[str, Any]:
    """Columns that request a run: ``status=running`` and a fresh ``run_id`` for the task to claim."""
    return {
        "status": Session.Status.RUNNING,
        "status_detail": None,
        "run_id": uuid.uuid4(),
        "run_mode": mode,
        "run_owner": None,
        "run_lease_until": None,
    }


def _lock(session_id: uuid.UUID) -> Session:
    try:
        return Session.objects.select_for_update().get(pk=session_id)
    except Session.DoesNotExist as exc:
        raise unknown_session(session_id) from exc


def run_is_active(session: Session) -> bool:
    """Whether a run is requested or going on ``session``."""
    return session.status == Session.Status.RUNNING


def session_create(
    *,
    agent_slug: str,
    prompt: str | None,
    media: list[dict[str, Any]] | None,
    run: str,
    parent_id: uuid.UUID | None = None,
    owner: str | None = None,
    sealed: bool = False,
    session_token_sha256: str | None = None,
) -> Session:
    """Create a session (``POST /v1/sessions``, spec/server-api.md §1.2 #8).

    Without a prompt and media the session is empty and ``ready``; with ``run="none"`` its first
    turn is stored and it stays ``ready``; otherwise a run is requested. A sub-session belongs to
    its root's owner (§5.2), whoever creates it; ``sealed`` and the session token's digest (§5.4)
    are the new session's own, never inherited.

    Raises:
        ApiError: 404 ``unknown_agent``; 404 ``unknown_session`` for a missing parent.
    """
    if get_registry().get(agent_slug) is None:
        # helpers run as children of their caller; sessions are created for root agents
        raise unknown_agent(agent_slug)
    agent = runtime_agent(agent_slug)
    with transaction.atomic():
        parent = None
        if parent_id is not None:
            parent = Session.objects.filter(pk=parent_id).first()
            if parent is None:
                raise unknown_session(parent_id)
        session_id = uuid.uuid4()
        document = doc.new_document(str(session_id))
        query = doc.make_query(prompt, media)
        if query is not None:
            document = doc.push_turn(document, doc.user_turn(agent.system_prompt, agent.system_tools(), query))
        fields: dict[str, Any] = {"status": Session.Status.READY}
        starts_run = query is not None and run != "none"
        if starts_run:
            fields = _run_fields(run)
        session = _insert_session(
            document,
            id=session_id,
            agent_slug=agent_slug,
            parent=parent,
            owner=parent.owner if parent is not None else owner,
            sealed=sealed,
            session_token_sha256=session_token_sha256,
            **fields,
        )
        if starts_run:
            _enqueue_run(session.pk, session.run_id)
    return session


def message_post(
    *,
    session_id: uuid.UUID,
    prompt: str | None,
    media: list[dict[str, Any]] | None,
    run: str,
    interrupt: bool = False,
    owner: str | None = None,
) -> Session:
    """Add a user message (``POST /v1/sessions/:id/messages``, §1.2 #12; DECISIONS 7).

    When the session can take a new user turn now (no run, and its head is a final answer, a
    user turn, or nothing), the message becomes that turn and a run starts (unless ``run`` is
    ``none``). Otherwise it is never refused: it is queued as mail, folded in at the next step
    boundary of the active run, or when the session can be asked again. ``interrupt`` posts it
    with interrupt priority, which detaches the calls a run is waiting on.

    Raises:
        ApiError: 404 ``unknown_session``; 400 ``bad_request`` for an empty message.
    """
    query = doc.make_query(prompt, media)
    if query is None:
        raise bad_request("a message needs a prompt or media")
    with transaction.atomic():
        session = _lock(session_id)
        agent = runtime_agent(session.agent_slug)
        document = session.document
        head = doc.head(document)
        takes_turn = (
            head is None
            or head["tag"] == "UserTurn"
            or (head["tag"] == "LlmTurn" and not doc.tool_calls_of(head["contents"]))
        )
        queue = run_is_active(session) or session.status == Session.Status.PAUSED or not takes_turn
        if queue or mailbox.unread(session, document):
            # mail keeps every message in order, behind anything already queued
            body = {"tag": "userMessage", "query": query}
            priority = "interrupt" if interrupt and run_is_active(session) else "normal"
            envelope, _ = _append_mail(session, body, priority=priority, sender={"tag": "user", "owner": owner})
            if not run_is_active(session):
                session = _after_mail(session, envelope)
            transaction.on_commit(hub.announce)
            return session
        document = doc.push_turn(document, doc.user_turn(agent.system_prompt, agent.system_tools(), query))
        if run == "none":
            return store(session, document, status=Session.Status.READY, status_detail=None)
        session = store(session, document, **_run_fields(run))
        _enqueue_run(session.pk, session.run_id)
    return session


def session_resume(*, session_id: uuid.UUID, mode: str, owner: str | None = None) -> Session:
    """Start a run on a stored session (``POST /v1/sessions/:id/resume``, §1.2 #13).

    A paused session resumes, even while the run that is pausing has not stopped yet (a Resume
    control then cancels the Pause it follows).

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress``.
    """
    with transaction.atomic():
        session = _lock(session_id)
        if run_is_active(session):
            pausing = any(
                mailbox.is_control(e) and e.body["message"]["tag"] == "pause"
                for e in mailbox.unread(session, session.document)
            )
            if not pausing:
                raise run_in_progress(session.pk)
            _append_mail(session, mailbox.RESUME, priority="normal", sender={"tag": "user", "owner": owner})
            transaction.on_commit(hub.announce)
            return session
        runtime_agent(session.agent_slug)
        session = store(session, session.document, **_run_fields(mode))
        _enqueue_run(session.pk, session.run_id)
    return session


def normalize_tool_result(result: Any) -> Any:
    """Check a continuation ``result`` (spec/DECISIONS.md 3) and return it in document form.

    A JSON string is a text result (stored as a bare string, as agents-exe writes text);
    otherwise ``{"type": "text"|"json"|"media"|"mixed", ...}``.

    Raises:
        ApiError: 400 ``bad_request`` naming what is wrong.
    """
    require_unicode(result, "result")
    if isinstance(result, str):
        return result
    if not isinstance(result, dict) or "type" not in result:
        raise bad_request('result must be a string or an object with "type" (text, json, media or mixed)')
    kind = result["type"]
    if kind == "text":
        if not isinstance(result.get("content"), str):
            raise bad_request('a "text" result needs a string "content"')
        return result["content"]
    if kind == "json":
        if "content" not in result:
            raise bad_request('a "json" result needs "content"')
        return {"type": "json", "content": result["content"]}
    if kind == "media":
        return _check_media(result, "result")
    if kind == "mixed":
        parts = result.get("parts")
        if not isinstance(parts, list):
            raise bad_request('a "mixed" result needs a list of "parts"')
        checked = []
        for index, part in enumerate(parts):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                checked.append({"type": "text", "text": part["text"]})
            elif isinstance(part, dict) and part.get("type") == "media":
                checked.append(_check_media(part, f"parts[{index}]"))
            else:
                raise bad_request(f'parts[{index}] must be {{"type": "text", "text"}} or a media part')
        return {"type": "mixed", "parts": checked}
    raise bad_request(f"unknown result type {kind!r}; expected text, json, media or mixed")


def _check_media(value: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(value.get("mimeType"), str) or not isinstance(value.get("base64Data"), str):
        raise bad_request(f'{where}: a media part needs string "mimeType" and "base64Data"')
    if not is_base64(value["base64Data"]):
        raise bad_request(f"{where}: base64Data is not valid base64")
    media = {"type": "media", "mimeType": value["mimeType"], "base64Data": value["base64Data"]}
    if isinstance(value.get("filename"), str):
        media["filename"] = value["filename"]
    return media


def continuation_complete(*, token: uuid.UUID, result: Any, resume: bool) -> Session:
    """Complete a deferred call (``POST /v1/continuations/:token``, §1.2 #25).

    With a run active the result is recorded and the run applies it before its next step.
    Otherwise it is written into the session at once and, when ``resume`` is true and no other
    deferred call of that turn is left, a run is requested.

    Raises:
        ApiError: 404 ``unknown_token``; 409 ``token_already_completed``; 400 ``bad_request``.
    """
    response = normalize_tool_result(result)
    with transaction.atomic():
        continuation = Continuation.objects.select_for_update().filter(pk=token).first()
        if continuation is None:
            raise unknown_token(token)
        if continuation.completed_at is not None:
            raise ApiError(409, "token_already_completed", f"continuation {token} was already completed")
        session = _lock(continuation.session_id)
        now = db_now()
        continuation.result = response
        continuation.completed_at = now
        if run_is_active(session):
            continuation.save(update_fields=["result", "completed_at"])
            return session
        continuation.applied_at = now
        continuation.save(update_fields=["result", "completed_at", "applied_at"])
        updated = apply_result(session.document, str(token), response)
        if updated is None:
            # the call is no longer at the head (e.g. the session was forked past it): keep the
            # result on the continuation only
            return session
        if resume and doc.status_of(updated) == Session.Status.READY:
            session = store(session, updated, **_run_fields("until_blocked"))
            _enqueue_run(session.pk, session.run_id)
        else:
            session = store(session, updated, status=doc.status_of(updated), status_detail=None)
    return session


def apply_completed_continuations(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], list[uuid.UUID]]:
    """Fold results posted during a run into ``document`` (the run calls this before each step).

    Returns:
        The new document and the tokens applied (to mark with the step's store).
    """
    pending = Continuation.objects.filter(session=session, completed_at__isnull=False, applied_at__isnull=True)
    applied = []
    for continuation in pending.order_by("completed_at"):
        updated = apply_result(document, str(continuation.token), continuation.result)
        if updated is not None:
            document = updated
        applied.append(continuation.token)
    return document, applied


def create_continuations(session: Session, new: list[NewContinuation]) -> None:
    """Create the Continuation rows of newly deferred calls (inside the step's transaction)."""
    now = db_now()
    Continuation.objects.bulk_create(
        [
            Continuation(
                token=uuid.UUID(item.token),
                session=session,
                tool_call_id=item.tool_call_id,
                provider_call_id=str(item.call.get("id") or ""),
                call=item.call,
                disposition=item.disposition,
                created_at=now,
            )
            for item in new
        ]
    )


def mark_applied(tokens: list[uuid.UUID]) -> None:
    """Record that these continuations' results are now in the session document."""
    if tokens:
        Continuation.objects.filter(pk__in=tokens).update(applied_at=db_now())


def lease_deadline(now: datetime) -> datetime:
    """When a lease taken or renewed at ``now`` expires (``AGENTS_LEASE_SECONDS``, default 30 s)."""
    return now + timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])


def recover_stale_runs(*, all_claimed: bool) -> tuple[list[str], list[str]]:
    """Free sessions whose run died with its worker, and resend runs nobody claimed.

    A claimed run whose lease has expired (or every claimed run, with ``all_claimed``: at the
    start of the embedded server no other process can hold one) is stored as a restart would
    store it: the interrupted step is lost, the status is the one its turns imply, and nothing
    resumes on its own (spec/server-api.md §9.2). A run requested more than a lease ago and still
    unclaimed (its task was lost with a broker or a process) is enqueued again; the claim makes a
    duplicate harmless.

    Returns:
        ``(recovered_ids, resent_ids)``.
    """
    now = db_now()
    claimed = Session.objects.filter(status=Session.Status.RUNNING, run_owner__isnull=False)
    if not all_claimed:
        claimed = claimed.filter(run_lease_until__lt=now)
    recovered = []
    for session_id in claimed.values_list("pk", flat=True):
        with transaction.atomic():
            session = _lock(session_id)
            if session.status != Session.Status.RUNNING or session.run_owner is None:
                continue
            if not all_claimed and session.run_lease_until is not None and session.run_lease_until >= now:
                continue
            document = session.document
            status = doc.status_of(document)
            session = store(
                session,
                document,
                status=status,
                status_detail=None,
                run_id=None,
                run_mode=None,
                run_owner=None,
                run_lease_until=None,
            )
            events.emit("run.stopped", session.pk, session.owner, status=status)
        recovered.append(str(session_id))
    cutoff = now - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
    unclaimed = Session.objects.filter(status=Session.Status.RUNNING, run_owner__isnull=True)
    if not all_claimed:
        unclaimed = unclaimed.filter(updated_at__lt=cutoff)
    resent = []
    for session_id, run_id in unclaimed.values_list("pk", "run_id"):
        if run_id is not None:
            with transaction.atomic():
                _enqueue_run(session_id, run_id)
            resent.append(str(session_id))
    return recovered, resent


# --- mail and control (spec/sessions.md §4, spec/server-api.md §12) -----------------------------


def _append_mail(
    session: Session,
    body: dict[str, Any],
    *,
    priority: str,
    sender: dict[str, Any],
    mail_id: uuid.UUID | None = None,
    hops: int = 0,
) -> tuple[MailEnvelope, bool]:
    """Store one envelope on a locked session; ``(envelope, duplicate)``."""
    if mail_id is not None:
        existing = MailEnvelope.objects.filter(session=session, mail_id=mail_id).first()
        if existing is not None:
            return existing, True
    last = MailEnvelope.objects.filter(session=session).order_by("-seq").values_list("seq", flat=True).first() or 0
    envelope = MailEnvelope.objects.create(
        session=session,
        seq=last + 1,
        mail_id=mail_id or mailbox.new_mail_id(),
        sender=sender,
        priority=priority,
        hops=hops,
        body=body,
        sent_at=db_now(),
    )
    return envelope, False


def _wake_on(session: Session) -> list[str]:
    spec = runtime_agent(session.agent_slug).loaded.spec
    return spec.wakeOn if spec.wakeOn is not None else mailbox.DEFAULT_WAKE_ON


def _after_mail(session: Session, envelope: MailEnvelope) -> Session:
    """What mail does to a session with no run: controls take effect, messages may wake it."""
    document = session.document
    if mailbox.is_control(envelope):
        message = envelope.body["message"]["tag"]
        document["controlCursor"] = envelope.seq
        document.setdefault("mailCursor", 0)
        status = session.status
        if message == "pause":
            status = Session.Status.PAUSED
        elif message == "resume" and session.status == Session.Status.PAUSED:
            status = doc.status_of(document)
        if message in ("cancelCalls", "cancelAllAttached"):
            ids = envelope.body["message"].get("toolCallIds")
            background.cancel_calls(session, ids)
        session = store(session, document, status=status)
        if message == "resume" and status != Session.Status.PAUSED and _runnable(session):
            session = _request_run(session, "until_blocked")
        return session
    kind = mailbox.sender_kind(envelope.sender, session)
    if kind not in _wake_on(session):
        return session
    spec = runtime_agent(session.agent_slug).loaded.spec
    wakes = session.status in (Session.Status.IDLE, Session.Status.READY, Session.Status.FAILED) or (
        session.status == Session.Status.PAUSED and spec.resumeOnAnyMail
    )
    # a session with tool calls still to run wakes too: the run runs them, then folds the mail
    if wakes and (mailbox.can_fold(document) or doc.status_of(document) == Session.Status.READY):
        session = _request_run(session, "until_blocked")
    return session


def _runnable(session: Session) -> bool:
    document = session.document
    if session.status == Session.Status.READY and doc.head(document) is not None:
        return True
    return mailbox.can_fold(document) and any(not mailbox.is_control(e) for e in mailbox.unread(session, document))


def _request_run(session: Session, mode: str) -> Session:
    session = store(session, session.document, **_run_fields(mode))
    _enqueue_run(session.pk, session.run_id)
    return session


def mail_send(
    *,
    session_id: uuid.UUID,
    body: dict[str, Any],
    priority: str = "normal",
    sender: dict[str, Any],
    mail_id: uuid.UUID | None = None,
    hops: int = 0,
) -> dict[str, Any]:
    """Accept mail for a session (``POST /v1/sessions/:id/mail``); never refused for its status.

    With a run going, the run takes the mail at its next step (controls at once). Without one,
    a control takes effect now, and a message wakes the session when its sender's kind is in the
    agent's ``wakeOn`` (a paused session only with ``resumeOnAnyMail``).

    Returns:
        The Receipt ``{"id", "seq", "duplicate"}``.
    Raises:
        ApiError: 404 ``unknown_session``.
    """
    with transaction.atomic():
        session = _lock(session_id)
        envelope, duplicate = _append_mail(session, body, priority=priority, sender=sender, mail_id=mail_id, hops=hops)
        if not duplicate and not run_is_active(session):
            _after_mail(session, envelope)
        transaction.on_commit(hub.announce)
    return {"id": str(envelope.mail_id), "seq": envelope.seq, "duplicate": duplicate}


def session_pause(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/pause``: post Pause control mail; return the session."""
    mail_send(session_id=session_id, body=mailbox.PAUSE, sender={"tag": "user", "owner": owner})
    return Session.objects.get(pk=session_id)


def session_cancel(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/cancel``: stop the active run and its background calls.

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``no_active_run``.
    """
    with transaction.atomic():
        session = _lock(session_id)
        if not run_is_active(session):
            if _has_active_descendants(session):
                # the session waits on helper sessions that are running: cancelling it stops them
                stop_children(session)
                transaction.on_commit(hub.announce)
                return session
            raise ApiError(409, "no_active_run", f"session {session_id} has no active run")
        _append_mail(session, mailbox.STOP_RUN, priority="interrupt", sender={"tag": "user", "owner": owner})
        background.cancel_calls(session, None)
        stop_children(session)
        transaction.on_commit(hub.announce)
    return session


def session_cancel_attached(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/cancel-attached``: hard-cancel the attached calls, keep the run."""
    mail_send(session_id=session_id, body=mailbox.CANCEL_ALL_ATTACHED, sender={"tag": "user", "owner": owner})
    return Session.objects.get(pk=session_id)


# --- fork and delete (spec/server-api.md §1.2 #11 and #20, DECISIONS 12) --------------------------


def session_fork(*, session_id: uuid.UUID, at_turn: int | None, agent_slug: str | None) -> Session:
    """Copy a session into a new one that starts no run (``POST /v1/sessions/:id/fork``).

    ``at_turn`` indexes ``turns`` newest first; the fork keeps that turn and every older one
    (DECISIONS 12). Deferred and background calls are not copied: a kept head that still waits on
    calls is closed as a cancelled run closes it. The fork keeps the source's parent link and
    non-secret params, not its seal, token or mail.

    Raises:
        ApiError: 404 ``unknown_session``, ``unknown_turn``, ``unknown_agent``.
    """
    source = selectors.session_get(session_id)
    slug = agent_slug or source.agent_slug
    runtime_agent(slug)
    document = source.document
    turns = document.get("turns") or []
    index = 0 if at_turn is None else at_turn
    if at_turn is not None and not 0 <= at_turn < len(turns):
        raise ApiError(404, "unknown_turn", f"session {session_id} has no turn {at_turn} (it has {len(turns)})")
    kept = copy.deepcopy(turns[index:])
    if kept and kept[0]["tag"] == "PartialUserTurn":
        head = doc.current_partial(kept[0])
        for tc in doc.tracked_calls(head):
            if tc["tcState"] not in doc.FINAL_STATES:
                tc["tcState"], tc["tcResult"] = "Failed", background.CANCELLED_TEXT
        kept[0] = doc.close_partial(head)
    new_id = uuid.uuid4()
    forked = doc.new_document(str(new_id))
    forked["turns"] = kept
    forked["forkedFromSessionId"] = str(source.pk)
    with transaction.atomic():
        session = _insert_session(
            forked,
            id=new_id,
            agent_slug=slug,
            parent_id=source.parent_id,
            owner=source.owner,
            status=doc.status_of(forked),
            forked_from=source.pk,
            params=dict(source.params or {}),
        )
    return session


def deletion_plan(session_id: uuid.UUID) -> tuple[list[Session], int]:
    """The sessions a delete removes (deepest first) and their continuation count.

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress`` when a run is active anywhere
            in the tree or in an ancestor.
    """
    root = selectors.session_get(session_id)
    ancestor = root.parent
    while ancestor is not None:
        if run_is_active(ancestor):
            raise run_in_progress(ancestor.pk)
        ancestor = ancestor.parent
    levels = [[root]]
    while levels[-1]:
        levels.append(list(Session.objects.filter(parent__in=levels[-1])))
    tree = [s for level in reversed(levels) for s in level]
    for session in tree:
        if run_is_active(session):
            raise run_in_progress(session.pk)
    continuations = Continuation.objects.filter(session__in=tree).count()
    return tree, continuations


def session_delete(*, session_id: uuid.UUID, dry_run: bool) -> dict[str, Any]:
    """Delete a session and its descendants, leaves first (``DELETE /v1/sessions/:id``).

    Returns:
        The DeletionPlan ``{"sessions": [ids deepest first], "continuations": n, "dry_run": b}``.
    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress`` (also on a dry run).
    """
    with transaction.atomic():
        tree, continuations = deletion_plan(session_id)
        if not dry_run:
            for session in tree:
                Session.objects.filter(pk=session.pk).delete()
                events.emit("session.deleted", session.pk, session.owner)
    return {"sessions": [str(s.pk) for s in tree], "continuations": continuations, "dry_run": dry_run}


# --- helper agents as child sessions (spec/server-api.md §4.5 subcall.*, DECISIONS 13) -------------


def child_create(parent: Session, child: NewChild, call: dict[str, Any]) -> Session:
    """Create and start the child session answering a helper call (inside the step's transaction).

    The child belongs to the owner of the parent's root and is listed under ``?parent=``.
    """
    agent = runtime_agent(child.agent_slug)
    document = doc.new_document(str(child.session_id))
    document = doc.push_turn(document, doc.user_turn(agent.system_prompt, agent.system_tools(), child.prompt))
    session = _insert_session(
        document,
        id=child.session_id,
        agent_slug=child.agent_slug,
        parent=parent,
        owner=parent.owner,
        **_run_fields("until_blocked"),
    )
    events.emit(
        "subcall.started",
        parent.pk,
        parent.owner,
        child_session_id=str(session.pk),
        slug=child.agent_slug,
        depth=child.depth,
        tool_call_id=str(call.get("id") or ""),
    )
    _enqueue_run(session.pk, session.run_id)
    return session


def deliver_to_parent(child_id: uuid.UUID, *, cancelled: bool = False) -> None:
    """Give a stopped child's outcome to the parent call waiting on it.

    An ``idle`` child answers with its final text; a ``failed`` or cancelled one with an error; a
    child that stopped for another reason (waiting on its own deferred calls, paused) leaves the
    parent waiting. The parent resumes as it would after a continuation.
    """
    child = Session.objects.filter(pk=child_id).select_related("parent").first()
    if child is None or child.parent is None:
        return
    if not cancelled and child.status not in (Session.Status.IDLE, Session.Status.FAILED):
        return
    parent = child.parent
    head = doc.head(parent.document)
    if head is None or head["tag"] != "PartialUserTurn":
        return
    waiting = [
        tc
        for tc in doc.tracked_calls(head)
        if tc.get("tcChild") == str(child.pk) and tc["tcState"] == "Deferred"
    ]
    if not waiting:
        return
    if cancelled:
        result = f"Error: the helper agent {child.agent_slug} was cancelled"
        events.emit("subcall.failed", parent.pk, parent.owner, child_session_id=str(child.pk), message="cancelled")
    elif child.status == Session.Status.IDLE:
        child_head = doc.head(child.document)
        answer = doc.response_text(child_head["contents"]) if child_head and child_head["tag"] == "LlmTurn" else ""
        result: Any = answer
        events.emit("subcall.completed", parent.pk, parent.owner, child_session_id=str(child.pk), result=answer)
    else:
        result = f"Error: the helper agent {child.agent_slug} failed: {child.status_detail}"
        events.emit(
            "subcall.failed", parent.pk, parent.owner, child_session_id=str(child.pk), message=child.status_detail
        )
    try:
        continuation_complete(token=uuid.UUID(waiting[0]["tcContinuation"]), result=result, resume=True)
    except ApiError:
        # already answered (e.g. the parent was cancelled meanwhile): nothing left to deliver
        return


def _has_active_descendants(session: Session) -> bool:
    level = list(Session.objects.filter(parent=session))
    while level:
        if any(run_is_active(child) for child in level):
            return True
        level = list(Session.objects.filter(parent__in=level))
    return False


def stop_children(session: Session) -> None:
    """Ask the active runs of a session's descendants to stop (cancelling a parent cancels its children)."""
    level = list(Session.objects.filter(parent=session))
    while level:
        for child in level:
            if run_is_active(child):
                _append_mail(
                    child, mailbox.STOP_RUN, priority="interrupt", sender={"tag": "system", "source": "cancel"}
                )
                background.cancel_calls(child, None)
        level = list(Session.objects.filter(parent__in=level))
