"""Mail and control (docs/sessions.md §6): what posting mail does to a session."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from agentfiles import document as doc
from agents_app.runtime import runtime_agent
from foundation.common import db_now
from foundation.errors import AgentFailedToLoad, MailboxFull, UnknownAgent
from sessions_app import hub, mailbox
from sessions_app.background import cancel_calls
from sessions_app.dispatch import enqueue_run
from sessions_app.models import MailEnvelope, Session
from sessions_app.store import lock_session, run_fields, run_is_active, store

#: Mail never refused for a full mailbox (docs/sessions.md §6.8): it carries no new work.
UNBOUNDED_TAGS = frozenset({"control", "toolCallFinished"})
#: ``mailboxMaxUnread`` for a session whose agent is not loaded.
DEFAULT_MAILBOX_MAX_UNREAD = 256


def append_mail(
    session: Session,
    body: dict[str, Any],
    *,
    priority: str,
    sender: dict[str, Any],
    mail_id: uuid.UUID | None = None,
    hops: int = 0,
) -> tuple[MailEnvelope, bool]:
    """Store one envelope on a locked session; ``(envelope, duplicate)``.

    The envelope's ``seq`` is the session's ``last_mail_seq`` plus one, and the session's
    ``last_mail_seq`` becomes it (in the caller's transaction, under the session's row lock).

    Raises:
        ApiError: 429 ``mailbox_full`` for a message beyond the agent's ``mailboxMaxUnread``
            (controls and tool-call results are always taken).
    """
    if mail_id is not None:
        existing = MailEnvelope.objects.filter(session=session, mail_id=mail_id).first()
        if existing is not None:
            return existing, True
    if body.get("tag") not in UNBOUNDED_TAGS:
        _refuse_when_full(session)
    seq = Session.objects.filter(pk=session.pk).values_list("last_mail_seq", flat=True).get() + 1
    Session.objects.filter(pk=session.pk).update(last_mail_seq=seq)
    session.last_mail_seq = seq
    envelope = MailEnvelope.objects.create(
        session=session,
        seq=seq,
        mail_id=mail_id or mailbox.new_mail_id(),
        sender=sender,
        priority=priority,
        hops=hops,
        body=body,
        sent_at=db_now(),
    )
    hub.announce_on_commit(session.pk)
    return envelope, False


def _refuse_when_full(session: Session) -> None:
    limit = _agent_spec_value(session, "mailboxMaxUnread", DEFAULT_MAILBOX_MAX_UNREAD)
    cursor = int(session.document.get("mailCursor") or 0)
    waiting = MailEnvelope.objects.filter(session=session, seq__gt=cursor)
    # most mail is messages: count the rows first, and read bodies only near the limit
    if waiting.count() < limit:
        return
    unread = sum(1 for body in waiting.values_list("body", flat=True) if body.get("tag") not in UNBOUNDED_TAGS)
    if unread >= limit:
        raise MailboxFull(session.pk, limit)


def _agent_spec_value(session: Session, name: str, default: Any) -> Any:
    try:
        return getattr(runtime_agent(session.agent_slug).loaded.spec, name)
    except (UnknownAgent, AgentFailedToLoad):
        # the agent is no longer loaded (or no longer loads): its mail is still accepted, under the default
        return default


def wake_on(session: Session) -> list[str]:
    spec = runtime_agent(session.agent_slug).loaded.spec
    return spec.wakeOn if spec.wakeOn is not None else mailbox.DEFAULT_WAKE_ON


def after_mail(session: Session, envelope: MailEnvelope) -> Session:
    """What mail does to a session with no run: controls take effect, messages may wake it."""
    document = session.document
    if mailbox.is_control(envelope):
        message = mailbox.control_of(envelope)
        document["controlCursor"] = envelope.seq
        document.setdefault("mailCursor", 0)
        status = session.status
        if message == mailbox.Control.PAUSE:
            status = Session.Status.PAUSED
        elif message == mailbox.Control.RESUME and session.status == Session.Status.PAUSED:
            status = doc.status_of(document)
        if message in (mailbox.Control.CANCEL_CALLS, mailbox.Control.CANCEL_ALL_ATTACHED):
            ids = envelope.body["message"].get("toolCallIds")
            cancel_calls(session, ids)
        session = store(session, document, status=status)
        if message == mailbox.Control.RESUME and status != Session.Status.PAUSED and runnable(session):
            session = request_run(session, Session.RunMode.UNTIL_BLOCKED)
        return session
    if message_wakes(session, envelope.sender):
        session = request_run(session, Session.RunMode.UNTIL_BLOCKED)
    return session


def message_wakes(session: Session, sender: dict[str, Any]) -> bool:
    """Whether a message from ``sender`` starts a run on ``session``, which has none (docs/sessions.md §6.5)."""
    if mailbox.sender_kind(sender, session) not in wake_on(session):
        return False
    spec = runtime_agent(session.agent_slug).loaded.spec
    wakes = session.status in (Session.Status.IDLE, Session.Status.READY, Session.Status.FAILED) or (
        session.status == Session.Status.PAUSED and spec.resumeOnAnyMail
    )
    # a session with tool calls still to run wakes too: the run runs them, then folds the mail
    document = session.document
    return wakes and (mailbox.can_fold(document) or doc.status_of(document) == Session.Status.READY)


def runnable(session: Session) -> bool:
    document = session.document
    if session.status == Session.Status.READY and doc.head(document) is not None:
        return True
    return mailbox.can_fold(document) and any(not mailbox.is_control(e) for e in mailbox.unread(session, document))


def request_run(session: Session, mode: Session.RunMode) -> Session:
    session = store(session, session.document, **run_fields(mode))
    enqueue_run(session.pk, session.run_id)
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
        ApiError: 404 ``unknown_session``; 429 ``mailbox_full`` (:func:`append_mail`).
    """
    with transaction.atomic():
        session = lock_session(session_id)
        envelope, duplicate = append_mail(session, body, priority=priority, sender=sender, mail_id=mail_id, hops=hops)
        if not duplicate and not run_is_active(session):
            after_mail(session, envelope)
    return {"id": str(envelope.mail_id), "seq": envelope.seq, "duplicate": duplicate}
