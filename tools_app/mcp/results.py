"""An MCP ``CallToolResult`` as a tool result (docs/guide-mcp.md §1).

* Text parts (and the text of embedded text resources) are the result, joined by newlines.
* Image and audio parts (and embedded binary resources) are media: a result of one such part is
  a media result, a result mixing them with text a mixed one, parts in their order.
* A resource link is a text line naming it; ``structuredContent`` is the result only when there
  are no parts at all (as JSON).
* ``isError: true`` is a tool error the model sees, with the same text.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from ..base import ToolResult


def _media(mime: str, data: str, filename: str | None = None) -> dict[str, Any]:
    part = {"type": "media", "mimeType": mime, "base64Data": data}
    if filename:
        part["filename"] = filename
    return part


def _part(block: Any) -> dict[str, Any]:
    """One content block as a mixed-response part: ``{"type": "text", "text"}`` or media."""
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return _media(block.mime_type, block.data)
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return {"type": "text", "text": resource.text}
        name = str(resource.uri).rsplit("/", 1)[-1] or None
        return _media(resource.mime_type or "application/octet-stream", resource.blob, name)
    if isinstance(block, types.ResourceLink):
        return {"type": "text", "text": f"[resource {block.name}: {block.uri}]"}
    return {"type": "text", "text": json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True))}


def convert_result(result: types.CallToolResult) -> ToolResult:
    """The tool result for an MCP call's result (see the module docstring for the rules)."""
    parts = [_part(block) for block in result.content]
    texts = [p["text"] for p in parts if p["type"] == "text"]
    if result.is_error:
        detail = "\n".join(texts) or "the tool reported an error"
        return ToolResult.error(detail if detail.startswith("Error") else f"Error: {detail}")
    if not parts:
        if result.structured_content is not None:
            return ToolResult({"type": "json", "content": result.structured_content})
        return ToolResult("")
    if len(texts) == len(parts):
        return ToolResult("\n".join(texts))
    if len(parts) == 1:
        return ToolResult(parts[0])
    return ToolResult({"type": "mixed", "parts": parts})
