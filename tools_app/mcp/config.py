"""The ``mcpServers`` entries of an agent file (docs/guide-mcp.md §1).

Two kinds of entry:

* ``{"tag": "McpSimpleBinary", "contents": {"name", "executable", "args"?, "env"?}}``: a server
  started as a child process, spoken to over stdio (agents-exe's only kind).
* ``{"tag": "McpStreamableHttp", "contents": {"name", "url", "headers"?}}``: a server reached over
  the streamable HTTP transport. This one is ours; agents-exe skips it.

``env`` and ``headers`` map names to binding values: ``{"tag": "Literal", "contents": <JSON>}``
(a string as it is, anything else as its JSON text) or ``{"tag": "Param", "contents": <name>}``,
a process-scope parameter (the loader refuses others: a server is started once per process),
whose value in this process (``--set``, a default) is used; one without value leaves the name
out. Values are given to the server process's environment (added to the tool environment: docs/tools.md,
"Tool environments") or sent
as HTTP headers, never put on a command line, and only their names are ever logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfiles.parameters import ParamValue
from foundation.redaction import redact_url
from foundation.toolenv import tool_environment

#: The tags of ``mcpServers`` entries this server runs.
STDIO_TAG = "McpSimpleBinary"
HTTP_TAG = "McpStreamableHttp"


class McpConfigError(ValueError):
    """An ``mcpServers`` entry cannot be used; the message names the entry and the problem."""


@dataclass(frozen=True)
class StdioServer:
    """An MCP server run as a child process (``McpSimpleBinary``).

    Attributes:
        name: the toolbox name (in tool names: ``mcp_<name>_<tool>``).
        executable: the command; a relative path holding ``/`` is resolved from the agent's directory.
        args: its arguments.
        env: variables added to the tool environment, as ``(name, value)`` pairs.
    """

    name: str
    executable: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def environment(self) -> dict[str, str]:
        """The child's whole environment: the tool environment (docs/tools.md, "Tool
        environments"), then :attr:`env` (which wins)."""
        return tool_environment(dict(self.env))

    def describe(self) -> dict[str, Any]:
        """What may be logged about it: the command and the names (never the values) of ``env``."""
        names = [k for k, _ in self.env]
        return {"server": self.name, "transport": "stdio", "executable": self.executable, "env": names}


@dataclass(frozen=True)
class HttpServer:
    """An MCP server reached over streamable HTTP (``McpStreamableHttp``, our extension).

    Attributes:
        name: the toolbox name.
        url: the endpoint, ``http://`` or ``https://``.
        headers: sent with every request, as ``(name, value)`` pairs.
    """

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def describe(self) -> dict[str, Any]:
        """What may be logged about it: the URL without its credentials (``redact_url``) and the
        names (never the values) of ``headers``."""
        names = [k for k, _ in self.headers]
        return {"server": self.name, "transport": "http", "url": redact_url(self.url), "headers": names}


ServerConfig = StdioServer | HttpServer


def _entry_parts(entry: Any) -> tuple[str | None, Any]:
    """``(tag, contents)`` of a schema ``Tagged`` entry or of plain JSON."""
    if isinstance(entry, Mapping):
        return entry.get("tag"), entry.get("contents")
    return getattr(entry, "tag", None), getattr(entry, "contents", None)


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _binding_value(value: Any, where: str, params: Mapping[str, ParamValue]) -> str | None:
    """A binding value as text: a ``Literal``'s, or a ``Param``'s value in this process (``None``
    when it has none)."""
    if isinstance(value, Mapping) and value.get("tag") == "Literal" and "contents" in value:
        return _text_of(value["contents"])
    if isinstance(value, Mapping) and value.get("tag") == "Param" and isinstance(value.get("contents"), str):
        given = params.get(value["contents"])
        return _text_of(given.value) if given is not None else None
    raise McpConfigError(f'{where} must be {{"tag": "Literal", "contents": <value>}} or {{"tag": "Param", ...}}')


def _bindings(
    contents: Mapping[str, Any], key: str, where: str, params: Mapping[str, ParamValue]
) -> tuple[tuple[str, str], ...]:
    raw = contents.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise McpConfigError(f"{where}.{key} must be an object of name -> binding value")
    pairs = ((str(name), _binding_value(value, f"{where}.{key}.{name}", params)) for name, value in raw.items())
    return tuple((name, text) for name, text in pairs if text is not None)


def _text(contents: Mapping[str, Any], key: str, where: str) -> str:
    value = contents.get(key)
    if not isinstance(value, str) or not value:
        raise McpConfigError(f"{where}.{key} must be a non-empty string")
    return value


def parse_server(
    entry: Any, where: str, resolve: Callable[[str], Path], params: Mapping[str, ParamValue] | None = None
) -> ServerConfig:
    """Read one ``mcpServers`` entry.

    Args:
        entry: the entry, a schema ``Tagged`` or its JSON.
        where: how problems name it, e.g. ``mcpServers[0]``.
        resolve: turns a relative path into one from the agent's directory.
        params: the agent's parameter values in this process (process values and defaults),
            for ``Param`` values of ``env`` and ``headers``.
    Returns:
        a :class:`StdioServer` or an :class:`HttpServer`.
    Raises:
        McpConfigError: an unknown tag, a missing or ill-typed field, a binding value of another shape.
    """
    params = params or {}
    tag, contents = _entry_parts(entry)
    if tag not in (STDIO_TAG, HTTP_TAG):
        raise McpConfigError(f"{where}: {tag!r} MCP servers are not supported (expected {STDIO_TAG} or {HTTP_TAG})")
    if not isinstance(contents, Mapping):
        raise McpConfigError(f"{where}: {tag} needs an object under 'contents'")
    where = f"{where}.contents"
    name = _text(contents, "name", where)
    if tag == HTTP_TAG:
        url = _text(contents, "url", where)
        if not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{where}.url must be an http:// or https:// URL")
        return HttpServer(name=name, url=url, headers=_bindings(contents, "headers", where, params))
    executable = _text(contents, "executable", where)
    if "/" in executable and not os.path.isabs(executable):
        executable = str(resolve(executable))
    args = contents.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{where}.args must be a list of strings")
    env = _bindings(contents, "env", where, params)
    return StdioServer(name=name, executable=executable, args=tuple(args), env=env)
