"""Pydantic's validation errors as the one-line messages of an agent file's problems
(docs/agents.md §5): ``"<field path>: <message>"``, the field path as the file writes it.

Plain Python: no Django, no models.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from agentfiles import schema

# Pydantic puts the member's class name into ``loc`` when a union member fails (e.g. the two
# kinds of bash toolbox contents); those names are not keys of the file, so they are dropped.
_SCHEMA_CLASS_NAMES = frozenset(
    name for name, value in vars(schema).items() if isinstance(value, type) and issubclass(value, BaseModel)
)

_EXPECTED_BY_TYPE_PREFIX = {
    "string": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "an object",
    "model": "an object",
}


def format_validation_errors(error: ValidationError) -> list[str]:
    """Turn a pydantic error into ``"<field path>: <message>"`` lines, without repeats.

    Field paths read like ``bashToolboxes[1].contents.Path``; messages are short and name what
    was expected and what was found (``expected a string, got number 42``).
    """
    lines: list[str] = []
    for detail in error.errors():
        where = _format_loc(detail["loc"])
        message = _format_message(detail)
        line = f"{where}: {message}" if where else message
        if line not in lines:
            lines.append(line)
    return lines


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part not in _SCHEMA_CLASS_NAMES:
            text += f".{part}" if text else part
    return text


def _format_message(detail: Any) -> str:
    kind: str = detail["type"]
    if kind == "missing":
        return "field required"
    if kind in ("value_error", "assertion_error"):
        return str(detail.get("ctx", {}).get("error", detail["msg"]))
    if kind == "literal_error":
        return f"expected {detail['ctx']['expected']}, got {_describe(detail['input'])}"
    prefix = kind.split("_", 1)[0]
    if kind.endswith(("_type", "_parsing")) and prefix in _EXPECTED_BY_TYPE_PREFIX:
        return f"expected {_EXPECTED_BY_TYPE_PREFIX[prefix]}, got {_describe(detail['input'])}"
    message: str = detail["msg"]
    return message[:1].lower() + message[1:]


def _describe(value: Any) -> str:
    """Name a JSON value the way a file author would recognise it: ``number 42``, ``a list``."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    kind = "string" if isinstance(value, str) else "number"
    shown = json.dumps(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{kind} {shown}"
