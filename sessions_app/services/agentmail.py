"""Mail between sessions (docs/guide-sessions.md §3; docs/sessions.md §6.8).

What the System toolbox's ``send-message``, ``spawn-session``, ``watch-session`` and
``unwatch-session`` do, and what a spawned child's answer and a watched event become: mail from
one session to another, checked against the sending agent's ``mailScope`` / ``interruptScope``,
its ``maxMailHops`` and the recipient's ``mailboxMaxUnread``. Refusals raise
``tools_app.ports.SendRefused`` with the code the model sees.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction

from agentfiles import document as doc
from agents_app.runtime import runtime_agent
from foundation.common import db_now
from foundation.errors import ApiError
from sessions_app.dispatch import enqueue_run
from sessions_app.events import forget_watched_sessions
from sessions_app.models import Event, Session, SessionWatch
from sessions_app.services.mail import mail_send
from sessions_app.store import insert_session, run_fields
from tools_app.ports import SendRefused

log = logging.getLogger("sessions.agentmail")

#: The most live watches one session may hold.
MAX_WATCHES_PER_SESSION = 16
#: The longest a watch may last (seconds).
MAX_WATCH_TTL = 24 * 3600.0
#: How far up and down the session tree scopes are walked.
MAX_TREE_DEPTH = 64

UNKNOWN_RECIPIENT, NOT_PERMITTED, TOO_MANY_HOPS = "unknown_recipient", "not_permitted", "too_many_hops"
#: The sender of forwarded events.
WATCH_SENDER = {"tag": "system", "source": "watch"}


def _session_of(session_id: str, owner: str | None) -> Session:
    """The session ``session_id`` of ``owner``.

    Raises:
        SendRefused: ``unknown_recipient`` for a malformed id, a missing session or another
            owner's (the same answer, so ids of other owners cannot be probed).
    """
    try:
        key = uuid.UUID(str(session_id))
    except ValueError:
        raise SendRefused(UNKNOWN_RECIPIENT, f"no session {session_id!r}") from None
    found = Session.objects.filter(pk=key, owner=owner).first()
    if found is None:
        raise SendRefused(UNKNOWN_RECIPIENT, f"no session {session_id!r}")
    return found


def _ancestors(session: Session) -> set[uuid.UUID]:
    found: set[uuid.UUID] = set()
    current = session.parent_id
    while current is not None and current not in found and len(found) < MAX_TREE_DEPTH:
        found.add(current)
        current = Session.objects.filter(pk=current).values_list("parent_id", flat=True).first()
    return found


def _descendants(session: Session) -> set[uuid.UUID]:
    found: set[uuid.UUID] = set()
    level = {session.pk}
    for _ in range(MAX_TREE_DEPTH):
        level = set(Session.objects.filter(parent_id__in=level).values_list("pk", flat=True)) - found
        if not level:
            break
        found |= level
    return found


def in_scope(sender: Session, recipient: Session, scope: str) -> bool:
    """Whether ``scope`` (``own``, ``children``, ``subtree``, ``all``) lets ``sender`` reach
    ``recipient``; both belong to one owner (docs/decisions.md, "Agent-to-agent mail")."""
    if recipient.pk == sender.pk:
        return True
    if scope == "all":
        return True
    if scope == "own":
        return False
    if recipient.pk in _descendants(sender):
        return True
    return scope == "subtree" and recipient.pk in _ancestors(sender)


#: Senders whose mail counts in the hops of the mail it leads to: other sessions, and watches (a
#: watched event that wakes a session whose events are watched in turn is a chain too).
_HOP_SENDERS = ({"tag": "session"}, WATCH_SENDER)


def _counts_as_hop(sender: dict[str, Any]) -> bool:
    return any(all(sender.get(key) == value for key, value in kind.items()) for kind in _HOP_SENDERS)


def _answered_hops(sender: Session, in_reply_to: str | None) -> int:
    """The hops of mail from ``sender``: one more than the session or watch mail it answers (the
    envelope ``in_reply_to``, else the mail its model last read), 0 when it answers none."""
    answered: list[dict[str, Any]] = []
    if in_reply_to is not None:
        try:
            key = uuid.UUID(in_reply_to)
        except ValueError:
            key = None
        envelope = sender.mail.filter(mail_id=key).first() if key is not None else None
        if envelope is not None:
            answered = [{"from": envelope.sender, "hops": envelope.hops}]
    if not answered:
        answered = _mail_last_read(sender.document)
    hops = [int(m.get("hops") or 0) for m in answered if _counts_as_hop(m.get("from") or {})]
    return max(hops) + 1 if hops else 0


def _mail_last_read(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The envelopes folded into the user turn the model last answered."""
    answered = False
    for turn in document.get("turns") or []:
        if turn.get("tag") == "LlmTurn":
            answered = True
        elif answered and turn.get("tag") in ("UserTurn", "PartialUserTurn"):
            return list((turn.get("contents") or {}).get("userMail") or [])
    return []


