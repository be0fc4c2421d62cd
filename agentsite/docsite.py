"""The reference pages of the documentation site, rendered from the code (docs/docsite.md §2).

Each function returns one Markdown page. They read what the program itself reads: the ``agents``
argument parser, the environment reads of the product packages, the error catalogue, the event
kinds and their payloads, and the OpenAPI document the server answers at ``/openapi.json``. The
mkdocs hook (``scripts/mkdocs_hooks.py``) adds them to the site at build time, so a page cannot
say something the code does not; none of them is stored in the repository.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: The product packages whose environment reads the settings page lists, from the ground floor up.
PACKAGES = ("foundation", "agentfiles", "tools_app", "agents_app", "sessions_app", "console_app", "agentsite")
#: The calls that read one environment variable, by the name they are called through.
ENV_READERS = frozenset({"env", "os.environ.get", "os.getenv", "environ.get"})
#: What ``env.<method>`` parses the value as.
ENV_TYPES = {"str": "text", "bool": "boolean", "int": "integer", "float": "number", "list": "list"}

#: The pages the site generates, by their path in it (``scripts/mkdocs_hooks.py`` makes them).
GENERATED_PAGES = frozenset(
    {
        "reference/command-line.md",
        "reference/settings.md",
        "reference/errors.md",
        "reference/events.md",
        "reference/http-api.md",
    }
)

_T = TypeVar("_T")
_GENERATED = "<!-- Generated at build time by agentsite/docsite.py from the code; edits here are lost. -->\n\n"


def _cell(text: object) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    # help texts name placeholders as <dir>: shown as written, not read as HTML tags
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _table(header: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, its Sphinx roles (``:func:`x```) as plain code."""
    return re.sub(r":\w+:`~?", "`", inspect.cleandoc(doc or "").split("\n\n", 1)[0])


# --- the command line ----------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """The commands of ``parser``: (name, help, parser), in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, sub.description or ""), sub


