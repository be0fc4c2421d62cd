"""What the generated OpenAPI document cannot say by itself: the shapes of the JSON values the API
carries (the session document, tool results, mail, tool calls, dispositions, parameters) and the
two event streams, which are plain Django views rather than DRF ones.

:func:`complete_schema` is a drf-spectacular post-processing hook (``SPECTACULAR_SETTINGS``); the
serializers point at these components with ``$ref`` (``sessions_app.serializers``).
"""

from __future__ import annotations

from typing import Any

_ANY: dict[str, Any] = {}
_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": "string", "nullable": True}


def _tagged(tag: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object whose ``tag`` is ``tag``."""
    return {
        "type": "object",
        "properties": {"tag": {"type": "string", "enum": [tag]}, **properties},
        "required": ["tag", *(required or [])],
    }


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_MEDIA_PART = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["media"]},
        "mimeType": _STRING,
        "base64Data": {"type": "string", "format": "byte"},
        "filename": _STRING,
    },
    "required": ["type", "mimeType", "base64Data"],
}

COMPONENTS: dict[str, dict[str, Any]] = {
    "Params": {
        "type": "object",
        "description": "Parameter values by name (any JSON value; null clears a value where values are merged).",
        "additionalProperties": True,
    },
    "ToolCall": {
        "type": "object",
        "description": "An OpenAI tool call as the model sent it.",
        "properties": {
            "id": _STRING,
            "type": _STRING,
            "function": {
                "type": "object",
                "properties": {"name": _STRING, "arguments": _STRING},
                "required": ["name"],
            },
        },
        "required": ["function"],
    },
    "Disposition": {
        "type": "object",
        "description": "What the tool-call policy decided: runSync, runAsync, defer (with a reason), ...",
        "properties": {"tag": _STRING, "reason": _STRING},
        "required": ["tag"],
    },
    "ToolResult": {
        "description": (
            "A tool result: a string is a text result; otherwise an object typed text, json, media or mixed."
        ),
        "oneOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["text"]}, "content": _STRING},
                "required": ["type", "content"],
            },
            {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["json"]}, "content": _ANY},
                "required": ["type", "content"],
            },
            _MEDIA_PART,
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["mixed"]},
                    "parts": {
                        "type": "array",
                        "items": {
                            "oneOf": [
                                {
                                    "type": "object",
                                    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": _STRING},
                                    "required": ["type", "text"],
                                },
                                _MEDIA_PART,
                            ]
                        },
                    },
                },
                "required": ["type", "parts"],
            },
        ],
    },
    "MailBody": {
        "description": "A piece of mail, tagged by `tag`; clients post userMessage, agentMessage and control.",
        "oneOf": [
            _tagged("userMessage", {"query": _ANY}, ["query"]),
            _tagged(
                "agentMessage",
                {"text": _STRING, "inReplyTo": _NULLABLE_STRING, "expectsReply": {"type": "boolean"}},
                ["text"],
            ),
            _tagged(
                "control",
                {
                    "message": {
                        "type": "object",
                        "properties": {
                            "tag": {
                                "type": "string",
                                "enum": ["pause", "resume", "stopRun", "cancelAllAttached", "cancelCalls"],
                            },
                            "toolCallIds": {"type": "array", "items": _STRING},
                        },
                        "required": ["tag"],
                    }
                },
                ["message"],
            ),
            _tagged(
                "toolCallFinished",
                {
                    "toolCallId": _STRING,
                    "providerCallId": _STRING,
                    "tool": _STRING,
                    "state": {"type": "string", "enum": ["Completed", "Failed"]},
                    "result": _ANY,
                },
                ["toolCallId", "state"],
            ),
            _tagged("continuationResult", {}),
            _tagged("watchedEvent", {}),
        ],
    },
    "MailSender": {
        "description": "Who sent a piece of mail, tagged by `tag`.",
        "oneOf": [
            _tagged("user", {"owner": _NULLABLE_STRING}),
            _tagged("session", {"sessionId": _STRING, "agent": _STRING}, ["sessionId"]),
            _tagged("toolCall", {"toolCallId": _STRING}, ["toolCallId"]),
            _tagged("system", {"source": _STRING}),
        ],
    },
    "TrackedCall": {
        "type": "object",
        "description": "One call of a partial turn: its state, the call, and its result once final.",
        "properties": {
            "tcId": _STRING,
            "tcState": {"type": "string", "enum": ["Ready", "Running", "Deferred", "Completed", "Failed"]},
            "tcCall": _ref("ToolCall"),
            "tcResult": _ANY,
            "tcContinuation": _NULLABLE_STRING,
            "tcPolicy": _ANY,
        },
        "required": ["tcState", "tcCall"],
    },
    "UserTurn": _tagged(
        "UserTurn",
        {
            "contents": {
                "type": "object",
                "properties": {
                    "userPrompt": _STRING,
                    "userTools": {"type": "array", "items": _ANY},
                    "userQuery": {"description": "a string, null, or {text, media} when media is attached"},
                    "userToolResponses": {
                        "type": "array",
                        "description": "[call, response] pairs, one per call of the LLM turn before",
                        "items": {"type": "array", "items": _ANY},
                    },
                },
            },
            "byteUsage": {"type": "object"},
        },
        ["contents"],
    ),
    "LlmTurn": _tagged(
        "LlmTurn",
        {
            "contents": {
                "type": "object",
                "properties": {
                    "llmResponse": {
                        "description": "{rawResponse, responseText, responseThinking} (a string in older files)"
                    },
                    "llmToolCalls": {"type": "array", "items": _ref("ToolCall"), "nullable": True},
                },
            },
            "byteUsage": {"type": "object"},
        },
        ["contents"],
    ),
    "PartialUserTurn": _tagged(
        "PartialUserTurn",
        {
            "contents": {
                "type": "object",
                "description": (
                    "A user turn whose calls are not all final: trackedCalls, or in files of older "
                    "agents-exe versions completedResponses, pendingCalls and pendingContinuations"
                ),
                "properties": {
                    "userPrompt": _STRING,
                    "userTools": {"type": "array", "items": _ANY},
                    "trackedCalls": {"type": "array", "items": _ref("TrackedCall")},
                },
            },
        },
        ["contents"],
    ),
    "Turn": {
        "oneOf": [_ref("UserTurn"), _ref("LlmTurn"), _ref("PartialUserTurn")],
        "discriminator": {
            "propertyName": "tag",
            "mapping": {name: f"#/components/schemas/{name}" for name in ("UserTurn", "LlmTurn", "PartialUserTurn")},
        },
    },
    "SessionDocument": {
        "type": "object",
        "description": "The agents-exe session document, as its session files hold it; turns newest first.",
        "properties": {
            "sessionId": _STRING,
            "turnId": _NULLABLE_STRING,
            "forkedFromSessionId": _NULLABLE_STRING,
            "sessionVersion": {"type": "integer"},
            "mailCursor": {"type": "integer"},
            "controlCursor": {"type": "integer"},
            "turns": {"type": "array", "items": _ref("Turn")},
        },
        "required": ["turns"],
    },
    "StoredAgentBody": {
        "type": "object",
        "description": "What goes under `contents` in an agent file, plus `files`: relative path -> text.",
        "properties": {"slug": _STRING, "files": {"type": "object", "additionalProperties": _STRING}},
        "additionalProperties": True,
    },
}


def _error_answers(*statuses: int) -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": _ref("Error")}}}
    return {str(status): {"description": "", **error} for status in sorted({*statuses, 401})}


_STREAM_ANSWER = {
    "description": "server-sent events: `id: <seq>`, `event: <kind>`, `data: <JSON>`; keepalive comments",
    "headers": {"Agents-Replay": {"schema": {"type": "string", "enum": ["live", "replayed", "unavailable"]}}},
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
_STREAM_PARAMETERS = [
    {"name": "after", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "replay after seq"},
    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer", "minimum": 0}},
    {"name": "access_token", "in": "query", "schema": _STRING, "description": "the bearer token (EventSource)"},
]

STREAM_PATHS: dict[str, dict[str, Any]] = {
    "/v1/sessions/{session_id}/events": {
        "get": {
            "operationId": "streamSessionEvents",
            "description": "One session's events: a snapshot on a fresh connection, then every change.",
            "tags": ["v1"],
            "parameters": [
                {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}},
                *_STREAM_PARAMETERS,
            ],
            "responses": {"200": _STREAM_ANSWER, **_error_answers(400, 404, 405)},
            "security": [{"bearerAuth": []}, {}],
        }
    },
    "/v1/events": {
        "get": {
            "operationId": "streamEvents",
            "description": "Every event the caller may see: its own sessions' (scope=owner) or all (admin owners).",
            "tags": ["v1"],
            "parameters": [
                {"name": "scope", "in": "query", "schema": {"type": "string", "enum": ["owner", "all"]}},
                *_STREAM_PARAMETERS,
            ],
            "responses": {"200": _STREAM_ANSWER, **_error_answers(400, 403, 405)},
            "security": [{"bearerAuth": []}, {}],
        }
    },
}


def complete_schema(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: add the value shapes and the event streams.

    Args:
        result: the generated document (changed in place and returned).
    Returns:
        The document.
    """
    components = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in COMPONENTS.items():
        components.setdefault(name, schema)
    result.setdefault("paths", {}).update(STREAM_PATHS)
    return result
