"""The shape every tool kind produces (docs/tools.md §1).

A :class:`Tool` is what the session engine sees: a wire name, a description and a JSON schema to
declare it to the LLM, and :meth:`Tool.call` to run it. Every toolbox kind (bash, the built-in
toolboxes, MCP, OpenAPI, PostgREST, skills, sub-agents) is a factory of such objects, and
policies, bindings or async execution wrap :meth:`Tool.call` rather than the toolbox.

The output cap (docs/tools.md §4) lives here so that every tool kind gets it: a tool kind
implements :meth:`Tool.run`, and :meth:`Tool.call` runs it and passes the result through
:func:`cap_result` (at most ``ToolContext.output_max_bytes``, ``AGENTS_TOOL_OUTPUT_MAX_BYTES``,
1 MiB by default). Text over the cap is cut and ends with ``[output truncated: N of M bytes
kept]``; a structured result that cannot be cut is replaced by an error text. A tool that reads
its output from somewhere (a process, a socket) should stop keeping it at the cap as well and say
how much there was in ``ToolResult.full_bytes``; the bash tools do.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings

from agentfiles.parameters import ParamValue

if TYPE_CHECKING:
    from .ports import SessionsPort

#: JSON-schema ``type`` → agents-exe ``ParamType`` tag, for :meth:`Tool.system_properties`.
_SCALAR_PARAM_TYPES = {
    "string": "StringParamType",
    "number": "NumberParamType",
    "integer": "NumberParamType",
    "boolean": "BoolParamType",
    "null": "NullParamType",
}


def configured_output_max_bytes() -> int:
    """The most bytes a tool call may return: ``settings.AGENTS["TOOL_OUTPUT_MAX_BYTES"]``
    (environment ``AGENTS_TOOL_OUTPUT_MAX_BYTES``, 1 MiB by default)."""
    return int(settings.AGENTS["TOOL_OUTPUT_MAX_BYTES"])


@dataclass
class ToolContext:
    """Per-call values handed to :meth:`Tool.call` (docs/tools.md §1.2).

    Attributes:
        session_id, conversation_id, turn_id: identifiers of the calling session (UUID strings).
        agent_slug: slug of the agent whose LLM made the call (exported as ``AGENT_AGENT_ID``).
        tool_call_id: the provider's call id (``call_...``).
        timeout: wall-clock limit for the call in seconds; ``None`` means no limit.
        session_json: the whole session document as JSON text, only when the caller opted in
            to give the full session to tools; ``None`` otherwise.
        cancel: optional event; setting it stops a running call as a timeout does (the call then
            returns an error result saying it was cancelled). ``None`` means not cancellable.
        output_max_bytes: the most bytes the call may return (see :func:`cap_result`); by
            default :func:`configured_output_max_bytes`.
        sessions: the sessions and tool calls the call may look at (``tools_app.ports``),
            bound to the calling session; ``None`` where there is no session store.
        tools: the agent's tools by wire name, for a tool that calls other tools (the Lua
            portal); ``None`` for a call made through the portal, so portals never nest.
        progress: optional; told ``(progress, total, message)`` as a tool reports progress (MCP
            tools), in the thread that called :meth:`Tool.call`, before the call returns.
        output: optional; told ``(stream, line, lines, bytes)`` as a bash tool prints: the newest
            line of ``stdout`` or ``stderr`` and that stream's totals so far, at most twice a second
            per stream (``tools_app.bash.progress``), in the thread that called :meth:`Tool.call`.
        params: the calling agent's parameter values, resolved for this call (docs/tools.md §8):
            the bindings of ``tools_app.bound`` read them; nothing else does.
        inherited_bindings: call-time bindings the caller's own caller addressed below it
            (``agentfiles.bindings.ScopedBinding``), for the tools that describe or prompt helpers.
    """

    session_id: str
    conversation_id: str
    turn_id: str
    agent_slug: str
    tool_call_id: str
    timeout: float | None
    session_json: str | None = None
    cancel: threading.Event | None = None
    output_max_bytes: int = field(default_factory=configured_output_max_bytes)
    sessions: SessionsPort | None = None
    tools: ToolLookup | None = None
    progress: Callable[[float, float | None, str | None], None] | None = None
    output: Callable[[str, str, int, int], None] | None = None
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    inherited_bindings: tuple[Any, ...] = ()


#: Parameter values that decide which bound arguments a session's model sees (docs/tools.md §8.2).
VisibleParams = Mapping[str, ParamValue] | None


class ToolLookup(Protocol):
    """An agent's tools by wire name (``tools_app.toolset.ToolSet`` is one)."""

    def get(self, wire_name: str) -> Tool | None:
        """The tool called ``wire_name``, ``None`` when there is none."""
        ...


