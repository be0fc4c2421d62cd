"""What ``agents check`` says about one loaded agent, as lines (docs/running.md §6).

The admin's "Check" button shows these lines for a stored agent before it is saved, so an
operator reads the same account of an agent whichever way it was written.
"""

from __future__ import annotations

from agentfiles.loader import LoadedAgent
from agentfiles.parameters import AgentParameters
from agents_app.narrowing import DERIVE_NAME, DESCRIBE_NAME
from tools_app.mcp.toolbox import McpToolbox
from tools_app.subagent import PREFIX
from tools_app.toolset import ToolSet


def check_lines(loaded: LoadedAgent, toolset: ToolSet, parameters: AgentParameters) -> list[str]:
    """The report of one loaded agent.

    Args:
        loaded: the agent (its spec gives slug and announce).
        toolset: its built tools (without its helpers' tools, which a run adds).
        parameters: its parameters in this process.
    Returns:
        ``<slug>: <announce> (<n> tools)``, then ``<slug>: tool <wire name>`` per tool (its
        helpers' ``io_prompt_agent_<helper>``, ``describe_agent`` and ``derive_agent`` included),
        ``<slug>: MCP server <name>: <tools>`` per MCP server, ``<slug>: parameter <name>
        (<scope>, ...): <how it resolves>`` per parameter (never a value), ``warning: ...`` per
        warning or notice of the toolset, and ``  <slug>: <where> '<path>': <base> (<found>)`` per
        path the agent names.
    """
    slug = loaded.spec.slug
    helpers = [f"{PREFIX}{helper}" for helper in loaded.helper_slugs]
    names = [*helpers, *([DESCRIBE_NAME, DERIVE_NAME] if helpers else []), *toolset.names()]
    lines = [f"{slug}: {loaded.spec.announce} ({len(names)} tools)"]
    lines += [f"{slug}: tool {name}" for name in names]
    for box in toolset.live:
        if isinstance(box, McpToolbox):
            listed = ", ".join(tool.name for tool in box.snapshot()[1]) or "no tools"
            lines.append(f"{slug}: MCP server {box.config.name}: {listed}")
    for name, decl in parameters.decls.items():
        secret = ["secret"] if decl.secret else []
        traits = ", ".join([decl.scope, *secret, "required" if decl.required else "optional"])
        lines.append(f"{slug}: parameter {name} ({traits}): {parameters.resolution(name)}")
    lines += [f"warning: {slug}: {line}" for line in [*toolset.warnings, *toolset.notices]]
    lines += [f"  {slug}: {where} '{found.named}': {found.base} ({found.path})" for where, found in loaded.paths]
    return lines


#: The toolbox keys whose tools are known only once the agent is built: their scripts are described,
#: their servers started, their documents fetched then (docs/agents.md §9).
BUILT_WHEN_LOADED = ("bashToolboxes", "mcpServers", "openApiToolboxes", "builtinToolboxes")


def stored_check_lines(loaded: LoadedAgent, parameters: AgentParameters) -> list[str]:
    """The report of a stored agent checked before it is saved, from what it declares alone:
    checking runs nothing (docs/agents.md §9).

    Args:
        loaded: the agent as :func:`agents_app.stored.load_stored_agent` gives it (tools not built).
        parameters: its parameters, ``Command`` defaults pending.
    Returns:
        ``<slug>: <announce> (<n> tools known before loading)``, then ``<slug>: tool <wire name>``
        for its helpers' tools and its ``externalTools``, ``<slug>: <key>[<i>]: built when the agent
        is loaded`` per toolbox (and for ``toolDirectory``), then the parameter lines of
        :func:`check_lines`.
    """
    spec = loaded.spec
    slug = spec.slug
    helpers = [f"{PREFIX}{helper}" for helper in loaded.helper_slugs]
    names = [*helpers, *([DESCRIBE_NAME, DERIVE_NAME] if helpers else []), *(tool.name for tool in spec.externalTools)]
    lines = [f"{slug}: {spec.announce} ({len(names)} tools known before loading)"]
    lines += [f"{slug}: tool {name}" for name in names]
    if spec.toolDirectory is not None:
        lines.append(f"{slug}: toolDirectory '{spec.toolDirectory}': built when the agent is loaded")
    for key in BUILT_WHEN_LOADED:
        entries = loaded.contents.get(key)
        for index, _ in enumerate(entries if isinstance(entries, list) else []):
            lines.append(f"{slug}: {key}[{index}]: built when the agent is loaded")
    for name, decl in parameters.decls.items():
        secret = ["secret"] if decl.secret else []
        traits = ", ".join([decl.scope, *secret, "required" if decl.required else "optional"])
        lines.append(f"{slug}: parameter {name} ({traits}): {parameters.resolution(name)}")
    return lines
