"""The System capabilities that send mail between sessions (docs/guide-sessions.md §3).

They go through ``ToolContext.sessions`` (``tools_app.ports.MailPort``), bound by the sessions
app to the calling session, so they behave the same from any worker.

* ``send-message {to, text, in_reply_to?, expects_reply?, interrupt?}``: mail another session;
  the answer is the receipt and the recipient's status.
* ``spawn-session {agent, message}``: start a child session of one of the caller's helpers; it
  outlives the call and answers by mail.
* ``watch-session {session, events?, tool?, ttl_seconds?}`` / ``unwatch-session {session}``:
  have another session's events forwarded as ``watchedEvent`` mail.
* ``wait {for?, timeout_seconds?}``: block until mail is waiting (``"mail"``, the default), a
  named call is final (a list of ids) or any background call is (``"any-call"``); capped by the
  agent's ``maxWaitSeconds``. It never consumes the mail: the next turn carries it.

A refusal (``unknown_recipient``, ``not_permitted``, ``too_many_hops``, ``mailbox_full``) is an
error result naming the code, so the model can tell them apart.
"""

from __future__ import annotations

from typing import Any, Literal

from ..base import ToolContext
from ..ports import SendRefused, ToolCallNotFound
from .introspection import CapabilityError, _number, _text

#: Capabilities this module answers.
CAPABILITIES = frozenset({"send-message", "spawn-session", "watch-session", "unwatch-session", "wait"})
#: A watch's life when ``ttl_seconds`` is not given (seconds).
DEFAULT_WATCH_TTL = 600.0
#: What ``wait`` waits for when ``for`` is not given.
DEFAULT_WAIT_FOR = "mail"
#: How long ``wait`` waits when ``timeout_seconds`` is not given (seconds; capped by maxWaitSeconds).
DEFAULT_WAIT_SECONDS = 30.0

_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_SESSION = {**_STR, "description": "watch-session / unwatch-session: the watched session's id"}
ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "send-message": {
        "to": {**_STR, "description": "send-message: the recipient session's id"},
        "text": {**_STR, "description": "send-message: the message"},
        "in_reply_to": {**_STR, "description": "send-message: the id of the mail this answers"},
        "expects_reply": {**_BOOL, "description": "send-message: ask for an answer (false)"},
        "interrupt": {**_BOOL, "description": "send-message: interrupt the recipient (false)"},
    },
    "spawn-session": {
        "agent": {**_STR, "description": "spawn-session: the helper agent's slug"},
        "message": {**_STR, "description": "spawn-session: its first message"},
    },
    "watch-session": {
        "session": _SESSION,
        "events": {
            "type": "array",
            "items": _STR,
            "description": "watch-session: event kinds to forward (run.stopped)",
        },
        "tool": {**_STR, "description": "watch-session: only tool events of tools matching this glob"},
        "ttl_seconds": {"type": "number", "description": "watch-session: how long the watch lasts (600)"},
    },
    "unwatch-session": {"session": _SESSION},
    "wait": {
        "for": {
            "description": 'wait: "mail" (default), "any-call", or a list of tool call ids',
            "anyOf": [_STR, {"type": "array", "items": _STR}],
        },
        "timeout_seconds": {"type": "number", "description": "wait: the most seconds to wait (30)"},
    },
}


def run(capability: str, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Answer one of this module's capabilities (the ``data`` of the System answer).

    Raises:
        CapabilityError: no session store, a missing or ill-typed argument, or a refusal
            (its text starts with the refusal's code).
    """
    port = ctx.sessions
    if port is None:
        raise CapabilityError(f"{capability} needs a session store, and this call has none")
    try:
        if capability == "send-message":
            return port.send_message(
                _text(arguments, "to"),
                _text(arguments, "text"),
                in_reply_to=_optional_text(arguments, "in_reply_to"),
                expects_reply=_flag(arguments, "expects_reply"),
                interrupt=_flag(arguments, "interrupt"),
            )
        if capability == "spawn-session":
            return port.spawn_session(_text(arguments, "agent"), _text(arguments, "message"))
        if capability == "watch-session":
            events = arguments.get("events", ["run.stopped"])
            if not isinstance(events, list) or not events or not all(isinstance(e, str) and e for e in events):
                raise CapabilityError('"events" must be a non-empty list of event kinds')
            ttl = _number(arguments, "ttl_seconds", DEFAULT_WATCH_TTL)
            return port.watch_session(_text(arguments, "session"), events, _optional_text(arguments, "tool"), ttl)
        if capability == "unwatch-session":
            return port.unwatch_session(_text(arguments, "session"))
        return _wait(arguments, ctx)
    except SendRefused as refused:
        raise CapabilityError(f"{refused.code}: {refused.message}") from None


def _wait(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    assert ctx.sessions is not None  # noqa: S101 - narrows the type (never checks input)
    wanted = arguments.get("for", DEFAULT_WAIT_FOR)
    calls: list[str] | Literal["any-call"] | None
    if wanted == "mail":
        calls = None
    elif wanted == "any-call":
        calls = "any-call"
    elif isinstance(wanted, list) and wanted and all(isinstance(i, str) and i for i in wanted):
        calls = list(wanted)
    else:
        raise CapabilityError('"for" must be "mail", "any-call" or a non-empty list of tool call ids')
    timeout = _number(arguments, "timeout_seconds", DEFAULT_WAIT_SECONDS)
    if ctx.timeout is not None:
        timeout = min(timeout, ctx.timeout)
    try:
        outcome = ctx.sessions.wait(calls, timeout, ctx.cancel)
    except ToolCallNotFound as missing:
        raise CapabilityError(f"no tool call {missing} in this session") from None
    answer: dict[str, Any] = {"woken_by": outcome.woken_by, "unread": outcome.unread}
    if outcome.tool_call_id is not None:
        answer["tool_call_id"] = outcome.tool_call_id
    return answer


def _optional_text(arguments: dict[str, Any], key: str) -> str | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise CapabilityError(f'"{key}" must be a non-empty string')
    return value


def _flag(arguments: dict[str, Any], key: str) -> bool:
    value = arguments.get(key, False)
    if not isinstance(value, bool):
        raise CapabilityError(f'"{key}" must be true or false')
    return value
