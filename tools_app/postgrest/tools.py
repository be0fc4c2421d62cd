"""PostgREST tables as tools (docs/tools.md §10).

For each table (a path of the document other than ``/`` and ``/rpc/...``) and each method the
document lists for it, one tool ``postgrest_<toolbox>_<method>_<table>`` (method lower-case).
The model's arguments come in four groups, turned into PostgREST's URL grammar:

* ``filters``: ``{column: expression}``, one query parameter each, the expression as PostgREST
  reads it (``eq.5``, ``in.(1,2)``, ``is.null``); a list repeats the column (``gte.1`` and
  ``lte.9``); a number or a boolean means equality (``eq.<value>``), ``null`` means ``is.null``.
  Logical keys (``or``, ``and``, ``not.<column>``) pass through as written.
* ``subset``: ``columns`` becomes ``select``, ``limit`` and ``offset`` stay as they are.
* ``ranking``: ``order`` (``created_at.desc,id``).
* ``body``: the row, sent as JSON.

The query is written filters first, then ``select``, ``order``, ``limit`` and ``offset``. Which
groups a method takes: GET filters, subset, ranking; POST body; PUT and PATCH filters and body;
DELETE filters. PUT, PATCH and DELETE need ``filters``, so that no call changes a whole table by
leaving them out. Every method but GET sends ``Prefer: return=representation``, so the model reads
the rows it wrote (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from ..base import Tool, ToolContext, ToolResult
from ..openapi.calls import send
from ..openapi.config import HttpToolboxConfig
from ..openapi.tools import argument_text

METHODS = ("get", "post", "put", "patch", "delete")
GROUPS = {
    "get": ("filters", "subset", "ranking"),
    "post": ("body",),
    "put": ("filters", "body"),
    "patch": ("filters", "body"),
    "delete": ("filters",),
}
REQUIRED = {"post": ["body"], "put": ["filters", "body"], "patch": ["filters", "body"], "delete": ["filters"]}
WRITE_PREFER = "return=representation"


def _group_schemas(table: str, columns: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    column_names = ", ".join(columns) or "none listed"
    filter_help = (
        "PostgREST filter expression, e.g. eq.5, neq.x, gt.1, in.(1,2), like.*a*, is.null; a list repeats the column"
    )
    return {
        "filters": {
            "type": "object",
            "description": f"Row filters of {table}: column -> expression (columns: {column_names}); "
            "also or, and, not.<column>",
            "properties": {name: {"description": filter_help} for name in columns},
            "additionalProperties": True,
        },
        "subset": {
            "type": "object",
            "description": "Which rows and columns come back",
            "properties": {
                "limit": {"type": "integer", "description": "At most this many rows"},
                "offset": {"type": "integer", "description": "Rows to skip first"},
                "columns": {"type": "string", "description": "Comma-separated columns to return (select)"},
            },
        },
        "ranking": {
            "type": "object",
            "description": "Order of the rows",
            "properties": {"order": {"type": "string", "description": "e.g. created_at.desc,id"}},
        },
        "body": {
            "type": "object",
            "description": f"The {table} row's values",
            "properties": {name: dict(schema) for name, schema in columns.items()},
        },
    }


def filter_value(value: Any) -> str:
    """A filter's value as PostgREST reads it (see the module docstring)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "is.null"
    return f"eq.{argument_text(value)}"


def query_of(method: str, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The query parameters of a call, in the order of the module docstring.

    Raises:
        ValueError: a group that is not an object, or ``limit``/``offset`` that are not integers.
    """
    groups = GROUPS[method]
    query: list[tuple[str, str]] = []
    for group in ("filters", "subset", "ranking"):
        if group in arguments and arguments[group] is not None and not isinstance(arguments[group], Mapping):
            raise ValueError(f"{group} must be an object")
    if "filters" in groups:
        for column, value in (arguments.get("filters") or {}).items():
            values = value if isinstance(value, list) else [value]
            query.extend((str(column), filter_value(item)) for item in values)
    subset = arguments.get("subset") or {} if "subset" in groups else {}
    ranking = arguments.get("ranking") or {} if "ranking" in groups else {}
    if subset.get("columns") is not None:
        query.append(("select", argument_text(subset["columns"])))
    if ranking.get("order") is not None:
        query.append(("order", argument_text(ranking["order"])))
    for key in ("limit", "offset"):
        if subset.get(key) is None:
            continue
        if isinstance(subset[key], bool) or not isinstance(subset[key], int):
            raise ValueError(f"subset.{key} must be an integer")
        query.append((key, str(subset[key])))
    return query


class PostgrestTool(Tool):
    """One method on one table of a PostgREST toolbox (see the module docstring)."""

    def __init__(
        self, config: HttpToolboxConfig, table: str, method: str, columns: Mapping[str, Any], description: str
    ) -> None:
        self.config = config
        self.table = table
        self.method = method
        self.name = self._original = f"postgrest_{config.name}_{method}_{table}"
        self.description = description
        schemas = _group_schemas(table, columns)
        self.parameters = {
            "type": "object",
            "properties": {group: schemas[group] for group in GROUPS[method]},
            "required": list(REQUIRED.get(method, [])),
        }
        self.gate = config.activation.gate

    @property
    def original_name(self) -> str:
        """``postgrest_<toolbox>_<method>_<table>`` before normalization."""
        return self._original

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Build the URL from the argument groups and send the request."""
        for group in REQUIRED.get(self.method, []):
            if not arguments.get(group):
                return ToolResult.error(f"Error: {self.name}: {group} is required")
        try:
            query = query_of(self.method, arguments)
        except ValueError as error:
            return ToolResult.error(f"Error: {self.name}: {error}")
        writes = self.method != "get"
        return send(
            self.config,
            ctx,
            tool=self.name,
            method=self.method.upper(),
            path="/" + quote(self.table, safe=""),
            query=query,
            headers={"Prefer": WRITE_PREFER} if writes else {},
            body=arguments.get("body"),
            has_body="body" in GROUPS[self.method],
        )


_VERBS = {
    "get": "Read rows of",
    "post": "Insert a row into",
    "put": "Replace (upsert) a row of",
    "patch": "Update the rows matching the filters in",
    "delete": "Delete the rows matching the filters from",
}


def postgrest_tools(config: HttpToolboxConfig, document: Mapping[str, Any]) -> list[Tool]:
    """The tools of a PostgREST toolbox from its dereferenced document (tables in the document's order)."""
    definitions = document.get("definitions") or {}
    tools: list[Tool] = []
    for path, item in (document.get("paths") or {}).items():
        table = path.strip("/")
        if not table or "/" in table or path.startswith("/rpc/") or not isinstance(item, Mapping):
            continue
        definition = definitions.get(table) or {}
        columns = definition.get("properties") or {}
        for method in METHODS:
            if method not in item:
                continue
            summary = (item[method] or {}).get("summary") or definition.get("description") or ""
            text = f"{_VERBS[method]} the {table} table" + (f": {summary}" if summary else "")
            tools.append(PostgrestTool(config, table, method, columns, text))
    return tools
