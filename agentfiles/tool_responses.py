"""Stored tool responses as the text a model reads (docs/sessions.md §1.5).

A response is one of the shapes of agents-exe's session file: a bare string, ``{"type":
"json"}``, ``{"type": "media"}`` or ``{"type": "mixed"}``, perhaps wrapped as
``{"_userToolResponse": value}`` by older files. Part of the file format, so that every reader
of a session (the conversation sent to the model, ``read-session``, mail, events, the console)
renders one response one way.
"""

from __future__ import annotations

import json
from typing import Any


def unwrap_response(response: Any) -> Any:
    """A stored tool response without the ``{"_userToolResponse": value}`` wrapper older files used."""
    if isinstance(response, dict) and set(response) == {"_userToolResponse"}:
        return response["_userToolResponse"]
    return response


def render_tool_response(response: Any) -> str:
    """The text of a tool message for a stored tool response (docs/sessions.md §1.5): a string as
    it is, JSON as its JSON text, media as a ``[Media: <mime>, <filename>, <size> bytes]`` label,
    mixed parts one per line; anything else as its JSON text."""
    response = unwrap_response(response)
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        kind = response.get("type")
        if kind == "text":
            return str(response.get("content", ""))
        if kind == "json":
            return json.dumps(response.get("content"), ensure_ascii=False)
        if kind == "media":
            return _media_label(response)
        if kind == "mixed":
            parts = []
            for part in response.get("parts", []):
                if part.get("type") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(_media_label(part))
            return "\n".join(parts)
    return json.dumps(response, ensure_ascii=False)


def _media_label(media: dict[str, Any]) -> str:
    """``[Media: <mime>, <filename or unnamed>, <decoded size> bytes]``."""
    size = len(media.get("base64Data", "")) * 3 // 4
    name = media.get("filename") or "unnamed"
    return f"[Media: {media.get('mimeType', 'application/octet-stream')}, {name}, {size} bytes]"