@dataclass
class ToolResult:
    """The outcome of one tool call.

    Attributes:
        response: a ``UserToolResponse`` in session-document JSON (docs/sessions.md §1.5): a
            ``str`` for text; ``{"type": "json", "content": ...}``; ``{"type": "media",
            "mimeType", "base64Data", "filename"?}``; ``{"type": "mixed", "parts": [...]}``.
        is_error: ``True`` when the call failed; ``response`` then holds the text the LLM sees
            (``"Error: ..."``). There is no error variant in the session document, so the flag is
            only for callers (events, logs, status).
        full_bytes: set by a tool that stopped keeping its output at the cap while reading it:
            how many bytes there were in all (``response`` then holds only part of them);
            ``None`` when ``response`` is the whole output.
    """

    response: Any
    is_error: bool = False
    full_bytes: int | None = None

    @classmethod
    def error(cls, text: str) -> ToolResult:
        """A failed call whose ``text`` is shown to the LLM."""
        return cls(response=text, is_error=True)


class Tool(ABC):
    """A tool the LLM can call.

    Subclasses set ``name`` (the wire name sent to the LLM, e.g. ``bash_read-file``),
    ``description`` and ``parameters`` (a JSON schema
    ``{"type": "object", "properties": {...}, "required": [...]}``) and implement :meth:`run`.
    They may not override :meth:`call`, which applies the output cap to every tool kind.

    Raises (on subclassing):
        TypeError: the subclass defines ``call``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    #: Whether a call may run again when a crash left it unknown whether it ran; a tool that
    #: changes the world leaves it false (docs/tools.md §5.4).
    safe_to_retry: bool = False
    #: What must be open in the session for the model to see the tool (``tools_app.activation``):
    #: ``group:<G>`` for an on-demand toolbox, ``skill:<name>`` for a skill's script; ``None``: always.
    gate: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "call" in cls.__dict__:
            raise TypeError(f"{cls.__name__} overrides Tool.call; implement run() so that the output cap applies")

    @property
    def original_name(self) -> str:
        """The name before LLM-name normalization (names.py); ``name`` unless a subclass knows better."""
        return self.name

    def schema_for(self, params: VisibleParams = None) -> dict[str, Any]:
        """The JSON schema the model sees; ``params`` are the session's values, which hide the
        arguments a binding exposes only while unbound (``tools_app.bound``). Others: ``parameters``."""
        return self.parameters

    def openai_tool(self, params: VisibleParams = None) -> dict[str, Any]:
        """The OpenAI chat-completions declaration:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema_for(params),
            },
        }

    def system_properties(self, params: VisibleParams = None) -> list[dict[str, Any]]:
        """The agents-exe ``ParamProperty`` list describing the parameters (docs/tools.md §1.4).

        The default derives it from the JSON schema; tool kinds whose agents-exe encoding differs
        (bash tools use ``OpaqueParamType``) override this.
        """
        schema = self.schema_for(params)
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        return [
            {
                "propertyDescription": schema.get("description", ""),
                "propertyKey": key,
                "propertyRequired": key in required,
                "propertyType": json_schema_param_type(schema),
            }
            for key, schema in props.items()
        ]

    def system_tool(self, params: VisibleParams = None) -> dict[str, Any]:
        """The entry stored in a session's ``userTools``, as agents-exe writes it:
        ``{"tag": "V1", "contents": {"description", "llmName", "name", "properties", "raw"}}``
        where ``raw`` is :meth:`openai_tool`."""
        return {
            "tag": "V1",
            "contents": {
                "description": self.description,
                "llmName": self.name,
                "name": self.name,
                "properties": self.system_properties(params),
                "raw": self.openai_tool(params),
            },
        }

    def gate_switch(self, arguments: Mapping[str, Any]) -> tuple[str, bool] | None:
        """The gate a successful call with ``arguments`` opens (``(gate, True)``) or closes
        (``(gate, False)``), ``None`` for a tool that switches nothing (``tools_app.activation``)."""
        return None

    def bound_value_problem(self, arg: str, value: Any) -> str | None:
        """Why ``value`` cannot be bound to argument ``arg`` (a bash tool takes no object), or
        ``None``; the text names the argument, never the value (docs/tools.md §8.3)."""
        return None

    def secret_transport_problem(self, arg: str) -> str | None:
        """Why a secret cannot be bound to ``arg`` (a bash argument on the command line would show
        in ``ps``), or ``None`` (docs/tools.md §8.3)."""
        return None

    def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the tool (:meth:`run`) and cap its result at ``ctx.output_max_bytes`` bytes
        (:func:`cap_result`). Raises only what :meth:`run` raises."""
        return cap_result(self.run(arguments, ctx), ctx.output_max_bytes, self.name)

    @abstractmethod
    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the tool with the LLM's decoded ``arguments``; what each tool kind implements.

        Must not raise for tool failures (bad arguments, crash, non-zero exit, timeout): it
        returns ``ToolResult(is_error=True)`` with a text the LLM can act on instead. Should not
        hold much more than ``ctx.output_max_bytes`` of output (see ``ToolResult.full_bytes``).
        """


