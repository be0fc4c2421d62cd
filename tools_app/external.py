"""External tools: declared in the agent file with a JSON schema, run by the outside world
(docs/agents.md §10, docs/tools.md §5.3).

The model is offered them like any other tool. Their calls are deferred unless a policy rule
names them (``tools_app.policy``): a worker answers through the call's continuation token. When a
rule makes one run in the server anyway, there is nothing to run, and the call fails saying so.
"""

from __future__ import annotations

from typing import Any

from agentfiles.schema import ExternalToolDecl

from .base import Tool, ToolContext, ToolResult

#: The reason a deferred external call is given (shown in ``calls.deferred`` and pending calls).
EXTERNAL_REASON = "external tool"


class ExternalTool(Tool):
    """An ``externalTools`` entry as a tool: its name, description and schema, and no body."""

    def __init__(self, decl: ExternalToolDecl) -> None:
        self.name = decl.name
        self.description = decl.description
        self.parameters = decl.parameters

    def __repr__(self) -> str:
        return f"ExternalTool(name={self.name!r})"

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Always an error: an external tool is answered through a continuation, never run here."""
        return ToolResult.error(
            f"Error: tool {self.name} is run outside this server; a policy rule made it run here, where it has no body"
        )


def external_tools(decls: list[ExternalToolDecl]) -> list[Tool]:
    """One :class:`ExternalTool` per declaration, in file order."""
    return [ExternalTool(decl) for decl in decls]