def _option_rows(parser: argparse.ArgumentParser, listed: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """One row per argument of ``parser`` (flags, default, help), leaving out those in ``listed``
    (the global options, listed once)."""
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.dest in listed:
            continue
        name = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest}` (positional)"
        if action.metavar or (action.option_strings and action.nargs != 0):
            name += f" `{action.metavar or action.dest.upper()}`"
        shown = action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0
        rows.append((name, f"`{action.default!r}`" if shown else "", action.help or ""))
    return rows


def _command_section(
    name: str, helptext: str, parser: argparse.ArgumentParser, depth: int, shown: frozenset[str]
) -> str:
    usage = " ".join(parser.format_usage().removeprefix("usage: ").split())
    parts = [f"{'#' * depth} `{name}`\n", f"{helptext}\n" if helptext else "", f"```\n{usage}\n```\n"]
    rows = _option_rows(parser, shown)
    if rows:
        parts.append(_table(("argument", "default", "meaning"), rows))
    for child, child_help, sub in _subcommands(parser):
        parts.append(_command_section(f"{name} {child}", child_help, sub, min(depth + 1, 4), shown))
    return "\n".join(part for part in parts if part)


def command_line_page(parser: argparse.ArgumentParser) -> str:
    """The command-line reference: the global options, then every command with its usage line and
    a table of its arguments (flags, default, help), nested groups below their group.

    Args:
        parser: the ``agents`` parser, :func:`agentsite.cli.build_parser`'s answer.

    Returns:
        The Markdown page. The rules behind the commands are in docs/cli.md §1.
    """
    parts = [
        "# The command line\n",
        _GENERATED,
        f"{parser.description or ''} Read from the argument parser of `agents` itself; the behaviour "
        "behind each command is in [cli.md](../cli.md).\n",
        "## Global options\n",
        "They are accepted before the command's name and after it, and are left out of the tables below.\n",
        _table(("argument", "default", "meaning"), _option_rows(parser)),
        "## Commands\n",
    ]
    shown = frozenset(action.dest for action in parser._actions if action.option_strings)
    parts += [_command_section(name, helptext, sub, 3, shown) for name, helptext, sub in _subcommands(parser)]
    return "\n".join(parts)


# --- settings and environment variables ----------------------------------------------------------


@dataclass
class EnvRead:
    """One environment variable and every place the product reads it.

    ``kinds`` are what the reads parse it as, ``defaults`` the defaults they give (as written in
    the code), ``flags`` the command-line flags whose default it is, ``settings`` the module
    constants and settings it sets (``AGENTS["TOOL_TIMEOUT"]``), ``notes`` the comments written
    above the reads, ``places`` the ``module.py:line`` of each read.
    """

    name: str
    kinds: set[str] = field(default_factory=set)
    defaults: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)


def _called_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_called_name(node.value)}.{node.attr}"
    return ""


def _comment_above(lines: list[str], lineno: int) -> str:
    """The block of ``#`` comment lines just above line ``lineno`` (1-based), joined."""
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        found.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    return " ".join(found).strip()


def _settings_of(tree: ast.AST) -> dict[int, str]:
    """The node ids of ``tree`` inside the value of an upper-case module constant, or of one key of
    the dict such a constant holds, to the setting's name (``DEBUG``, ``AGENTS["LLM_TIMEOUT"]``)."""
    named: dict[int, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id.isupper():
                for inner in ast.walk(node.value):
                    named[id(inner)] = target.id
                if isinstance(node.value, ast.Dict):
                    for key, value in zip(node.value.keys, node.value.values, strict=True):
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            for inner in ast.walk(value):
                                named[id(inner)] = f'{target.id}["{key.value}"]'
    return named


def _env_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str, str | None, str | None]]:
    """Every environment read of ``tree``: (call, parsed as, the flag it is the default of, the
    setting it sets)."""
    settings = _settings_of(tree)
    flags: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node.func).endswith("add_argument"):
            flag = next((a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)), None)
            for keyword in node.keywords:
                if keyword.arg == "default" and flag:
                    for inner in ast.walk(keyword.value):
                        flags[id(inner)] = flag
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        called = _called_name(node.func)
        method = called.rsplit(".", 1)[-1]
        if called in ENV_READERS:
            kind = "text"
        elif called.startswith("env.") and method in ENV_TYPES:
            kind = ENV_TYPES[method]
        else:
            continue
        yield node, kind, flags.get(id(node)), settings.get(id(node))


def environment_reads(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, EnvRead]:
    """Every environment variable the product packages under ``root`` read, by name.

    Args:
        root: the repository's root; ``packages`` are folders of it, migrations left out.

    Returns:
        Name to :class:`EnvRead`, sorted by name. Only reads that name their variable with a
        literal count: a name built at run time cannot be listed, and the code has none.
    """
    found: dict[str, EnvRead] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            for call, kind, flag, setting in _env_calls(ast.parse(source)):
                first = call.args[0]
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.isupper()):
                    continue
                read = found.setdefault(first.value, EnvRead(first.value))
                read.kinds.add(kind)
                given = [k.value for k in call.keywords if k.arg == "default"] or call.args[1:2]
                for default in given:
                    written = ast.get_source_segment(source, default) or ""
                    if written and written not in read.defaults:
                        read.defaults.append(written)
                if flag and flag not in read.flags:
                    read.flags.append(flag)
                if setting and setting not in read.settings:
                    read.settings.append(setting)
                note = _comment_above(lines, call.lineno)
                if note and note not in read.notes:
                    read.notes.append(note)
                read.places.append(f"{path.relative_to(root).as_posix()}:{call.lineno}")
    return dict(sorted(found.items()))


def settings_page(root: Path) -> str:
    """The settings reference: one row per environment variable the product reads, with what it
    is parsed as, its defaults as the code writes them, the flags it is the default of, the
    comments above its reads and where it is read.

    Args:
        root: the repository's root.

    Returns:
        The Markdown page. How the processes are configured is in docs/running.md §1.
    """
    rows = [
        (
            f"`{read.name}`",
            ", ".join(sorted(read.kinds)),
            ", ".join(f"`{d}`" for d in read.defaults),
            ", ".join(f"`{f}`" for f in read.flags),
            ", ".join(f"`{s}`" for s in read.settings),
            " ".join(read.notes),
            ", ".join(f"`{p}`" for p in read.places),
        )
        for read in environment_reads(root).values()
    ]
    return "\n".join(
        [
            "# Settings and environment variables\n",
            _GENERATED,
            "Every environment variable the server, its workers and its command line read, found in the "
            "code of the product packages. A flag given on the command line wins over its variable. What "
            "they do together is told in [running.md](../running.md).\n",
            _table(("variable", "parsed as", "default", "flag", "setting", "notes", "read in"), rows),
        ]
    )


# --- errors and events -------------------------------------------------------------------------


def _subclasses(cls: type[_T]) -> Iterator[type[_T]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def errors_page() -> str:
    """The error catalogue: every code of :class:`foundation.errors.ErrorCode` with its HTTP
    status and what each error class that answers it means (its docstring's first paragraph).

    Returns:
        The Markdown page. The answer's shape is in docs/api.md §2.
    """
    from foundation.errors import ApiError, ErrorCode

    classes: dict[str, list[type[ApiError]]] = {}
    for cls in _subclasses(ApiError):
        classes.setdefault(str(cls.code), []).append(cls)
    rows: list[tuple[object, ...]] = []
    for code in ErrorCode:
        for cls in classes.get(str(code), []) or [ApiError]:
            status = cls.status if cls is not ApiError else ""
            meaning = _first_paragraph(cls.__doc__) if cls is not ApiError else ""
            rows.append((f"`{code}`", status, f"`{cls.__name__}`" if cls is not ApiError else "", meaning))
    return "\n".join(
        [
            "# Error catalogue\n",
            _GENERATED,
            'Every error answers `{"error": CODE, "message": TEXT}` with the status below '
            "(the [errors section of api.md](../api.md#2-errors)).\n",
            _table(("code", "status", "class", "meaning"), rows),
        ]
    )


def _payload_fields(payload: type) -> list[tuple[str, str, str]]:
    """(field, type, required) of a TypedDict payload, its types as the module writes them."""
    rows = []
    # a TypedDict's annotations hold its bases' keys too; the module's annotations are strings
    for name, hint in getattr(payload, "__annotations__", {}).items():
        written = str(getattr(hint, "__forward_arg__", hint))
        optional = written.startswith("NotRequired[")
        if optional:
            written = written.removeprefix("NotRequired[").removesuffix("]")
        rows.append((f"`{name}`", f"`{written}`", "no" if optional else "yes"))
    return rows


def events_page() -> str:
    """The event kinds: every :class:`sessions_app.event_types.EventKind` with the payload its
    ``data`` carries (the TypedDict's docstring and fields).

    Returns:
        The Markdown page. How events are delivered is in docs/api.md §9.
    """
    from sessions_app.event_types import PAYLOADS, EventKind

    parts = [
        "# Event kinds\n",
        _GENERATED,
        "Every kind of event the server emits. Besides the payload below, an event's `data` holds `kind`, "
        "`seq`, `session_id` and `owner` (the [event streams of api.md](../api.md#9-event-streams)).\n",
    ]
    for kind in EventKind:
        parts.append(f"## `{kind}`\n")
        payload = PAYLOADS.get(kind)
        if payload is None:
            parts.append("No payload of its own.\n")
            continue
        parts.append(f"{_first_paragraph(payload.__doc__)}\n")
        parts.append(_table(("field", "type", "required"), _payload_fields(payload)))
    return "\n".join(parts)


# --- the HTTP API --------------------------------------------------------------------------------


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    for union in ("oneOf", "anyOf", "allOf"):
        if union in schema:
            return f" {union} ".join(_schema_name(s) for s in schema[union])
    return f"`{schema.get('type', 'any')}`"


def _bodies(content: dict[str, Any]) -> str:
    return ", ".join(f"{_schema_name(media.get('schema', {}))} (`{kind}`)" for kind, media in content.items())


def http_api_page(document: dict[str, Any]) -> str:
    """The HTTP API reference: every operation of the OpenAPI document (method, path, summary,
    parameters, request body, answers), then every component schema with its fields.

    Args:
        document: the OpenAPI document, as ``GET /openapi.json`` answers it.

    Returns:
        The Markdown page. The rules of every route are in docs/api.md §6.
    """
    parts = [
        f"# HTTP API\n\n{_GENERATED}",
        f"{document.get('info', {}).get('title', '')} {document.get('info', {}).get('version', '')}: rendered from "
        "the OpenAPI document the server answers at `GET /openapi.json` (also [here](openapi.json)). "
        "What every route does and why is in [api.md](../api.md).\n",
        "## Operations\n",
    ]
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            parts.append(f"### `{method.upper()} {path}`\n")
            text = operation.get("summary") or operation.get("description") or ""
            if text:
                parts.append(f"{text.strip()}\n")
            parameters = operation.get("parameters", [])
            if parameters:
                rows = [
                    (
                        f"`{p['name']}`",
                        p.get("in", ""),
                        _schema_name(p.get("schema", {})),
                        "yes" if p.get("required") else "no",
                        p.get("description", ""),
                    )
                    for p in parameters
                ]
                parts.append(_table(("parameter", "in", "type", "required", "meaning"), rows))
            if "requestBody" in operation:
                parts.append(f"Body: {_bodies(operation['requestBody'].get('content', {}))}\n")
            answers = [
                (f"`{code}`", answer.get("description", ""), _bodies(answer.get("content", {})))
                for code, answer in sorted(operation.get("responses", {}).items())
            ]
            parts.append(_table(("status", "meaning", "body"), answers))
    parts.append("## Schemas\n")
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        parts.append(f"### {name}\n")
        if schema.get("description"):
            parts.append(f"{schema['description'].strip()}\n")
        properties = schema.get("properties", {})
        if properties:
            required = set(schema.get("required", []))
            fields = [
                (f"`{key}`", _schema_name(value), "yes" if key in required else "no", value.get("description", ""))
                for key, value in properties.items()
            ]
            parts.append(_table(("field", "type", "required", "meaning"), fields))
        elif "enum" in schema:
            parts.append("One of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]) + ".\n")
        else:
            parts.append(f"{_schema_name(schema)}\n")
    return "\n".join(parts)


def site_pages(parser: argparse.ArgumentParser, root: Path, document: dict[str, Any]) -> dict[str, str]:
    """Every generated page of the site, by its path in it (the keys are :data:`GENERATED_PAGES`),
    plus the OpenAPI document itself as ``reference/openapi.json``.

    Args:
        parser: the ``agents`` parser; root: the repository's root; document: the OpenAPI document.

    Returns:
        Path in the site to the page's text.
    """
    return {
        "reference/command-line.md": command_line_page(parser),
        "reference/settings.md": settings_page(root),
        "reference/errors.md": errors_page(),
        "reference/events.md": events_page(),
        "reference/http-api.md": http_api_page(document),
        "reference/openapi.json": json.dumps(document, indent=2),
    }
