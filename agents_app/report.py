"""What ``agents check`` says about one loaded agent, as lines (README, "Checking agent files").

The admin's "Check" button shows these lines for a stored agent before it is saved, so an
operator reads the same account of an agent whichever way it was written.
"""

from __future__ import annotations

from agents_app.loader import LoadedAgent
from agents_app.parameters import AgentParameters
from tools_app.mcp.toolbox import McpToolbox
from tools_app.toolset import ToolSet


def check_lines(loaded: LoadedAgent, toolset: ToolSet, parameters: AgentParameters) -> list[str]:
    """The report of one loaded agent.

    Args:
        loaded: the agent (its spec gives slug and announce).
        toolset: its built tools.
        parameters: its parameters in this process.
    Returns:
        ``<slug>: <announce> (<n> tools)``, then ``<slug>: tool <wire name>`` per tool,
        ``<slug>: MCP server <name>: <tools>`` per MCP server, ``<slug>: parameter <name>
        (<scope>, ...): <how it resolves>`` per parameter (never a value), ``warning: ...`` per
        warning or notice of the toolset, and ``  <slug>: <where> '<path>': <base> (<found>)`` per
        path the agent names.
    """
    slug = loaded.spec.slug
    lines = [f"{slug}: {loaded.spec.announce} ({len(toolset.tools)} tools)"]
    lines += [f"{slug}: tool {name}" for name in toolset.names()]
    for box in toolset.live:
        if isinstance(box, McpToolbox):
            names = ", ".join(tool.name for tool in box.snapshot()[1]) or "no tools"
            lines.append(f"{slug}: MCP server {box.config.name}: {names}")
    for name, decl in parameters.decls.items():
        secret = ["secret"] if decl.secret else []
        traits = ", ".join([decl.scope, *secret, "required" if decl.required else "optional"])
        lines.append(f"{slug}: parameter {name} ({traits}): {parameters.resolution(name)}")
    lines += [f"warning: {slug}: {line}" for line in [*toolset.warnings, *toolset.notices]]
    lines += [f"  {slug}: {where} '{found.named}': {found.base} ({found.path})" for where, found in loaded.paths]
    return lines
