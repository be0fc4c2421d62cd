"""One MCP ``tools/call`` of an agent: a stored session, run until blocked (docs/guide-mcp.md §2).

:func:`ask_agent` creates a session owned by the caller with the prompt, waits for its run to stop
(up to 120 s) and says how it went in one text:

* ``idle``: the agent's final answer;
* ``waiting_external``: a sentence naming the pending calls, then the calls as JSON, each with its
  continuation token (not an error: complete them with ``POST /v1/continuations/:token``);
* still ``running`` when the wait ends: the session id to follow;
* ``failed``: ``got an error: <why>``, as an error.

Parameters for the session come with the call (``Agents-Param-<name>`` headers, ``_meta``) and are
checked as a create's (docs/api.md §7.15); a refusal is an outcome marked ``refused``, which each
transport reports its own way.

The answer always names the session (``session_id``), which the REST API shows like any other.
These functions block and use the database: call them from a thread of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentfiles import document as doc
from foundation.errors import ApiError, ErrorCode
from sessions_app import selectors
from sessions_app.models import Session
from sessions_app.services import sessions

#: Seconds a call waits for its run to stop before answering with the session id.
WAIT_SECONDS = 120.0


#: The codes of a refused ``params``: the call is refused as a whole (docs/api.md §7.15).
PARAMS_CODES = frozenset(
    {ErrorCode.UNKNOWN_PARAMS, ErrorCode.FORBIDDEN_PARAMS, ErrorCode.INVALID_PARAMS, ErrorCode.PARAMS_REQUIRED}
)


@dataclass(frozen=True)
class AskOutcome:
    """What a ``tools/call`` answers: the text, whether it is an error, the session (if any), and
    whether the call's parameters were refused (nothing was created then)."""

    text: str
    is_error: bool = False
    session_id: str | None = None
    refused: bool = False


def ask_agent(
    slug: str,
    prompt: str,
    owner: str | None,
    wait_seconds: float = WAIT_SECONDS,
    params: dict[str, Any] | None = None,
) -> AskOutcome:
    """Run root agent ``slug`` on ``prompt`` in a new session of ``owner`` until it is blocked.

    Args:
        slug: a root agent's slug.
        prompt: the user's message.
        owner: the caller (``None`` without authentication).
        wait_seconds: the longest wait for the run to stop.
        params: the call's parameters; one call is one run, so session- and message-scope values
            both go to it.
    Returns:
        the outcome (see the module docstring); a refused creation (say, the agent was just
        deleted) is an error outcome without a session.
    """
    try:
        session = sessions.session_create(
            agent_slug=slug,
            prompt=prompt,
            media=[],
            run=Session.RunMode.UNTIL_BLOCKED,
            owner=owner,
            params=params or None,
        )
    except ApiError as error:
        if error.code in PARAMS_CODES:
            return AskOutcome(f"{error.code}: {error.message}", is_error=True, refused=True)
        return AskOutcome(f"got an error: {error.message}", is_error=True)
    return describe(selectors.wait_for_run(session.pk, wait_seconds))


def describe(session: Session) -> AskOutcome:
    """The outcome of a session as its run left it (see the module docstring)."""
    session_id = str(session.pk)
    document = session.parsed_document()
    if session.status == Session.Status.IDLE:
        head = doc.head(document) or {}
        return AskOutcome(doc.response_text(head.get("contents") or {}), session_id=session_id)
    if session.status == Session.Status.FAILED:
        return AskOutcome(f"got an error: {session.status_detail or 'the run failed'}", True, session_id)
    if session.status == Session.Status.WAITING_EXTERNAL:
        pending = [
            {
                "tool": call["tool"],
                "tool_call_id": call["tool_call_id"],
                "continuation_token": call["continuation_token"],
                "arguments": _arguments(call["call"]),
            }
            for call in doc.pending_calls(document)
        ]
        names = ", ".join(str(call["tool"]) for call in pending) or "none"
        text = (
            f"Session {session_id} is waiting for deferred tool calls ({names}). Complete each with "
            f"POST /v1/continuations/<continuation_token> and the session resumes by itself.\n"
            + json.dumps({"session_id": session_id, "deferred_calls": pending}, ensure_ascii=False)
        )
        return AskOutcome(text, session_id=session_id)
    if session.status == Session.Status.RUNNING:
        return AskOutcome(
            f"Session {session_id} is still running; follow it at /v1/sessions/{session_id}.",
            session_id=session_id,
        )
    return AskOutcome(f"Session {session_id} stopped with status {session.status}.", session_id=session_id)


def _arguments(call: dict[str, object]) -> object:
    """A provider tool call's arguments, decoded when they are JSON text."""
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw
