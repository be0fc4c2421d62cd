"""Loading an agent's HTTP toolboxes: ``openApiToolboxes`` and ``postgrestToolboxes`` (docs/tools.md §9, §10).

Each entry is read (``config``), its document fetched, validated and dereferenced (``document``)
and turned into tools (``tools``, ``tools_app.postgrest``); then the entry's ``Bindings`` apply
to its tools, matched by the operation id (OpenAPI) or ``<method>_<table>`` (PostgREST). Any
problem is one line naming the entry, and the agent does not load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentfiles.schema import AgentSpec
from foundation.redaction import redact_url

from ..base import Tool
from ..bound import BindReport, bind_tools
from ..postgrest.tools import PostgrestTool, postgrest_tools
from .calls import load_time_auth
from .config import HttpToolboxConfig, HttpToolboxError, parse_http_toolbox
from .document import DocumentError, fetch_text, parse_document
from .tools import OpenApiTool, openapi_tools

KINDS = (
    ("openApiToolboxes", "OpenAPIServer", "OpenAPI"),
    ("postgrestToolboxes", "PostgRESTServer", "PostgREST"),
)


def _binding_name(tool: Tool) -> str:
    if isinstance(tool, OpenApiTool):
        return tool.operation.operation_id
    if isinstance(tool, PostgrestTool):
        return f"{tool.method}_{tool.table}"
    return tool.name


def http_configs(
    spec: AgentSpec,
    *,
    base_dir: Path,
    api_keys: Mapping[str, str] | None = None,
    resolve: Callable[[str], Path] | None = None,
) -> tuple[list[tuple[str, HttpToolboxConfig]], list[str]]:
    """Read every HTTP toolbox entry of ``spec`` without fetching anything.

    Returns:
        ``([(kind label, config)], problems)``; the label is ``OpenAPI`` or ``PostgREST``.
    """
    configs: list[tuple[str, HttpToolboxConfig]] = []
    problems: list[str] = []
    for key, tag, label in KINDS:
        for index, entry in enumerate(getattr(spec, key) or []):
            try:
                configs.append(
                    (
                        label,
                        parse_http_toolbox(
                            entry, f"{key}[{index}]", tag=tag, base_dir=base_dir, api_keys=api_keys, resolve=resolve
                        ),
                    )
                )
            except HttpToolboxError as error:
                problems.append(str(error))
    return configs, problems


def load_http_tools(
    spec: AgentSpec,
    *,
    base_dir: Path,
    api_keys: Mapping[str, str] | None = None,
    resolve: Callable[[str], Path] | None = None,
) -> tuple[list[Tool], list[str], list[str]]:
    """The tools of every HTTP toolbox of ``spec``, in the file's order (OpenAPI first).

    Args:
        spec: the agent.
        base_dir: where relative secret sources are read from.
        api_keys: the API keys file's entries (``ApiKey`` secret sources).
        resolve: finds a ``SpecUrl`` that is a file path (file agents only).
    Returns:
        ``(tools, problems, notices)``: ``problems`` (an entry that cannot be read, a document that
        cannot be fetched or used, a binding that cannot apply) each name the entry;
        ``notices`` are the bindings' warnings.
    """
    configs, problems = http_configs(spec, base_dir=base_dir, api_keys=api_keys, resolve=resolve)
    decls = {decl.name: decl for decl in spec.parameters}
    report = BindReport()
    tools: list[Tool] = []
    for label, config in configs:
        headers, query = load_time_auth(config)
        try:
            document = parse_document(fetch_text(config.spec_url, headers, query), config.spec_url)
        except DocumentError as error:
            problems.append(f"{config.where}: the {label} document of toolbox {config.name!r}: {error}")
            continue
        made: list[Any] = openapi_tools(config, document) if label == "OpenAPI" else postgrest_tools(config, document)
        if not made:
            spec_url = redact_url(config.spec_url)
            problems.append(f"{config.where}: the {label} document {spec_url} describes no operation")
            continue
        tools.extend(bind_tools(made, list(config.bindings), decls, name_of=_binding_name, report=report))
    problems.extend(report.problems)
    return tools, problems, list(report.warnings)
