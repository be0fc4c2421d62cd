"""Which rule answers a request: the ``when`` conditions of a script."""

from __future__ import annotations

from typing import Any


def message_text(message: Any) -> str:
    """The text of a chat message: string content, or the text parts of list content."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _tool_results_since_last_user(messages: list[Any]) -> int:
    count = 0
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            break
        if role == "tool":
            count += 1
    return count


def _offered_tool_names(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return names


def matches(when: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether a rule's ``when`` (already validated) holds for a request body; every condition must."""
    messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
    last = messages[-1] if messages else {}
    last_role = last.get("role") if isinstance(last, dict) else None
    if "last_role" in when and last_role != when["last_role"]:
        return False
    if "last_contains" in when and when["last_contains"] not in message_text(last):
        return False
    if "any_contains" in when and not any(when["any_contains"] in message_text(m) for m in messages):
        return False
    if "model" in when and body.get("model") != when["model"]:
        return False
    if "has_tool" in when and when["has_tool"] not in _offered_tool_names(body):
        return False
    if "tool_results" in when and _tool_results_since_last_user(messages) != when["tool_results"]:
        return False
    return True