def _spec_of(session_id: uuid.UUID) -> Any:
    slug = Session.objects.filter(pk=session_id).values_list("agent_slug", flat=True).get()
    return runtime_agent(slug).loaded.spec


def _sender(session: Session) -> dict[str, Any]:
    return {"tag": "session", "sessionId": str(session.pk), "agent": session.agent_slug}


def _deliver(
    recipient: Session, body: dict[str, Any], *, sender: dict[str, Any], priority: str, hops: int
) -> dict[str, Any]:
    try:
        return mail_send(session_id=recipient.pk, body=body, priority=priority, sender=sender, hops=hops)
    except ApiError as error:
        if error.code == "mailbox_full":
            raise SendRefused("mailbox_full", error.message) from None
        raise SendRefused(UNKNOWN_RECIPIENT, error.message) from None


def message_send(
    *, sender_id: str, to: str, text: str, in_reply_to: str | None, expects_reply: bool, interrupt: bool
) -> dict[str, Any]:
    """Mail ``text`` from session ``sender_id`` to session ``to`` (``send-message``).

    The sending agent's ``mailScope`` decides whom it may mail and ``interruptScope`` whom it may
    interrupt; the hops are one more than those of the session mail it answers, refused past its
    ``maxMailHops``; the recipient's ``mailboxMaxUnread`` bounds its unread mail.

    Returns:
        ``{"id", "seq", "duplicate", "hops", "recipient_status"}``.
    Raises:
        SendRefused: ``unknown_recipient``, ``not_permitted``, ``too_many_hops``, ``mailbox_full``.
    """
    sender = Session.objects.get(pk=sender_id)
    spec = runtime_agent(sender.agent_slug).loaded.spec
    recipient = _session_of(to, sender.owner)
    if not in_scope(sender, recipient, spec.mailScope):
        raise SendRefused(NOT_PERMITTED, f"session {to} is outside this agent's mailScope ({spec.mailScope})")
    if interrupt and not in_scope(sender, recipient, spec.interruptScope):
        raise SendRefused(NOT_PERMITTED, f"session {to} is outside this agent's interruptScope ({spec.interruptScope})")
    hops = _answered_hops(sender, in_reply_to)
    if hops > spec.maxMailHops:
        raise SendRefused(TOO_MANY_HOPS, f"this reply would be hop {hops}; maxMailHops is {spec.maxMailHops}")
    body = {"tag": "agentMessage", "text": text, "inReplyTo": in_reply_to, "expectsReply": expects_reply}
    receipt = _deliver(
        recipient, body, sender=_sender(sender), priority="interrupt" if interrupt else "normal", hops=hops
    )
    status = Session.objects.filter(pk=recipient.pk).values_list("status", flat=True).get()
    return {**receipt, "hops": hops, "recipient_status": status}


