"""The mailbox: mail bodies, envelopes, cursors, and folding mail into turns (docs/sessions.md §6).

Two cursors live in the session document: ``mailCursor`` (every non-control envelope at or
below it has been folded into a stored turn) and ``controlCursor`` (every control envelope at or
below it has taken effect). Controls are consumed as soon as the run sees them, while messages
wait for a turn that can carry them, so a single cursor could not say both.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from agentfiles import document as doc
from foundation.common import rfc3339
from sessions_app import background
from sessions_app.models import MailEnvelope, Session
from sessions_app.values import Control

PAUSE = {"tag": "control", "message": {"tag": Control.PAUSE.value}}
RESUME = {"tag": "control", "message": {"tag": Control.RESUME.value}}
STOP_RUN = {"tag": "control", "message": {"tag": Control.STOP_RUN.value}}
CANCEL_ALL_ATTACHED = {"tag": "control", "message": {"tag": Control.CANCEL_ALL_ATTACHED.value}}

#: Mail kinds an agent's ``wakeOn`` may list, and its default (docs/sessions.md §6.5).
DEFAULT_WAKE_ON = ["user", "tool", "parent", "child"]


def is_control(envelope: MailEnvelope) -> bool:
    """Whether the envelope is a control (consumed by the run, never shown to the LLM)."""
    return envelope.body.get("tag") == "control"


def control_of(envelope: MailEnvelope) -> Control | None:
    """The control an envelope carries, or ``None`` for any other mail."""
    return Control(envelope.body["message"]["tag"]) if is_control(envelope) else None


def take_controls(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], Control | None, bool]:
    """Consume the unread controls of a session, in order (docs/sessions.md §6.3).

    ``cancelCalls`` and ``cancelAllAttached`` ask the background calls to stop at once; Pause,
    Resume and StopRun decide what the run does next.

    Returns:
        ``(document, stop, consumed_any)``: the document with ``controlCursor`` past them;
        ``stop`` is :attr:`Control.PAUSE` (a Pause not undone by a later Resume),
        :attr:`Control.STOP_RUN`, or ``None``.
    """
    stop: Control | None = None
    consumed = False
    for envelope in unread(session, document):
        control = control_of(envelope)
        if control is None:
            continue
        if control == Control.PAUSE:
            stop = Control.PAUSE
        elif control == Control.RESUME and stop == Control.PAUSE:
            stop = None
        elif control == Control.STOP_RUN:
            stop = Control.STOP_RUN
        elif control in (Control.CANCEL_CALLS, Control.CANCEL_ALL_ATTACHED):
            background.cancel_calls(session, envelope.body["message"].get("toolCallIds"))
        document = dict(document)
        document["controlCursor"] = envelope.seq
        document.setdefault("mailCursor", 0)
        consumed = True
    return document, stop, consumed


def envelope_view(envelope: MailEnvelope) -> dict[str, Any]:
    """The Envelope JSON (docs/api.md §5.5)."""
    return {
        "id": str(envelope.mail_id),
        "seq": envelope.seq,
        "from": envelope.sender,
        "priority": envelope.priority,
        "hops": envelope.hops,
        "sentAt": rfc3339(envelope.sent_at),
        "body": envelope.body,
    }


def cursors(document: dict[str, Any]) -> tuple[int, int]:
    """``(mailCursor, controlCursor)`` of a document; 0 when absent."""
    return int(document.get("mailCursor") or 0), int(document.get("controlCursor") or 0)


def may_have_unread(last_mail_seq: int, document: dict[str, Any]) -> bool:
    """Whether mail newer than both cursors exists, from the session's ``last_mail_seq`` (no query)."""
    return last_mail_seq > min(cursors(document))


def unread(session: Session, document: dict[str, Any]) -> list[MailEnvelope]:
    """Mail not yet consumed, oldest first: messages past ``mailCursor``, controls past ``controlCursor``."""
    mail_cursor, control_cursor = cursors(document)
    rows = MailEnvelope.objects.filter(session=session, seq__gt=min(mail_cursor, control_cursor)).order_by("seq")
    return [e for e in rows if e.seq > (control_cursor if is_control(e) else mail_cursor)]


def sender_kind(sender: dict[str, Any], session: Session) -> str:
    """The ``wakeOn`` kind of a sender: user, tool, parent, child or peer."""
    tag = sender.get("tag")
    if tag == "user":
        return "user"
    if tag in ("toolCall", "system"):
        return "tool"
    if tag == "session":
        other = sender.get("sessionId")
        if session.parent_id is not None and str(session.parent_id) == other:
            return "parent"
        if other is not None and Session.objects.filter(pk=other, parent_id=session.pk).exists():
            return "child"
        return "peer"
    return "peer"


def _sender_label(sender: dict[str, Any]) -> str:
    tag = sender.get("tag")
    if tag == "user":
        return f"user {sender['owner']}" if sender.get("owner") else "the user"
    if tag == "session":
        agent = f' (agent "{sender["agent"]}")' if sender.get("agent") else ""
        return f"session {sender.get('sessionId')}{agent}"
    if tag == "toolCall":
        return f"tool call {sender.get('toolCallId')}"
    return f"system {sender.get('source', '')}".strip()


