"""Built-in toolboxes (docs/guide-toolboxes.md §1): SQLite, System, Developer and Lua.

:func:`build_builtin_tools` makes the tools of an agent's ``builtinToolboxes`` (already checked
when the agent was loaded, see ``agentfiles.builtins``): one tool per toolbox, named
``sqlite_<Name>_query``, ``system_<Name>_system_info``, ``developer_<Name>_developer_tools`` and
``lua_<Name>_execute``. A toolbox's ``Activation`` gates its tool (``tools_app.activation``).
"""

from __future__ import annotations

import os

from agentfiles.builtins import (
    BuiltinToolbox,
    DeveloperConfig,
    LuaConfig,
    SqliteConfig,
    SystemConfig,
    parse_builtin_toolboxes,
)
from agentfiles.schema import parse_activation

from .common import AgentLike, BuiltinTool, make_sandbox
from .developer import DeveloperTool
from .lua import LuaTool
from .sqlite import SqliteTool
from .system import SystemTool


def _build_one(agent: AgentLike, box: BuiltinToolbox, warnings: list[str]) -> BuiltinTool:
    config = box.config
    if isinstance(config, SqliteConfig):
        assert config.Versioning is not None  # noqa: S101 - narrows the type (never checks input)
        path = agent.resolve(config.Versioning.path)
        if config.read_only and not path.is_file():
            warnings.append(f"{box.label}: the read-only database {path} does not exist; queries fail until it does")
        return SqliteTool(box, path)
    if isinstance(config, DeveloperConfig):
        return DeveloperTool(box, make_sandbox(agent, box))
    if isinstance(config, LuaConfig):
        return LuaTool(box, make_sandbox(agent, box))
    assert isinstance(config, SystemConfig)  # noqa: S101 - narrows the type (never checks input)
    command_filter = agent.resolve(config.CommandFilter) if config.CommandFilter else None
    if command_filter is not None and not os.access(command_filter, os.X_OK):
        warnings.append(f"{box.label}: CommandFilter {command_filter} is not an executable; every command is refused")
    return SystemTool(box, make_sandbox(agent, box), command_filter)


def build_builtin_tools(agent: AgentLike) -> tuple[list[BuiltinTool], list[str], list[str]]:
    """The tools of ``agent``'s built-in toolboxes.

    Returns:
        ``(tools, warnings, problems)``: tools in declaration order; warnings for what works
        only in part (a read-only database that is missing); problems for what cannot be built
        (a bad entry, two toolboxes with one tool name). Lines name the toolbox.
    """
    boxes, problems, _ = parse_builtin_toolboxes(agent.spec.builtinToolboxes, agent.spec.fileSandboxes)
    warnings: list[str] = []
    tools: list[BuiltinTool] = []
    seen: dict[str, BuiltinToolbox] = {}
    for box in boxes:
        tool = _build_one(agent, box, warnings)
        tool.gate = parse_activation(box.config.model_extra or {}).gate
        other = seen.setdefault(tool.original_name, box)
        if other is not box:
            problems.append(f"{box.label}: its tool {tool.original_name} is also the tool of {other.label}")
            continue
        tools.append(tool)
    return tools, warnings, problems
