"""The session document: the agents-exe session JSON, kept as plain JSON (docs/sessions.md §1).

A document is ``{"turns", "sessionId", "forkedFromSessionId", "turnId", "sessionVersion"?,
"mailCursor"?}`` with ``turns`` newest first (``turns[0]`` is the head). Documents written by
agents-exe are stored untouched, so load then dump gives back the same JSON; this module only
reads them leniently and appends turns in the shapes agents-exe writes:

- ``UserTurn`` contents: ``userPrompt`` (string), ``userTools`` (list), ``userQuery`` (a string,
  ``null``, or ``{"text", "media": [...]}`` when media is attached) and ``userToolResponses``
  (a list of ``[call, response]`` pairs; a text response is a bare string).
- ``LlmTurn`` contents: ``llmResponse`` (``{rawResponse, responseText, responseThinking,
  responseTokenUsage?}``) and ``llmToolCalls`` (OpenAI tool calls).
- ``PartialUserTurn`` (our rendering; agents-exe never documented its JSON): a user turn whose
  calls are not all final. Its ``trackedCalls`` hold one entry per call of the LLM turn below it:
  ``{"tcId", "tcState", "tcCall", "tcResult", "tcContinuation", "tcPolicy"}`` with ``tcState``
  one of ``Ready | Running | Deferred | Completed | Failed``. Once every call is final the head
  becomes a full ``UserTurn`` (docs/sessions.md §1.6).

Older agents-exe versions wrote a partial turn as three lists instead of ``trackedCalls``:
``completedResponses`` (``[call, response]`` pairs), ``pendingCalls`` (calls) and
``pendingContinuations`` (``[token, {"toolName", ...}]`` pairs). Such a turn is read as the
tracked calls it stands for (:func:`tracked_calls`) and stored untouched, so an imported file
exports unchanged; the first step that changes it writes the current shape
(:func:`current_partial`). Tool responses of older files may be wrapped as
``{"_userToolResponse": value}``; they read as ``value``.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from typing import Any

from agentfiles.tool_responses import render_tool_response, unwrap_response
from agentfiles.usage import user_byte_usage

FINAL_STATES = {"Completed", "Failed"}

#: What the LLM is told for a call whose result is not in yet (docs/sessions.md §3.3).
PLACEHOLDER_MESSAGE = "This tool call has not finished yet. Its result will be delivered in a later message."


def new_document(session_id: str) -> dict[str, Any]:
    """A new, empty session document for ``session_id`` (a UUID string)."""
    return {
        "turns": [],
        "sessionId": session_id,
        "forkedFromSessionId": None,
        "turnId": str(uuid.uuid4()),
        "sessionVersion": 1,
    }


def head(document: dict[str, Any]) -> dict[str, Any] | None:
    """The newest turn, or ``None`` for an empty session."""
    turns = document.get("turns") or []
    return turns[0] if turns else None


def push_turn(document: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` with ``turn`` as the new head and a fresh ``turnId``.

    The copy shares the older turns (turns are never changed in place), so that storing it
    writes the new turn only.
    """
    updated = dict(document)
    updated["turns"] = [turn, *document.get("turns", [])]
    updated["turnId"] = str(uuid.uuid4())
    return updated


