"""What a session document must look like for this server to read it (docs/sessions.md §1).

Documents are read leniently (``sessions_app.document``): unknown keys and every older shape are
fine. What is checked here is only what the readers rely on, so that a document that passes
never makes a reader fail: its top level, each turn's tag and contents, tool calls and responses
as objects and pairs, tracked calls with a known state. A document that fails is refused on
import, and one found in the database answers ``unreadable_session`` for that session
(docs/api.md §2).
"""

from __future__ import annotations

from typing import Any

from sessions_app.document import LEGACY_PARTIAL_KEYS

#: The turn tags agents-exe writes (docs/sessions.md §1.2).
TURN_TAGS = ("UserTurn", "LlmTurn", "PartialUserTurn")
#: The states of a tracked call (docs/sessions.md §1.6).
CALL_STATES = ("Ready", "Running", "Deferred", "Completed", "Failed")


class DocumentError(ValueError):
    """A session document this server cannot read; the message says where and what."""


def header_problem(document: Any) -> str | None:
    """What makes a document's top level unreadable (``None`` when it is readable)."""
    if not isinstance(document, dict):
        return "the document is not a JSON object"
    # a stored header holds ``"turns": null`` in the turns' place (sessions_app.store)
    if not isinstance(document.get("turns") or [], list):
        return "turns is not a list"
    for key in ("mailCursor", "controlCursor"):
        value = document.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"{key} is not an integer"
    return None


def turn_problem(turn: Any) -> str | None:
    """What makes one turn unreadable (``None`` when it is readable).

    Checks what the readers of this module rely on: a known tag, a ``contents`` object, tool
    calls and responses as objects and pairs, tracked calls with a known state. Everything else
    (unknown keys, ``byteUsage``, the shapes of results) is left as it is.
    """
    if not isinstance(turn, dict):
        return "a turn is not a JSON object"
    tag = turn.get("tag")
    if tag not in TURN_TAGS:
        return f"unknown turn tag {tag!r} (expected {', '.join(TURN_TAGS)})"
    contents = turn.get("contents")
    if not isinstance(contents, dict):
        return f"the contents of a {tag} are not a JSON object"
    query = contents.get("userQuery")
    if query is not None and not isinstance(query, str | dict):
        return f"the userQuery of a {tag} is neither text nor an object"
    if tag == "LlmTurn":
        calls = contents.get("llmToolCalls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) and _function_ok(c) for c in calls):
            return "the llmToolCalls of an LlmTurn are not a list of tool calls"
    elif tag == "UserTurn":
        pairs = contents.get("userToolResponses") or []
        if not isinstance(pairs, list) or not all(_pair_ok(p) for p in pairs):
            return "the userToolResponses of a UserTurn are not a list of [call, response] pairs"
    else:
        return _partial_problem(turn)
    return None


def _function_ok(call: dict[str, Any]) -> bool:
    return isinstance(call.get("function") or {}, dict)


def _pair_ok(pair: Any) -> bool:
    return isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], dict) and _function_ok(pair[0])


def _partial_problem(turn: dict[str, Any]) -> str | None:
    contents = turn["contents"]
    for key in ("trackedCalls", *LEGACY_PARTIAL_KEYS):
        if key in contents and not isinstance(contents[key], list):
            return f"the {key} of a PartialUserTurn are not a list"
    if not all(isinstance(call, dict) and _function_ok(call) for call in contents.get("pendingCalls") or []):
        return "the pendingCalls of a PartialUserTurn are not tool calls"
    for index, tc in enumerate(contents.get("trackedCalls") or []):
        if not isinstance(tc, dict) or tc.get("tcState") not in CALL_STATES:
            return f"trackedCalls[{index}] of a PartialUserTurn has no known tcState ({', '.join(CALL_STATES)})"
        call = tc.get("tcCall")
        if not isinstance(call, dict) or not _function_ok(call) or not isinstance(tc.get("tcId"), str):
            return f"trackedCalls[{index}] of a PartialUserTurn needs a tcId and a tcCall object"
    return None


def document_problem(document: Any) -> str | None:
    """What makes a whole document unreadable, naming the turn (``None`` when it is readable)."""
    problem = header_problem(document)
    if problem is not None:
        return problem
    for index, turn in enumerate(document.get("turns") or []):
        problem = turn_problem(turn)
        if problem is not None:
            return f"turns[{index}]: {problem}"
    return None
