"""``--isolate-tools``: bash and MCP tool calls run by a worker outside the server (docs/guide-toolboxes.md §5).

With ``AGENTS_ISOLATE_TOOLS`` set (``docker:IMAGE`` or ``process:PATH``), every call of a bash or
MCP tool that gets executed, whatever its disposition, goes to the worker: one JSON envelope on
its stdin, one result envelope expected on its stdout. There is no fall-back to running the tool
here: a worker that cannot start, exits non-zero, prints something that is not a result envelope
for this call (a token mismatch included) or reports an error gives the result ``isolation
error: ...``. A bash or MCP tool called from another tool (the Lua portal) is refused.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import jiter
from django.conf import settings

from foundation.errors import ApiError
from foundation.isolation import IsolationSpec
from foundation.toolenv import base_environment
from sessions_app.values import normalize_tool_result
from tools_app.base import Tool, ToolContext, ToolLookup, ToolResult, cap_result
from tools_app.bash.process import run_process, tail_text
from tools_app.bash.tool import BashTool
from tools_app.mcp.toolbox import McpTool

#: The most bytes of a worker's answer read (on top of the tool output cap: the envelope's own).
ENVELOPE_OVERHEAD_BYTES = 64 * 1024
#: The longest media type a dropped result's error names (RFC 6838 allows 127 + 1 + 127).
_MIME_TYPE_MAX = 255


def configured() -> str:
    """The server's ``--isolate-tools`` value (``AGENTS_ISOLATE_TOOLS``), ``""`` when off."""
    return str(settings.AGENTS.get("ISOLATE_TOOLS") or "")


def _kind_of(tool: Tool) -> Tool:
    # a bound tool wraps the tool of its kind
    while hasattr(tool, "inner") and isinstance(tool.inner, Tool):
        tool = tool.inner
    return tool


def applies(tool: Tool) -> bool:
    """Whether a call of ``tool`` goes to the isolation worker: isolation is on and the tool is a
    bash or MCP tool (bound or not)."""
    return bool(configured()) and isinstance(_kind_of(tool), BashTool | McpTool)


def _failure(text: str) -> ToolResult:
    return ToolResult.error(f"isolation error: {text}")


def run(call: dict[str, Any], context: ToolContext) -> ToolResult:
    """Send one call to the worker and read its answer.

    Args:
        call: the model's tool call (OpenAI shape), sent as it is.
        context: the call's context: its session id, its non-secret parameter values (secret ones
            are never written), its timeout, cancel flag and output cap.
    Returns:
        The worker's result (capped like any tool's), or an ``isolation error: ...`` result.
    """
    try:
        spec = IsolationSpec.parse(configured())
    except ValueError as error:
        return _failure(str(error))
    token = str(uuid.uuid4())
    params = {name: value.value for name, value in context.params.items() if not value.secret}
    envelope = {
        "token": token,
        "toolCall": call,
        "contextSnapshot": {"tecsSessionId": context.session_id, "tecsParams": params},
        "policy": spec.policy(),
    }
    try:
        outcome = run_process(
            spec.argv(),
            stdin_data=json.dumps(envelope).encode(),
            env=base_environment(),
            timeout=context.timeout,
            max_stdout=context.output_max_bytes + ENVELOPE_OVERHEAD_BYTES,
            cancel=context.cancel,
        )
    except (OSError, ValueError) as error:
        return _failure(f"the worker could not start: {error}")
    if outcome.cancelled:
        return _failure("the call was cancelled")
    if outcome.timed_out:
        return _failure(f"the worker did not answer within {context.timeout:g} s")
    if outcome.returncode != 0:
        return _failure(f"the worker exited with {outcome.returncode}: {tail_text(outcome.stderr)}")
    name = (call.get("function") or {}).get("name") or ""
    return _answer(bytes(outcome.stdout), outcome.stdout_bytes, token, context, name)


def _answer(stdout: bytes, printed: int, token: str, context: ToolContext, name: str) -> ToolResult:
    """The result a worker's answer gives, capped like any tool's output (docs/guide-toolboxes.md §5;
    :func:`tools_app.base.cap_result`).

    Args:
        stdout: the answer as read: at most the output cap plus ``ENVELOPE_OVERHEAD_BYTES``.
        printed: how many bytes the worker printed in all; more than ``len(stdout)`` when the
            answer was too long to keep whole.
        token, context, name: the call's token, context and tool name.
    Returns:
        The result, or an ``isolation error: ...`` result. A too long answer is read as far as it
        was kept (its last value cut short, as a cut tool output is), so its token and status
        must come before its result; its text is then cut to the cap, the note counting
        ``printed`` bytes, and a media or mixed result is dropped with an error.
    """
    whole = printed <= len(stdout)
    try:
        answer = json.loads(stdout) if whole else _kept_part(stdout)
    except ValueError:
        return _failure(f"the worker's output is not JSON: {tail_text(stdout)}")
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        too_long = "" if whole else f" before the first {len(stdout)} of its {printed} bytes"
        return _failure(f'the worker did not answer a result envelope ({{"token", "status", ...}}){too_long}')
    if answer.get("token") != token:
        return _failure(f"the worker answered for token {answer.get('token')!r}, not this call's")
    full_bytes = None if whole else printed
    if answer["status"] == "error":
        failure = _failure(str(answer.get("error") or "the worker reported an error"))
        return cap_result(replace(failure, full_bytes=full_bytes), context.output_max_bytes, name)
    result = answer.get("result")
    if not whole and isinstance(result, dict) and result.get("type") in ("media", "mixed"):
        # cut binary data is useless (and no longer valid base64): dropped as any tool's is
        mime = result.get("mimeType")
        named = {"mimeType": mime} if isinstance(mime, str) and len(mime) <= _MIME_TYPE_MAX else {}
        dropped = ToolResult({"type": result["type"], **named}, full_bytes=printed)
        return cap_result(dropped, context.output_max_bytes, name)
    try:
        response = normalize_tool_result(result)
    except ApiError as error:
        return _failure(f"the worker's result is not a tool result: {error.message}")
    return cap_result(ToolResult(response, full_bytes=full_bytes), context.output_max_bytes, name)


def _kept_part(stdout: bytes) -> Any:
    """The JSON value the first bytes of a too long answer begin, its last string cut where the
    bytes end (jiter's partial mode). Raises ValueError when those bytes do not begin one."""
    return jiter.from_json(stdout, partial_mode="trailing-strings")


class _PortalGuard:
    """The tools a tool may call (the Lua portal) under isolation: bash and MCP ones refused."""

    def __init__(self, tools: ToolLookup) -> None:
        self.tools = tools

    def get(self, wire_name: str) -> Tool | None:
        tool = self.tools.get(wire_name)
        return _Refused(tool) if tool is not None and applies(tool) else tool


class _Refused(Tool):
    def __init__(self, tool: Tool) -> None:
        self.name, self.description, self.parameters = tool.name, tool.description, tool.parameters

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return _failure(f"{self.name} runs only in the isolation worker, never from another tool")


def guard(context: ToolContext) -> ToolContext:
    """``context`` for a tool running in the server: under isolation, the tools it may call
    (``context.tools``) refuse bash and MCP tools."""
    if not configured() or context.tools is None:
        return context
    return replace(context, tools=_PortalGuard(context.tools))