def replace_head(document: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``document`` whose head turn is replaced by ``turn`` (the older turns shared)."""
    updated = dict(document)
    updated["turns"] = [turn, *document.get("turns", [])[1:]]
    updated["turnId"] = str(uuid.uuid4())
    return updated


# --- building turns ---------------------------------------------------------------------------


def make_query(text: str | None, media: list[dict[str, Any]] | None) -> Any:
    """A ``userQuery`` value: a bare string without media, ``{"text", "media"}`` with media.

    Args:
        text: the prompt text, or ``None``.
        media: attachments in session-document keys (``mimeType``, ``base64Data``, ``filename``?).
    Returns:
        ``None`` when there is neither text nor media.
    """
    if media:
        return {"text": text or "", "media": media}
    return text


def user_turn(
    system_prompt: str,
    system_tools: list[dict[str, Any]],
    query: Any,
    tool_responses: list[list[Any]] | None = None,
) -> dict[str, Any]:
    """A full ``UserTurn`` (docs/sessions.md §1.3) with its ``byteUsage`` (docs/sessions.md §1.11)."""
    responses = tool_responses or []
    return {
        "tag": "UserTurn",
        "contents": {
            "userPrompt": system_prompt,
            "userQuery": query,
            "userToolResponses": responses,
            "userTools": system_tools,
        },
        "byteUsage": user_byte_usage(system_prompt, system_tools, query, responses),
    }


def recount_user_turn(turn: dict[str, Any]) -> None:
    """Recompute, in place, the ``byteUsage`` of a ``UserTurn`` whose contents changed (mail
    folded into it, docs/sessions.md §6.4); other turns are left as they are."""
    if turn.get("tag") != "UserTurn":
        return
    contents = turn.get("contents") or {}
    turn["byteUsage"] = user_byte_usage(
        contents.get("userPrompt") or "",
        contents.get("userTools") or [],
        contents.get("userQuery"),
        contents.get("userToolResponses") or [],
    )


def llm_turn(
    raw_response: dict[str, Any],
    text: str,
    thinking: str | None,
    tool_calls: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """An ``LlmTurn`` holding the provider's answer (docs/sessions.md §1.4)."""
    response: dict[str, Any] = {
        "rawResponse": raw_response,
        "responseText": text,
        "responseThinking": thinking,
    }
    if usage is not None:
        response["responseTokenUsage"] = usage
    return {
        "tag": "LlmTurn",
        "contents": {"llmResponse": response, "llmToolCalls": tool_calls},
        "byteUsage": llm_byte_usage(text, thinking, tool_calls, usage),
    }


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8"))


def llm_byte_usage(
    text: str, thinking: str | None, tool_calls: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``byteUsage`` agents-exe writes on an ``LlmTurn`` (docs/sessions.md §1.4): bytes of the
    answer's text and reasoning as JSON strings, of each tool call as compact JSON, their total,
    and the provider's token counts when it gave them. Bytes, not tokens."""
    output = _json_bytes(text or "")
    reasoning = _json_bytes(thinking) if thinking else 0
    tools = sum(_json_bytes(call) for call in tool_calls)
    byte_usage: dict[str, Any] = {
        "stepInputBytes": 0,
        "stepOutputBytes": output,
        "stepReasoningBytes": reasoning,
        "stepToolBytes": tools,
        "stepTotalBytes": output + reasoning + tools,
    }
    if usage is not None:
        byte_usage["stepTokenUsage"] = usage
    return byte_usage


def partial_turn(
    system_prompt: str, system_tools: list[dict[str, Any]], tracked: list[dict[str, Any]]
) -> dict[str, Any]:
    """A ``PartialUserTurn`` with one tracked call per LLM tool call, in the LLM's order."""
    return {
        "tag": "PartialUserTurn",
        "contents": {
            "userPrompt": system_prompt,
            "userQuery": None,
            "userTools": system_tools,
            "trackedCalls": tracked,
        },
    }


def tracked_call(
    call: dict[str, Any],
    state: str,
    policy: dict[str, Any],
    result: Any = None,
    continuation: str | None = None,
) -> dict[str, Any]:
    """One tracked call of a partial turn, with a fresh internal ``tcId`` (a UUID)."""
    return {
        "tcId": str(uuid.uuid4()),
        "tcState": state,
        "tcCall": call,
        "tcResult": result,
        "tcContinuation": continuation,
        "tcPolicy": policy,
    }


def close_partial(turn: dict[str, Any]) -> dict[str, Any]:
    """The full ``UserTurn`` that a partial turn becomes once all its calls are final."""
    contents = turn["contents"]
    responses = [[tc["tcCall"], tc["tcResult"]] for tc in tracked_calls(turn)]
    return user_turn(
        contents.get("userPrompt", ""), contents.get("userTools", []), contents.get("userQuery"), responses
    )


def all_final(turn: dict[str, Any]) -> bool:
    """Whether every tracked call of a partial turn is ``Completed`` or ``Failed``."""
    return all(tc["tcState"] in FINAL_STATES for tc in tracked_calls(turn))


#: The three lists an older partial turn holds in place of ``trackedCalls``.
LEGACY_PARTIAL_KEYS = ("completedResponses", "pendingCalls", "pendingContinuations")
#: What the model is told about a call an older version left running without a continuation.
LEGACY_INTERRUPTED_TEXT = "Error: the tool call was interrupted (it was still running when the session was saved)"
_LEGACY_NAMESPACE = uuid.UUID("6f1d8a52-3c47-4e0b-9a51-2f7c1b9e0d34")


def tracked_calls(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """The tracked calls of a ``PartialUserTurn``, in either shape agents-exe has written.

    A current turn answers its own ``trackedCalls`` list (mutable: callers that change it own a
    copy, see :func:`current_partial`). An older turn answers entries built from its three lists:
    completed responses are ``Completed``; a pending call is ``Deferred`` on the continuation
    whose ``toolName`` names it (taken in order), or ``Failed`` as interrupted when none does.
    Their ``tcId`` is derived from the provider's call id, so it is the same at every read.
    """
    contents = turn.get("contents") or {}
    if "trackedCalls" in contents:
        return contents["trackedCalls"]
    entries: list[tuple[int, dict[str, Any]]] = []
    for position, pair in enumerate(contents.get("completedResponses") or []):
        call, response = (pair[0], pair[1]) if isinstance(pair, list) and len(pair) == 2 else ({}, pair)
        entries.append((_call_index(call, position), _legacy_entry(call, "Completed", unwrap_response(response))))
    tokens: dict[str, list[str]] = {}
    for pair in contents.get("pendingContinuations") or []:
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], dict):
            tokens.setdefault(str(pair[1].get("toolName") or ""), []).append(str(pair[0]))
    offset = len(entries)
    for position, call in enumerate(contents.get("pendingCalls") or []):
        name = (call.get("function") or {}).get("name") or ""
        waiting = tokens.get(name) or []
        if waiting:
            entry = _legacy_entry(call, "Deferred", None, continuation=waiting.pop(0))
        else:
            entry = _legacy_entry(call, "Failed", LEGACY_INTERRUPTED_TEXT)
        entries.append((_call_index(call, offset + position), entry))
    return [entry for _, entry in sorted(entries, key=lambda item: item[0])]


def _call_index(call: Any, fallback: int) -> int:
    index = call.get("index") if isinstance(call, dict) else None
    return index if isinstance(index, int) else fallback


def _legacy_entry(call: Any, state: str, result: Any, continuation: str | None = None) -> dict[str, Any]:
    call = call if isinstance(call, dict) else {}
    return {
        "tcId": str(uuid.uuid5(_LEGACY_NAMESPACE, str(call.get("id") or json.dumps(call, sort_keys=True)))),
        "tcState": state,
        "tcCall": call,
        "tcResult": result,
        "tcContinuation": continuation,
        "tcPolicy": {"tag": "defer"} if state == "Deferred" else {"tag": "runSync"},
    }


def current_partial(turn: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a ``PartialUserTurn`` in the current shape, ready to be changed and stored."""
    updated = copy.deepcopy(turn)
    contents = updated.setdefault("contents", {})
    if "trackedCalls" not in contents:
        contents["trackedCalls"] = tracked_calls(turn)
        for key in LEGACY_PARTIAL_KEYS:
            contents.pop(key, None)
    return updated


# --- reading ------------------------------------------------------------------------------------


def response_text(llm_contents: dict[str, Any]) -> str:
    """The text of an ``LlmTurn``: ``llmResponse.responseText``, or a bare string (older files)."""
    response = llm_contents.get("llmResponse")
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        return response.get("responseText") or ""
    return ""


def answered_calls(document: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """Every answered tool call with its response, oldest first: those of the closed user turns,
    then the completed ones of a partial head."""
    answered: list[tuple[dict[str, Any], Any]] = []
    for turn in reversed(document.get("turns") or []):
        contents = turn.get("contents") or {}
        if turn.get("tag") == "UserTurn":
            for pair in contents.get("userToolResponses") or []:
                if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], dict):
                    answered.append((pair[0], unwrap_response(pair[1])))
        elif turn.get("tag") == "PartialUserTurn":
            done = [tc for tc in tracked_calls(turn) if tc["tcState"] == "Completed"]
            answered.extend((tc["tcCall"], tc["tcResult"]) for tc in done)
    return answered


def tool_calls_of(llm_contents: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of an ``LlmTurn`` (an empty list when there are none)."""
    return list(llm_contents.get("llmToolCalls") or [])


def status_of(document: dict[str, Any]) -> str:
    """The status a session's turns imply when no run is active (docs/sessions.md §2).

    Returns:
        ``ready`` (empty session, or work for the LLM or the tools), ``idle`` (the head is a final
        answer), ``running`` (the head partial turn waits only on deferred calls, a helper
        session answering one of them: the helper works for it, docs/decisions.md §21) or
        ``waiting_external`` (it waits only on deferred calls, none of them a helper's).
    """
    turn = head(document)
    if turn is None:
        return "ready"
    tag = turn.get("tag")
    if tag == "LlmTurn":
        return "ready" if tool_calls_of(turn["contents"]) else "idle"
    if tag == "PartialUserTurn":
        open_calls = [tc for tc in tracked_calls(turn) if tc["tcState"] not in FINAL_STATES]
        if open_calls and all(tc["tcState"] == "Deferred" for tc in open_calls):
            return "running" if any(tc.get("tcChild") for tc in open_calls) else "waiting_external"
        return "ready"
    return "ready"


def pending_calls(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The deferred calls still waiting on the head partial turn, as DeferredCallView dicts.

    Shape (docs/api.md §5.3): ``{tool_call_id, continuation_token, tool, disposition,
    call}``, where ``tool_call_id`` is our internal UUID and ``call.id`` the provider's id.
    """
    turn = head(document)
    if turn is None or turn.get("tag") != "PartialUserTurn":
        return []
    views = []
    for tc in tracked_calls(turn):
        # a helper call also waits on a continuation, but its child session answers it
        if tc["tcState"] != "Deferred" or tc.get("tcChild"):
            continue
        views.append(
            {
                "tool_call_id": tc["tcId"],
                "continuation_token": tc["tcContinuation"],
                "tool": tc["tcCall"].get("function", {}).get("name"),
                "disposition": tc["tcPolicy"],
                "call": tc["tcCall"],
            }
        )
    return views


# --- the OpenAI request -------------------------------------------------------------------------


def _query_content(query: Any) -> Any:
    """OpenAI user-message content for a ``userQuery`` (docs/sessions.md §3.3, docs/decisions.md §2)."""
    if isinstance(query, str):
        return query
    if not isinstance(query, dict):
        return str(query)
    text = query.get("text") or ""
    media = query.get("media") or []
    if not media:
        return text
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "text", "text": text})
    parts.extend(_media_part(item) for item in media)
    return parts


#: Audio formats a chat-completions ``input_audio`` part takes, by MIME type.
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _media_part(item: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI content part for one attachment: a PDF as a file, text as text, wav and mp3 as
    ``input_audio``, anything else as an image."""
    mime = item.get("mimeType", "application/octet-stream")
    data = item.get("base64Data", "")
    if mime == "application/pdf":
        file = {"filename": item.get("filename") or "document.pdf", "file_data": f"data:{mime};base64,{data}"}
        return {"type": "file", "file": file}
    if mime.startswith("text/") or mime in {"application/json", "application/xml"}:
        decoded = base64.b64decode(data).decode("utf-8", errors="replace")
        return {"type": "text", "text": f"[{item.get('filename') or 'attachment'}]\n{decoded}"}
    if mime in _AUDIO_FORMATS:
        return {"type": "input_audio", "input_audio": {"data": data, "format": _AUDIO_FORMATS[mime]}}
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def response_media(response: Any) -> list[dict[str, Any]]:
    """The attachments of a stored tool response: a media response, or a mixed one's media parts
    (``{"type": "media", "mimeType", "base64Data", "filename"?}`` each)."""
    response = unwrap_response(response)
    if not isinstance(response, dict):
        return []
    if response.get("type") == "media":
        return [response]
    if response.get("type") == "mixed":
        return [part for part in response.get("parts", []) if isinstance(part, dict) and part.get("type") == "media"]
    return []


def _tool_media_message(answered: list[tuple[dict[str, Any], Any]]) -> dict[str, Any] | None:
    """A user message carrying the media that tool calls returned, ``None`` when there is none.

    A tool message holds text only, so the tool message says ``[Media: ...]`` and the media
    themselves follow the round's tool messages in this message, each after a line naming its call.
    """
    parts: list[dict[str, Any]] = []
    for call, response in answered:
        media = response_media(response)
        if media:
            name = (call.get("function") or {}).get("name")
            parts.append({"type": "text", "text": f"[media returned by tool call {call.get('id')} ({name})]"})
            parts.extend(_media_part(item) for item in media)
    return {"role": "user", "content": parts} if parts else None


def _clean_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function", {})
    return {
        "id": call.get("id"),
        "type": "function",
        "function": {"name": function.get("name"), "arguments": function.get("arguments", "{}")},
    }


def placeholder(call: dict[str, Any], detached: Any = None) -> str:
    """The tool message sent for a call whose result is not in yet (docs/sessions.md §3.3).

    ``detached`` is the tracked call's ``tcDetached``: for a detached call, why it was detached
    (``True`` in documents written before reasons were kept), said in a ``detached`` field.
    """
    shown: dict[str, Any] = {"status": "running", "message": PLACEHOLDER_MESSAGE, "tool_call_id": call.get("id")}
    if detached:
        shown["message"] += " It was detached: its result will come as a toolCallFinished message."
        shown["detached"] = detached if isinstance(detached, str) else "detached"
    return json.dumps(shown)


def openai_messages(document: dict[str, Any], system_prompt: str) -> list[dict[str, Any]]:
    """The chat-completions ``messages`` for a session (docs/sessions.md §3.3).

    Turns are replayed oldest first. A user turn yields its tool messages (exactly one per call
    of the LLM turn before it), then a user message with the media those calls returned (if any),
    then its user message, so the provider always sees every tool call answered before any new
    user text.

    Args:
        document: the session document.
        system_prompt: the system message text (the agent's current prompt).
    Returns:
        A list of OpenAI chat messages, the system message first.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for turn in reversed(document.get("turns") or []):
        tag = turn.get("tag")
        contents = turn.get("contents") or {}
        if tag == "LlmTurn":
            message: dict[str, Any] = {"role": "assistant", "content": response_text(contents)}
            calls = tool_calls_of(contents)
            if calls:
                message["tool_calls"] = [_clean_call(c) for c in calls]
            messages.append(message)
            continue
        answered: list[tuple[dict[str, Any], Any]] = []
        if tag == "UserTurn":
            for call, response in contents.get("userToolResponses") or []:
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": render_tool_response(response)}
                )
                answered.append((call, response))
        elif tag == "PartialUserTurn":
            for tc in tracked_calls(turn):
                final = tc["tcState"] in FINAL_STATES
                content = (
                    render_tool_response(tc["tcResult"]) if final else placeholder(tc["tcCall"], tc.get("tcDetached"))
                )
                messages.append({"role": "tool", "tool_call_id": tc["tcCall"].get("id"), "content": content})
                if final:
                    answered.append((tc["tcCall"], tc["tcResult"]))
        media_message = _tool_media_message(answered)
        if media_message is not None:
            messages.append(media_message)
        query = contents.get("userQuery")
        if query is not None and query != "":
            messages.append({"role": "user", "content": _query_content(query)})
    return messages


def media_from_api(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Convert HTTP ``media`` items (``mime``/``base64``/``filename``) to document keys (docs/sessions.md §1.8)."""
    converted = []
    for item in items:
        media = {"mimeType": item["mime"], "base64Data": item["base64"]}
        if item.get("filename") is not None:
            media["filename"] = item["filename"]
        converted.append(media)
    return converted


def apply_result(document: dict[str, Any], token: str, response: Any) -> dict[str, Any] | None:
    """Write a deferred call's result into the head partial turn (docs/sessions.md §5).

    Returns:
        The new document (the head closed into a full ``UserTurn`` once every call is final), or
        ``None`` when the head holds no deferred call with that token.
    """
    turn = head(document)
    if turn is None or turn.get("tag") != "PartialUserTurn":
        return None
    updated = current_partial(turn)
    for tc in tracked_calls(updated):
        if tc.get("tcContinuation") == token and tc["tcState"] == "Deferred":
            tc["tcState"] = "Completed"
            tc["tcResult"] = response
            break
    else:
        return None
    turn = close_partial(updated) if all_final(updated) else updated
    return replace_head(document, turn)
