"""The kinds of events and the payload each one carries (docs/guide-sessions.md §4).

A payload is what an event's ``data`` holds besides ``kind``, ``seq``, ``session_id`` and
``owner``. Payloads are bounded: large tool results and turns are summarised with their size,
and read whole from the session. Kept apart from ``sessions_app.events`` (which stores them) so that the step engine
can name tool events without importing storage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from agentfiles.document import render_tool_response


class EventKind(StrEnum):
    """Every event kind this server emits."""

    SESSION_CREATED = "session.created"
    SESSION_UPDATED = "session.updated"
    SESSION_FAILED = "session.failed"
    SESSION_DELETED = "session.deleted"
    RUN_STARTED = "run.started"
    RUN_STOPPED = "run.stopped"
    CALLS_DEFERRED = "calls.deferred"
    TOOL_STARTED = "tool.started"
    TOOL_PROGRESSED = "tool.progressed"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    TEXT_DELTA = "text.delta"
    SUBCALL_STARTED = "subcall.started"
    SUBCALL_COMPLETED = "subcall.completed"
    SUBCALL_FAILED = "subcall.failed"


class SessionMeta(TypedDict):
    """``session.created``: the SessionMetaView of the new session."""

    session_id: str
    agent: str
    parent_session_id: str | None
    owner: str | None
    status: str
    status_detail: str | None
    version: int
    created_at: str
    updated_at: str
    sealed: bool
    params: dict[str, Any]


class SessionUpdated(SessionMeta):
    """``session.updated``: the SessionMetaView of the stored version and its newest turn (its large
    values summarised: :func:`bounded_turn`)."""

    head_turn: dict[str, Any] | None


class SessionFailed(TypedDict):
    """``session.failed``: why the run failed (also the session's ``status_detail``)."""

    message: str | None


class SessionDeleted(TypedDict):
    """``session.deleted``: nothing beyond the session id."""


class RunStarted(TypedDict):
    """``run.started``: ``step`` or ``until_blocked`` (``Session.RunMode``)."""

    mode: str


class RunStopped(TypedDict):
    """``run.stopped``: the status the session was stored with."""

    status: str


class CallsDeferred(TypedDict):
    """``calls.deferred``: the DeferredCallViews of the calls a step deferred."""

    calls: list[dict[str, Any]]


class ToolStarted(TypedDict):
    """``tool.started``: a call the step runs now."""

    tool_call_id: str
    tool: str


class ToolProgressed(TypedDict):
    """``tool.progressed``: a running call reported progress.

    An MCP server's ``notifications/progress`` gives ``progress``, ``total`` (when known) and
    ``message``; a bash tool's output gives ``stream`` (``stdout`` or ``stderr``), its latest
    ``line``, and the ``lines`` and ``bytes`` printed on that stream so far (docs/tools.md §3.4).
    """

    tool_call_id: str
    tool: str
    progress: NotRequired[float]
    total: NotRequired[float | None]
    message: NotRequired[str | None]
    stream: NotRequired[str]
    line: NotRequired[str]
    lines: NotRequired[int]
    bytes: NotRequired[int]


#: ``ToolContext.progress`` and ``ToolContext.output`` (``tools_app.base``).
ProgressFn = Callable[[float, float | None, str | None], None]
OutputFn = Callable[[str, str, int, int], None]


def progress_reporters(
    tool_call_id: str, tool: str, sink: Callable[[ToolProgressed], None]
) -> tuple[ProgressFn, OutputFn]:
    """The ``progress`` (MCP) and ``output`` (bash lines) callbacks of one call's ToolContext.

    Both hand ``sink`` a ``tool.progressed`` payload for call ``tool_call_id`` (the provider's id)
    of tool ``tool`` (its wire name).
    """

    def progress(value: float, total: float | None, message: str | None) -> None:
        sink(ToolProgressed(tool_call_id=tool_call_id, tool=tool, progress=value, total=total, message=message))

    def output(stream: str, line: str, lines: int, size: int) -> None:
        sink(ToolProgressed(tool_call_id=tool_call_id, tool=tool, stream=stream, line=line, lines=lines, bytes=size))

    return progress, output


class ToolFinished(TypedDict):
    """``tool.completed`` / ``tool.failed``: its outcome (``completed`` or ``failed``) and result
    (summarised with its size when large: :func:`bounded`)."""

    tool_call_id: str
    tool: str
    status: str
    result: Any


class TextDelta(TypedDict):
    """``text.delta``: a piece of the model's text as it streams (``--stream-tokens``)."""

    text: str


class SubcallStarted(TypedDict):
    """``subcall.started``: a helper call became a child session."""

    child_session_id: str
    slug: str
    depth: int
    tool_call_id: str


class SubcallCompleted(TypedDict):
    """``subcall.completed``: the child's final answer, given to the parent's call (summarised with
    its size when large: :func:`bounded`)."""

    child_session_id: str
    result: Any


class SubcallFailed(TypedDict):
    """``subcall.failed``: the child failed or was cancelled."""

    child_session_id: str
    message: str | None


# --- bounded payloads ---------------------------------------------------------------------------

#: Characters of a summarised value's text kept in its ``preview``.
PREVIEW_CHARACTERS = 512


def value_bytes(value: Any) -> int:
    """The size of a JSON value in bytes: UTF-8 text for a string, else its compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", errors="surrogatepass"))


def bounded(value: Any, limit: int) -> Any:
    """A tool result or user query as an event carries it (docs/api.md §9.6).

    Returns:
        ``value`` itself when it takes at most ``limit`` bytes; otherwise ``{"omitted": true,
        "bytes": N, "preview": TEXT}``: its size and the start of the text the model reads of it
        (a media result's label). The whole value is read from the session.
    """
    size = value_bytes(value)
    if size <= limit:
        return value
    text = value if isinstance(value, str) else render_tool_response(value)
    return {"omitted": True, "bytes": size, "preview": text[:PREVIEW_CHARACTERS]}


def bounded_turn(turn: dict[str, Any] | None, limit: int) -> dict[str, Any] | None:
    """A head turn as ``session.updated`` carries it (docs/api.md §9.6).

    Its tool responses (``userToolResponses``, ``trackedCalls``' ``tcResult``) and its
    ``userQuery`` pass through :func:`bounded`; a turn still over eight times ``limit`` after
    that (a huge answer, a great many calls) becomes ``{"tag", "omitted": true, "bytes": N}``.
    The turn given is not changed.
    """
    if turn is None or value_bytes(turn) <= limit:
        return turn
    contents = dict(turn.get("contents") or {})
    if "userQuery" in contents:
        contents["userQuery"] = bounded(contents["userQuery"], limit)
    if isinstance(contents.get("userToolResponses"), list):
        contents["userToolResponses"] = [
            [pair[0], bounded(pair[1], limit)] if isinstance(pair, list) and len(pair) == 2 else pair
            for pair in contents["userToolResponses"]
        ]
    if isinstance(contents.get("trackedCalls"), list):
        contents["trackedCalls"] = [
            {**tc, "tcResult": bounded(tc.get("tcResult"), limit)} if isinstance(tc, dict) else tc
            for tc in contents["trackedCalls"]
        ]
    shown = {**turn, "contents": contents}
    size = value_bytes(shown)
    if size > 8 * limit:
        return {"tag": turn.get("tag"), "omitted": True, "bytes": value_bytes(turn)}
    return shown


#: The payload type of each kind.
PAYLOADS: dict[EventKind, type] = {
    EventKind.SESSION_CREATED: SessionMeta,
    EventKind.SESSION_UPDATED: SessionUpdated,
    EventKind.SESSION_FAILED: SessionFailed,
    EventKind.SESSION_DELETED: SessionDeleted,
    EventKind.RUN_STARTED: RunStarted,
    EventKind.RUN_STOPPED: RunStopped,
    EventKind.CALLS_DEFERRED: CallsDeferred,
    EventKind.TOOL_STARTED: ToolStarted,
    EventKind.TOOL_PROGRESSED: ToolProgressed,
    EventKind.TOOL_COMPLETED: ToolFinished,
    EventKind.TOOL_FAILED: ToolFinished,
    EventKind.TEXT_DELTA: TextDelta,
    EventKind.SUBCALL_STARTED: SubcallStarted,
    EventKind.SUBCALL_COMPLETED: SubcallCompleted,
    EventKind.SUBCALL_FAILED: SubcallFailed,
}