def session_spawn(*, parent_id: str, agent: str, message: str) -> dict[str, Any]:
    """Start a child session of helper ``agent`` with ``message`` (``spawn-session``).

    The child is a sub-session of the caller (``?parent=``) that no tool call waits for: each
    time it stops, its answer is mailed to the caller (:func:`spawned_answer`). It starts from
    the helper's own parameter values; a helper its caller narrows (``with``) is refused, since
    a spawned session would not carry the narrowing.

    Returns:
        ``{"session_id", "agent", "status"}``.
    Raises:
        SendRefused: ``not_permitted`` when ``agent`` is not one of the caller's helpers.
    """
    parent = Session.objects.get(pk=parent_id)
    caller = runtime_agent(parent.agent_slug).loaded
    if agent not in caller.helper_slugs:
        helpers = ", ".join(caller.helper_slugs) or "none"
        raise SendRefused(NOT_PERMITTED, f"{agent!r} is not one of this agent's helpers ({helpers})")
    refs = {ref.slug: ref for ref in caller.spec.helper_refs()}
    if agent in refs and refs[agent].with_:
        raise SendRefused(NOT_PERMITTED, f"helper {agent!r} is narrowed with `with`; call it as a tool instead")
    helper = runtime_agent(agent)
    child_id = uuid.uuid4()
    document = doc.new_document(str(child_id))
    document["spawnedBy"] = str(parent.pk)
    visible = helper.resolve_params()
    document = doc.push_turn(
        document, doc.user_turn(helper.system_prompt, helper.system_tools(visible), doc.make_query(message, []))
    )
    with transaction.atomic():
        child = insert_session(
            document,
            id=child_id,
            agent_slug=agent,
            parent_id=parent.pk,
            owner=parent.owner,
            params={},
            **run_fields(Session.RunMode.UNTIL_BLOCKED),
        )
        enqueue_run(child.pk, child.run_id)
    return {"session_id": str(child.pk), "agent": agent, "status": child.status}


def spawned_answer(child_id: uuid.UUID) -> None:
    """Mail a spawned child's outcome to the session that spawned it, after one of its runs.

    An ``idle`` child sends its final text; a ``failed`` one says so; any other stop (paused,
    waiting on its own calls) sends nothing. A parent gone, or whose mailbox is full, loses the
    answer (logged): it stays readable in the child's own turns.
    """
    child = Session.objects.filter(pk=child_id).first()
    if child is None or child.parent_id is None:
        return
    document = child.document
    if document.get("spawnedBy") != str(child.parent_id):
        return
    if child.status == Session.Status.IDLE:
        head = doc.head(document)
        text = doc.response_text(head["contents"]) if head and head["tag"] == "LlmTurn" else ""
    elif child.status == Session.Status.FAILED:
        text = f"Error: session {child.pk} failed: {child.status_detail or 'no detail'}"
    else:
        return
    parent = Session.objects.filter(pk=child.parent_id).first()
    if parent is None:
        return
    body = {"tag": "agentMessage", "text": text, "inReplyTo": None, "expectsReply": False}
    try:
        _deliver(parent, body, sender=_sender(child), priority="normal", hops=_answered_hops(child, None))
    except SendRefused as refused:
        log.warning(
            "spawned session's answer not delivered",
            extra={"kind": "mail.undelivered", "session_id": str(child.pk), "reason": refused.code},
        )