def render(envelope: MailEnvelope) -> tuple[str, list[dict[str, Any]]]:
    """What the LLM sees of one envelope: a ``[mail ...]`` header and text, plus any media."""
    body = envelope.body
    tag = body.get("tag")
    media: list[dict[str, Any]] = []
    if tag == "userMessage":
        query = body["query"]
        text = query if isinstance(query, str) else query.get("text", "")
        media = [] if isinstance(query, str) else list(query.get("media") or [])
        header = f"[mail {envelope.mail_id} from {_sender_label(envelope.sender)}]"
    elif tag == "agentMessage":
        reply = ", expects reply" if body.get("expectsReply") else ""
        header = f"[mail {envelope.mail_id} from {_sender_label(envelope.sender)}{reply}]"
        text = body.get("text", "")
    elif tag == "toolCallFinished":
        state = body.get("state", "").lower()
        header = f"[mail {envelope.mail_id}: tool call {body.get('providerCallId')} ({body.get('tool')}) {state}]"
        text = doc.render_tool_response(body.get("result"))
        # the text names an image or a PDF; the model sees it as a part of the message as well
        media = [
            {key: item[key] for key in ("mimeType", "base64Data", "filename") if key in item}
            for item in doc.response_media(body.get("result"))
        ]
    elif tag == "watchedEvent":
        header = f"[mail {envelope.mail_id}: watched session {body.get('sessionId')} {body.get('event')}]"
        text = json.dumps(body.get("data"), ensure_ascii=False, sort_keys=True)
    else:
        header = f"[mail {envelope.mail_id} from {_sender_label(envelope.sender)}]"
        text = doc.render_tool_response(body)
    return f"{header}\n{text}", media


def can_fold(document: dict[str, Any]) -> bool:
    """Whether mail can go into the head now: the LLM is about to be asked, or has answered."""
    head = doc.head(document)
    if head is None:
        return True
    if head["tag"] == "UserTurn":
        return True
    if head["tag"] == "LlmTurn":
        return not doc.tool_calls_of(head["contents"])
    if head["tag"] == "PartialUserTurn":
        # only detached calls are still open: the LLM may be asked with placeholders
        return all(tc["tcState"] in doc.FINAL_STATES or tc.get("tcDetached") for tc in doc.tracked_calls(head))
    return False


def fold(
    document: dict[str, Any],
    messages: list[MailEnvelope],
    *,
    system_prompt: str,
    system_tools: list[dict[str, Any]],
    in_tool_result: bool,
) -> dict[str, Any]:
    """A copy of ``document`` with ``messages`` folded in and ``mailCursor`` advanced past them.

    Onto a final LLM answer (or an empty session) the mail becomes a new user turn; into a user
    turn not yet answered it is added to the query (or, with ``mailInToolResult``, to the last
    tool result of the round). The raw envelopes are kept on the turn as ``userMail``.
    """
    if not messages:
        return document
    blocks, media = [], []
    for envelope in messages:
        text, attached = render(envelope)
        blocks.append(text)
        media.extend(attached)
    text = "\n\n".join(blocks)
    raw = [envelope_view(e) for e in messages]
    head = doc.head(document)
    if head is None or head["tag"] == "LlmTurn":
        turn = doc.user_turn(system_prompt, system_tools, doc.make_query(text, media))
        turn["contents"]["userMail"] = raw
        updated = doc.push_turn(document, turn)
    else:
        turn = copy.deepcopy(head)
        contents = turn["contents"]
        responses = contents.get("userToolResponses") or []
        if in_tool_result and responses and not media:
            last = responses[-1]
            previous = last[1]
            last[1] = (
                f"{previous}\n\n{text}"
                if isinstance(previous, str)
                else {
                    "type": "mixed",
                    "parts": [
                        {"type": "text", "text": doc.render_tool_response(previous)},
                        {"type": "text", "text": text},
                    ],
                }
            )
        else:
            contents["userQuery"] = _append_query(contents.get("userQuery"), text, media)
        contents["userMail"] = [*(contents.get("userMail") or []), *raw]
        doc.recount_user_turn(turn)
        updated = doc.replace_head(document, turn)
    updated["mailCursor"] = max(e.seq for e in messages)
    updated.setdefault("controlCursor", 0)
    return updated


def _append_query(query: Any, text: str, media: list[dict[str, Any]]) -> Any:
    if query is None or query == "":
        return doc.make_query(text, media)
    if isinstance(query, str):
        return doc.make_query(f"{query}\n\n{text}", media)
    return {"text": f"{query.get('text', '')}\n\n{text}", "media": [*(query.get("media") or []), *media]}


def new_mail_id() -> uuid.UUID:
    """A fresh message id."""
    return uuid.uuid4()
