"""OpenAPI operations as tools (docs/tools.md §9.2).

One tool per operation: ``openapi_<toolbox>_<operationId>`` (an operation without an id is
named from its method and path: ``get_pets_petId``). The toolbox set makes the whole name valid
for LLM APIs and keeps the map back (docs/tools.md §2); the tool keeps its operation, so a call is
routed to the operation as the document names it.

The model's arguments: one property per path, query and header parameter, under its own name,
and the request body (OpenAPI 3 ``requestBody`` or a Swagger ``in: body`` parameter) under
``body``. Path parameters are always required.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ..base import Tool, ToolContext, ToolResult
from .calls import send
from .config import HttpToolboxConfig
from .paths import path_parameter_problem

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
BODY_ARGUMENT = "body"
_PLAIN_SCHEMA = {"type": "string"}


@dataclass(frozen=True)
class Operation:
    """One operation of the document.

    Attributes:
        method: upper-case HTTP method.
        path: the path template (``/pets/{petId}``).
        operation_id: the document's ``operationId`` (or one made from method and path).
        description: what the model reads.
        parameters: ``(name, location)`` of the path, query and header parameters, in order.
        has_body: whether the operation takes a request body.
        schema: the JSON schema of the model's arguments.
    """

    method: str
    path: str
    operation_id: str
    description: str
    parameters: tuple[tuple[str, str], ...] = ()
    has_body: bool = False
    schema: dict[str, Any] = field(default_factory=dict)


def _fallback_id(method: str, path: str) -> str:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", path) if w]
    return "_".join([method, *words])


def _body_schema(operation: Mapping[str, Any], swagger_body: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The request body's schema and whether it is required (``({}, False)`` without a body)."""
    if swagger_body is not None:
        schema = dict(swagger_body.get("schema") or {"type": "object"})
        if swagger_body.get("description"):
            schema.setdefault("description", swagger_body["description"])
        return schema, bool(swagger_body.get("required"))
    request = operation.get("requestBody")
    if not isinstance(request, Mapping):
        return {}, False
    content = request.get("content") or {}
    media = content.get("application/json") or next(iter(content.values()), None) or {}
    schema = dict(media.get("schema") or {"type": "object"})
    if request.get("description"):
        schema.setdefault("description", request["description"])
    return schema, bool(request.get("required"))


def _parameter_schema(parameter: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter's schema: OpenAPI 3's ``schema``, or Swagger 2's inline ``type``, ``items``,
    ``enum`` and ``format`` (a string when it has none), with its description."""
    inline = {key: value for key, value in parameter.items() if key in ("type", "items", "enum", "format")}
    schema = dict(parameter.get("schema") or inline or _PLAIN_SCHEMA)
    if parameter.get("description"):
        schema["description"] = parameter["description"]
    return schema


def operations(document: Mapping[str, Any]) -> list[Operation]:
    """Every operation of a dereferenced document, in the document's order."""
    found: list[Operation] = []
    for path, item in (document.get("paths") or {}).items():
        if not isinstance(item, Mapping):
            continue
        shared = [p for p in item.get("parameters") or [] if isinstance(p, Mapping)]
        for method in METHODS:
            operation = item.get(method)
            if not isinstance(operation, Mapping):
                continue
            own = [p for p in operation.get("parameters") or [] if isinstance(p, Mapping)]
            merged: dict[tuple[str, str], Mapping[str, Any]] = {}
            for parameter in [*shared, *own]:
                merged[(str(parameter.get("name")), str(parameter.get("in")))] = parameter
            properties: dict[str, Any] = {}
            required: list[str] = []
            kept: list[tuple[str, str]] = []
            swagger_body = None
            for (name, where), parameter in merged.items():
                if where == "body":
                    swagger_body = parameter
                    continue
                if where not in ("path", "query", "header"):
                    continue
                properties[name] = _parameter_schema(parameter)
                kept.append((name, where))
                if where == "path" or parameter.get("required"):
                    required.append(name)
            body, body_required = _body_schema(operation, swagger_body)
            if body:
                properties[BODY_ARGUMENT] = body
                if body_required:
                    required.append(BODY_ARGUMENT)
            text = " ".join(t for t in (operation.get("summary"), operation.get("description")) if t)
            found.append(
                Operation(
                    method=method.upper(),
                    path=path,
                    operation_id=str(operation.get("operationId") or _fallback_id(method, path)),
                    description=text or f"{method.upper()} {path}",
                    parameters=tuple(kept),
                    has_body=bool(body),
                    schema={"type": "object", "properties": properties, "required": required},
                )
            )
    return found


def argument_text(value: Any) -> str:
    """A value as it goes into a path, a query or a header: strings as they are, booleans as
    ``true``/``false``, anything else as its JSON text."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


class OpenApiTool(Tool):
    """One operation of an OpenAPI toolbox (see the module docstring)."""

    def __init__(self, config: HttpToolboxConfig, operation: Operation) -> None:
        self.config = config
        self.operation = operation
        self.name = self._original = f"openapi_{config.name}_{operation.operation_id}"
        self.description = operation.description
        self.parameters = operation.schema
        self.gate = config.activation.gate

    @property
    def original_name(self) -> str:
        """``openapi_<toolbox>_<operationId>`` as the document writes it, before normalization."""
        return self._original

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Substitute the path parameters, add the query and header ones, send the body.

        A path parameter that is missing, empty or a dot segment in any spelling
        (:func:`~tools_app.openapi.paths.path_parameter_problem`) is a tool error naming it, and
        nothing is sent (docs/tools.md §9.3).
        """
        op = self.operation
        path = op.path
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        for name, where in op.parameters:
            value = arguments.get(name)
            if value is None:
                if where == "path":
                    return ToolResult.error(f"Error: {self.name}: the path parameter {name!r} is required")
                continue
            if where == "path":
                text = argument_text(value)
                problem = path_parameter_problem(text)
                if problem is not None:
                    refused = f"the path parameter {name!r} {problem}; nothing was sent"
                    return ToolResult.error(f"Error: {self.name}: {refused}")
                path = path.replace("{" + name + "}", quote(text, safe=""))
            elif where == "header":
                headers[name] = argument_text(value)
            else:
                values = value if isinstance(value, list) else [value]
                query.extend((name, argument_text(item)) for item in values)
        return send(
            self.config,
            ctx,
            tool=self.name,
            method=op.method,
            path=path,
            query=query,
            headers=headers,
            body=arguments.get(BODY_ARGUMENT),
            has_body=op.has_body and BODY_ARGUMENT in arguments,
        )


def openapi_tools(config: HttpToolboxConfig, document: Mapping[str, Any]) -> list[Tool]:
    """The tools of an OpenAPI toolbox, one per operation of its dereferenced ``document``."""
    return [OpenApiTool(config, operation) for operation in operations(document)]
