"""The shape every tool kind produces (spec/tools.md §0.2, §0.3, §0.6, §0.8).

A :class:`Tool` is what the session engine sees: a wire name, a description and a JSON schema to
declare it to the LLM, and :meth:`Tool.call` to run it. Every toolbox kind (bash today; MCP,
OpenAPI, sub-agents later) is a factory of such objects, and policies, bindings or async execution
wrap :meth:`Tool.call` rather than the toolbox.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

#: JSON-schema ``type`` → agents-exe ``ParamType`` tag, for :meth:`Tool.system_properties`.
_SCALAR_PARAM_TYPES = {
    "string": "StringParamType",
    "number": "NumberParamType",
    "integer": "NumberParamType",
    "boolean": "BoolParamType",
    "null": "NullParamType",
}


@dataclass
class ToolContext:
    """Per-call values handed to :meth:`Tool.call` (tools.md §0.8).

    Attributes:
        session_id, conversation_id, turn_id: identifiers of the calling session (UUID strings).
        agent_slug: slug of the agent whose LLM made the call (exported as ``AGENT_AGENT_ID``).
        tool_call_id: the provider's call id (``call_...``).
        timeout: wall-clock limit for the call in seconds; ``None`` means no limit.
        session_json: the whole session document as JSON text, only when the caller opted in
            to give the full session to tools; ``None`` otherwise.
        cancel: optional event; setting it stops a running call as a timeout does (the call then
            returns an error result saying it was cancelled). ``None`` means not cancellable.
    """

    session_id: str
    conversation_id: str
    turn_id: str
    agent_slug: str
    tool_call_id: str
    timeout: float | None
    session_json: str | None = None
    cancel: threading.Event | None = None


@dataclass
class ToolResult:
    """The outcome of one tool call.

    Attributes:
        response: a ``UserToolResponse`` in session-document JSON (sessions.md §1.6): a ``str`` for
            text; ``{"type": "json", "content": ...}``; ``{"type": "media", "mimeType",
            "base64Data", "filename"?}``; ``{"type": "mixed", "parts": [...]}``.
        is_error: ``True`` when the call failed; ``response`` then holds the text the LLM sees
            (``"Error: ..."``). There is no error variant in the session document, so the flag is
            only for callers (events, logs, status).
    """

    response: Any
    is_error: bool = False

    @classmethod
    def error(cls, text: str) -> ToolResult:
        """A failed call whose ``text`` is shown to the LLM."""
        return cls(response=text, is_error=True)


class Tool(ABC):
    """A tool the LLM can call.

    Subclasses set ``name`` (the wire name sent to the LLM, e.g. ``bash_read-file``),
    ``description`` and ``parameters`` (a JSON schema
    ``{"type": "object", "properties": {...}, "required": [...]}``) and implement :meth:`call`.
    """

    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def original_name(self) -> str:
        """The name before LLM-name normalization (names.py); ``name`` unless a subclass knows better."""
        return self.name

    def openai_tool(self) -> dict[str, Any]:
        """The OpenAI chat-completions declaration:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def system_properties(self) -> list[dict[str, Any]]:
        """The agents-exe ``ParamProperty`` list describing the parameters (tools.md §0.3).

        The default derives it from the JSON schema; tool kinds whose agents-exe encoding differs
        (bash tools use ``OpaqueParamType``) override this.
        """
        props = self.parameters.get("properties") or {}
        required = set(self.parameters.get("required") or [])
        return [
            {
                "propertyDescription": schema.get("description", ""),
                "propertyKey": key,
                "propertyRequired": key in required,
                "propertyType": json_schema_param_type(schema),
            }
            for key, schema in props.items()
        ]

    def system_tool(self) -> dict[str, Any]:
        """The entry stored in a session's ``userTools``, as agents-exe writes it:
        ``{"tag": "V1", "contents": {"description", "llmName", "name", "properties", "raw"}}``
        where ``raw`` is :meth:`openai_tool`."""
        return {
            "tag": "V1",
            "contents": {
                "description": self.description,
                "llmName": self.name,
                "name": self.name,
                "properties": self.system_properties(),
                "raw": self.openai_tool(),
            },
        }

    @abstractmethod
    def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the tool with the LLM's decoded ``arguments``.

        Must not raise for tool failures (bad arguments, crash, non-zero exit, timeout): it
        returns ``ToolResult(is_error=True)`` with a text the LLM can act on instead.
        """


def json_schema_param_type(schema: dict[str, Any]) -> dict[str, Any]:
    """Map one JSON-schema property to an agents-exe ``ParamType`` (tools.md §0.3)."""
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