def watch_create(*, watcher_id: str, session: str, events: list[str], tool: str | None, ttl: float) -> dict[str, Any]:
    """Forward ``events`` of ``session`` to ``watcher_id`` as ``watchedEvent`` mail for ``ttl``
    seconds (``watch-session``); a second watch of the same session replaces the first.

    Returns:
        ``{"watch_id", "session", "events", "tool", "expires_at"}``.
    Raises:
        SendRefused: ``unknown_recipient`` (no such session), ``not_permitted`` (outside the
            watcher's ``mailScope``, itself, or more than :data:`MAX_WATCHES_PER_SESSION`).
    """
    watcher = Session.objects.get(pk=watcher_id)
    spec = runtime_agent(watcher.agent_slug).loaded.spec
    watched = _session_of(session, watcher.owner)
    if watched.pk == watcher.pk:
        raise SendRefused(NOT_PERMITTED, "a session cannot watch itself")
    if not in_scope(watcher, watched, spec.mailScope):
        raise SendRefused(NOT_PERMITTED, f"session {session} is outside this agent's mailScope ({spec.mailScope})")
    now = db_now()
    with transaction.atomic():
        SessionWatch.objects.filter(watcher=watcher, watched=watched).delete()
        live = SessionWatch.objects.filter(watcher=watcher, expires_at__gt=now).count()
        if live >= MAX_WATCHES_PER_SESSION:
            raise SendRefused(NOT_PERMITTED, f"a session holds at most {MAX_WATCHES_PER_SESSION} watches")
        SessionWatch.objects.filter(watcher=watcher, expires_at__lte=now).delete()
        watch = SessionWatch.objects.create(
            watcher=watcher,
            watched=watched,
            events=sorted(set(events)),
            tool=tool,
            created_at=now,
            expires_at=now + timedelta(seconds=min(ttl, MAX_WATCH_TTL)),
        )
        transaction.on_commit(forget_watched_sessions)
    return {
        "watch_id": str(watch.pk),
        "session": str(watched.pk),
        "events": watch.events,
        "tool": tool,
        "expires_at": watch.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def watch_delete(*, watcher_id: str, session: str) -> dict[str, Any]:
    """Drop the watches ``watcher_id`` holds on ``session`` (``unwatch-session``).

    Returns:
        ``{"session", "removed": n}`` (0 when it held none).
    Raises:
        SendRefused: ``unknown_recipient`` for an id that is not a session of the owner.
    """
    watcher = Session.objects.get(pk=watcher_id)
    watched = _session_of(session, watcher.owner)
    removed, _ = SessionWatch.objects.filter(watcher=watcher, watched=watched).delete()
    return {"session": str(watched.pk), "removed": removed}


def _matches(watch: SessionWatch, kind: str, payload: dict[str, Any]) -> bool:
    if kind not in watch.events:
        return False
    if watch.tool and kind.startswith("tool."):
        return fnmatch.fnmatchcase(str(payload.get("tool") or ""), watch.tool)
    return True


def watched_event_forward(event_seq: int) -> int:
    """Mail event ``event_seq`` to every live watch it matches (its kind listed, and its tool
    matching the watch's glob for ``tool.*`` events); expired watches are deleted on the way.

    The mail's hops are one more than those of the session or watch mail the watched session
    last read; past the watcher's ``maxMailHops`` the event is not forwarded, so sessions that
    watch each other cannot wake each other forever.

    Returns:
        How many watchers were mailed. A watcher whose mailbox is full, or whose hops would be
        exceeded, misses the event (logged).
    """
    event = Event.objects.filter(seq=event_seq).first()
    watched = Session.objects.filter(pk=event.session_id).first() if event is not None else None
    if event is None or watched is None:
        return 0
    hops = _answered_hops(watched, None)
    now = db_now()
    SessionWatch.objects.filter(watched_id=event.session_id, expires_at__lte=now).delete()
    payload = json.loads(event.payload_json)
    sent = 0
    for watch in SessionWatch.objects.filter(watched_id=event.session_id, expires_at__gt=now):
        if not _matches(watch, event.kind, payload):
            continue
        body = {"tag": "watchedEvent", "sessionId": str(event.session_id), "event": event.kind, "data": payload}
        try:
            if hops > _spec_of(watch.watcher_id).maxMailHops:
                raise SendRefused(TOO_MANY_HOPS, f"hop {hops}")
            mail_send(session_id=watch.watcher_id, body=body, sender=WATCH_SENDER, hops=hops)
            sent += 1
        except (ApiError, SendRefused) as error:
            log.warning(
                "watched event not delivered",
                extra={"kind": "mail.undelivered", "session_id": str(watch.watcher_id), "reason": error.code},
            )
    return sent
