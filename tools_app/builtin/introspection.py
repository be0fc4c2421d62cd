"""The System capabilities that look at sessions and at the calling session's own tool calls.

They read through ``ToolContext.sessions`` (``tools_app.ports.SessionsPort``), which the sessions
app binds to the calling session and its owner, so they answer the same from any worker.

* ``get-tool-call-status``, ``list-running-tool-calls``, ``cancel-tool-call``: the calling
  session's calls, by the model's id (``call_...``) or the internal one.
* ``list-sessions``, ``search-sessions``, ``read-session``, ``get-session-stats``: sessions of the
  caller's owner within ``SessionIntrospectionScope`` (``parents-only``, ``children-only``,
  ``subtree`` (the default: ancestors, itself, descendants) or ``all``), at most
  ``SessionIntrospectionMaxResults`` of them; tool outputs only with
  ``SessionIntrospectionIncludeToolOutputs``.
"""

from __future__ import annotations

from typing import Any

from agentfiles.builtins import SystemConfig
from agentfiles.tool_responses import render_tool_response
from foundation.common import rfc3339

from ..base import ToolContext
from ..ports import SessionAccessDenied, SessionInfo, SessionNotFound, ToolCallInfo, ToolCallNotFound

#: The most seconds get-tool-call-status waits, whatever it is asked.
MAX_WAIT_SECONDS = 300.0
#: Sessions get-session-stats counts the turns of, and search-sessions looks into, at most.
MAX_SCANNED_SESSIONS = 1000
#: Characters shown on each side of a match in a search preview.
PREVIEW_CHARS = 80

_BOOL = {"type": "boolean"}
_INT = {"type": "integer"}
ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "get-tool-call-status": {
        "tool_call_id": {"type": "string", "description": "the call's id (call_...)"},
        "include_progress": {**_BOOL, "description": "get-tool-call-status: include progress (true)"},
        "wait_for_completion": {**_BOOL, "description": "get-tool-call-status: wait for the call to finish"},
        "timeout_seconds": {"type": "number", "description": "get-tool-call-status: how long to wait (5)"},
    },
    "cancel-tool-call": {
        "tool_call_id": {"type": "string", "description": "the call's id (call_...)"},
        "reason": {"type": "string", "description": "cancel-tool-call: why"},
    },
    "search-sessions": {"query": {"type": "string", "description": "search-sessions: the text to find"}},
    "read-session": {
        "session_id": {"type": "string", "description": "read-session: the session's id"},
        "take_n": {**_INT, "description": "read-session: keep only the last N turns"},
        "drop_n": {**_INT, "description": "read-session: skip the first N turns"},
        "offset": {**_INT, "description": "read-session: start at this turn (0-based)"},
        "limit": {**_INT, "description": "read-session: at most this many turns"},
        "include_thinking": {**_BOOL, "description": "read-session: include the model's reasoning (false)"},
        "include_tool_responses": {**_BOOL, "description": "read-session: include tool results (false)"},
    },
}


class CapabilityError(Exception):
    """A capability call that cannot be answered; the message is for the model."""


