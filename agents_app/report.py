"""What ``agents check`` says about one loaded agent, as lines (README, "Checking agent files").

The admin's "Check" button shows these lines for a stored agent before it is saved, so an
operator reads the same account of an agent whichever way it was written.
"""

from __future__ import annotations

from agents_app.loader import LoadedAgent
from agents_app.narrowing import DERIVE_NAME, DESCRIBE_NAME
from agents_app.parameters import AgentParameters
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
            names = ", ".join(tool.name for tool in box.snapshot()[1]) or "no tools"
            lines.append(f"{slug}: MCP server {box.config.name}: {names}")
    for name, decl in parameters.decls.items():
        secret = ["secret"] if decl.secret else []
        traits = ", ".join([decl.scope, *secret, "required" if decl.required else "optional"])
        lines.append(f"{slug}: parameter {name} ({traits}): {parameters.resolution(name)}")
    lines += [f"warning: {slug}: {line}" for line in [*toolset.warnings, *toolset.notices]]
    lines += [f"  {slug}: {where} '{found.named}': {found.base} ({found.path})" for where, found in loaded.paths]
    return lines
