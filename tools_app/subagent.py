"""Helper agents as tools: ``io_prompt_agent_<slug>`` (docs/tools.md §6; docs/decisions.md §4, §13).

The tool only declares the call to the LLM. Running it belongs to the session engine, which
starts the helper as a child session of its own and gives its final answer back as the result.
"""

from __future__ import annotations

from typing import Any

from tools_app.base import Tool, ToolContext, ToolResult

PREFIX = "io_prompt_agent_"


class SubAgentTool(Tool):
    """The tool that asks helper ``slug`` a question (argument ``what``).

    Args:
        slug: the helper agent's slug.
        announce: the helper's one-line description, shown to the LLM.
    """

    def __init__(self, slug: str, announce: str) -> None:
        self.slug = slug
        self.name = f"{PREFIX}{slug}"
        self.description = announce
        self.parameters = {
            "type": "object",
            "properties": {"what": {"type": "string", "description": "what to ask the helper agent"}},
            "required": ["what"],
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Not run in place: the session engine runs helpers as child sessions."""
        return ToolResult.error(f"Error: {self.name} runs as a child session and cannot be called directly")


def helper_slug(tool: Tool) -> str | None:
    """The helper slug of a sub-agent tool, ``None`` for any other tool."""
    return tool.slug if isinstance(tool, SubAgentTool) else None