def run(config: SystemConfig, capability: str, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Answer one of this module's capabilities (the ``data`` of the System answer).

    Raises:
        CapabilityError: no session store, a missing argument, an unknown session or call, a
            session outside the scope.
    """
    port = ctx.sessions
    if port is None:
        raise CapabilityError(f"{capability} needs a session store, and this call has none")
    scope = config.SessionIntrospectionScope
    try:
        if capability == "get-tool-call-status":
            wait = _number(arguments, "timeout_seconds", 5.0) if arguments.get("wait_for_completion") is True else 0.0
            if ctx.timeout is not None:
                wait = min(wait, ctx.timeout)
            call = port.tool_call(_text(arguments, "tool_call_id"), wait_seconds=min(wait, MAX_WAIT_SECONDS))
            return _call_status(call, arguments.get("include_progress") is not False)
        if capability == "list-running-tool-calls":
            calls = [_call_status(call, False) for call in port.running_tool_calls()]
            return {"calls": calls, "total": len(calls)}
        if capability == "cancel-tool-call":
            call_id = _text(arguments, "tool_call_id")
            cancelled, previous = port.cancel_tool_call(call_id)
            return {"tool_call_id": call_id, "cancelled": cancelled, "previous_status": previous}
        if capability == "list-sessions":
            sessions, total = port.sessions(scope, limit=config.SessionIntrospectionMaxResults)
            return {"sessions": [_summary(s) for s in sessions], "totalAccessible": total, "scope": scope}
        if capability == "search-sessions":
            return _search(config, port.sessions, _text(arguments, "query"))
        if capability == "read-session":
            return _read(config, port.session(_text(arguments, "session_id"), scope), arguments)
        sessions, total = port.sessions(scope, limit=MAX_SCANNED_SESSIONS)
        stats = {"totalSessions": total, "totalTurnsAcrossAllSessions": sum(len(s.turns) for s in sessions)}
        note = "turn counts cover every session in scope"
        if total > len(sessions):
            note = f"turn counts cover the {len(sessions)} most recently changed sessions in scope"
        return {**stats, "scope": scope, "note": note}
    except ToolCallNotFound:
        raise CapabilityError(f"this session has no tool call {arguments.get('tool_call_id')!r}") from None
    except SessionNotFound:
        raise CapabilityError(f"session {arguments.get('session_id')!r} not found") from None
    except SessionAccessDenied:
        raise CapabilityError(
            f"access to session {arguments.get('session_id')!r} denied: it is outside the scope {scope!r}"
        ) from None


def _text(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise CapabilityError(f'the argument "{key}" is required')
    return value


def _number(arguments: dict[str, Any], key: str, default: float) -> float:
    value = arguments.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CapabilityError(f'"{key}" must be a number of seconds')
    return float(value)


def _count(arguments: dict[str, Any], key: str) -> int | None:
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CapabilityError(f'"{key}" must be a whole number, 0 or more')
    return value


def _call_status(call: ToolCallInfo, progress: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "tool_call_id": call.tool_call_id,
        "status": call.status,
        "tool_name": call.tool_name,
        "started_at": rfc3339(call.started_at),
        "completed_at": rfc3339(call.completed_at),
        "result": call.result,
        "is_final": call.is_final,
    }
    if progress:
        status["progress"] = []
    return status


def _summary(session: SessionInfo) -> dict[str, Any]:
    return {
        "sessionId": session.session_id,
        "conversationId": session.session_id,
        "agent": session.agent,
        "modificationTime": rfc3339(session.updated_at),
        "turnCount": len(session.turns),
        "isParent": session.relation == "parent",
        "isChild": session.relation == "child",
        "isLocked": session.locked,
        "status": session.status,
    }


def _turn_lines(turn: dict[str, Any], thinking: bool, tool_outputs: bool) -> list[str]:
    """The condensed lines of one turn: ``[User] ...``, ``[LLM] ...``, ``[Tool] ...``."""
    tag, contents = turn.get("tag"), turn.get("contents") or {}
    lines: list[str] = []
    if tag == "LlmTurn":
        response = contents.get("llmResponse")
        if isinstance(response, dict):
            if thinking and response.get("responseThinking"):
                lines.append(f"[Thinking] {response['responseThinking']}")
            text = response.get("responseText") or ""
        else:
            text = response if isinstance(response, str) else ""
        if text:
            lines.append(f"[LLM] {text}")
        for call in contents.get("llmToolCalls") or []:
            function = call.get("function") or {}
            lines.append(f"[LLM] calls {function.get('name')}({function.get('arguments', '')})")
        return lines
    pairs: list[tuple[Any, Any]] = []
    if tag == "UserTurn":
        pairs = [(call, response) for call, response in contents.get("userToolResponses") or []]
    elif tag == "PartialUserTurn":
        for tracked in contents.get("trackedCalls") or []:
            pairs.append((tracked.get("tcCall") or {}, tracked.get("tcResult") or f"({tracked.get('tcState')})"))
    if tool_outputs:
        for call, response in pairs:
            lines.append(f"[Tool] {(call.get('function') or {}).get('name')}: {render_tool_response(response)}")
    query = contents.get("userQuery")
    text = query.get("text") if isinstance(query, dict) else query
    if text:
        lines.append(f"[User] {text}")
    return lines


def _read(config: SystemConfig, session: SessionInfo, arguments: dict[str, Any]) -> dict[str, Any]:
    """read-session: the turns oldest first, then ``drop_n``, ``offset``, ``limit``, ``take_n``."""
    turns = list(reversed(session.turns))
    numbered = list(enumerate(turns, start=1))
    drop, offset, limit, take = (_count(arguments, k) for k in ("drop_n", "offset", "limit", "take_n"))
    numbered = numbered[(drop or 0) + (offset or 0) :]
    if limit is not None:
        numbered = numbered[:limit]
    if take is not None:
        numbered = numbered[len(numbered) - take :] if take else []
    thinking = arguments.get("include_thinking") is True
    outputs = arguments.get("include_tool_responses") is True and config.SessionIntrospectionIncludeToolOutputs
    lines = [f"Turn {n}: {line}" for n, turn in numbered for line in _turn_lines(turn, thinking, outputs)]
    return {
        "sessionId": session.session_id,
        "conversationId": session.session_id,
        "totalTurns": len(turns),
        "returnedTurns": len(numbered),
        "content": "\n".join(lines),
        "format": "condensed-text",
        "scope": config.SessionIntrospectionScope,
        "access": "granted",
    }


def _search(config: SystemConfig, sessions: Any, query: str) -> dict[str, Any]:
    """search-sessions: case-insensitive text search over the sessions in scope."""
    scope = config.SessionIntrospectionScope
    plain = query.isascii() and query.isprintable() and '"' not in query and "\\" not in query
    candidates, _ = sessions(scope, limit=MAX_SCANNED_SESSIONS, contains=query if plain else None)
    wanted = query.casefold()
    results: list[dict[str, Any]] = []
    matches = 0
    for session in candidates:
        if wanted in session.agent.casefold() or wanted in session.session_id:
            hit, kind = f"{session.agent} {session.session_id}", "metadata"
        else:
            text = "\n".join(
                line
                for turn in reversed(session.turns)
                for line in _turn_lines(turn, False, config.SessionIntrospectionIncludeToolOutputs)
            )
            at = text.casefold().find(wanted)
            if at < 0:
                continue
            hit, kind = text[max(0, at - PREVIEW_CHARS) : at + len(query) + PREVIEW_CHARS], "content"
        matches += 1
        if len(results) < config.SessionIntrospectionMaxResults:
            results.append(
                {
                    "sessionId": session.session_id,
                    "conversationId": session.session_id,
                    "turnCount": len(session.turns),
                    "preview": hit,
                    "matchType": kind,
                }
            )
    return {"query": query, "results": results, "totalMatches": matches, "scope": scope}