def json_schema_param_type(schema: dict[str, Any]) -> dict[str, Any]:
    """Map one JSON-schema property to an agents-exe ``ParamType`` (docs/tools.md §1.4)."""
    if "enum" in schema:
        return {"tag": "EnumParamType", "contents": [str(v) for v in schema["enum"]]}
    kind = schema.get("type")
    if kind in _SCALAR_PARAM_TYPES:
        return {"tag": _SCALAR_PARAM_TYPES[kind]}
    if kind == "array":
        items = schema.get("items") or {}
        return {"tag": "MultipleParamType", "contents": str(items.get("type", "string"))}
    if kind == "object":
        required = set(schema.get("required") or [])
        return {
            "tag": "ObjectParamType",
            "contents": [
                {
                    "propertyDescription": sub.get("description", ""),
                    "propertyKey": key,
                    "propertyRequired": key in required,
                    "propertyType": json_schema_param_type(sub),
                }
                for key, sub in (schema.get("properties") or {}).items()
            ],
        }
    return {"tag": "OpaqueParamType", "contents": str(kind) if kind is not None else "any"}


def _utf8(text: str) -> bytes:
    # surrogatepass: a lone surrogate must not make measuring a result fail.
    return text.encode("utf-8", errors="surrogatepass")


def response_bytes(response: Any) -> int:
    """The size of a tool response in bytes: its UTF-8 text for a string, its compact JSON for
    a structured response (``{"type": "json" | "media" | "mixed", ...}``)."""
    if isinstance(response, str):
        return len(_utf8(response))
    return len(_utf8(json.dumps(response, ensure_ascii=False, separators=(",", ":"))))


def truncate_text(text: str, total: int, limit: int) -> str:
    """``text`` cut so that, with the note ``"\\n[output truncated: N of M bytes kept]"``
    appended (``N`` bytes kept out of ``total``), it holds at most ``limit`` bytes.

    The cut falls between characters, never inside one. When ``limit`` is smaller than the note,
    the result is the note alone (and so a little over ``limit``).
    """
    data = _utf8(text)
    budget = max(0, limit - len(f"\n[output truncated: {limit} of {total} bytes kept]"))
    keep = min(budget, len(data))
    while keep and keep < len(data) and data[keep] & 0xC0 == 0x80:
        keep -= 1  # a UTF-8 continuation byte: step back to the start of that character
    kept = str(memoryview(data)[:keep], "utf-8", "surrogatepass")
    return kept + f"\n[output truncated: {keep} of {total} bytes kept]"


def cap_result(result: ToolResult, limit: int, tool_name: str) -> ToolResult:
    """Hold ``result`` to ``limit`` bytes, as :meth:`Tool.call` does for every tool kind.

    Args:
        result: what the tool returned.
        limit: the most bytes the response may take (:func:`response_bytes`).
        tool_name: the tool's wire name, for the error text.
    Returns:
        ``result`` itself when it is whole and within ``limit``; otherwise text cut by
        :func:`truncate_text` (a ``{"type": "json"}`` response becomes its JSON text, cut), and
        for any other structured response (media, mixed) an error result saying it was
        dropped, since cut binary data is useless. ``is_error`` is kept for cut text.
    """
    response = result.response
    if result.full_bytes is None and response_bytes(response) <= limit:
        return result
    if isinstance(response, dict) and response.get("type") == "json":
        response = json.dumps(response.get("content"), ensure_ascii=False)
    size = response_bytes(response)
    # The whole output's size: what the tool counted when it stopped keeping it, if it did.
    total = size if result.full_bytes is None else result.full_bytes
    if isinstance(response, str):
        # max: decoding may have made the kept part a little larger (invalid UTF-8 replaced)
        return ToolResult(truncate_text(response, max(total, size), limit), is_error=result.is_error)
    kind = response.get("type") if isinstance(response, dict) else type(response).__name__
    if isinstance(response, dict) and response.get("mimeType"):
        kind = f"{kind}, {response['mimeType']}"
    return ToolResult.error(
        f"Error: tool {tool_name} returned {total} bytes ({kind}), more than the {limit} bytes "
        "a tool's output may take; it was dropped"
    )
