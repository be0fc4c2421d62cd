"""Helper agents as tools: ``io_prompt_agent_<slug>`` (docs/tools.md §6, §8.6; docs/decisions.md §4, §13).

The tool only declares the call to the LLM. Running it belongs to the session engine, which
starts the helper as a child session of its own and gives its final answer back as the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfiles.schema import BindingValue
from tools_app.base import Tool, ToolContext, ToolResult

PREFIX = "io_prompt_agent_"

#: The narrowing arguments of a helper call (docs/tools.md §8.6).
NARROWING_PROPERTIES: dict[str, Any] = {
    "bindings": {
        "type": "array",
        "description": "bind arguments of the helper's tools for this call: {agent?, tool?, arg, value}",
        "items": {"type": "object"},
    },
    "with": {"type": "object", "description": "give the helper's parameters for this call: {name: value}"},
    "as": {"type": "string", "description": "a narrowing named with derive_agent"},
}


class SubAgentTool(Tool):
    """The tool that asks helper ``slug`` a question (argument ``what``; ``bindings``, ``with`` and
    ``as`` narrow it, unless its entry says ``narrowable: false``).

    Args:
        slug: the helper agent's slug.
        announce: the helper's one-line description, shown to the LLM.
        with_: the ``extraAgents`` entry's ``with`` (child parameter -> value of the caller's).
        narrowable: the entry's ``narrowable``.
    """

    def __init__(
        self, slug: str, announce: str, with_: Mapping[str, BindingValue] | None = None, narrowable: bool = True
    ) -> None:
        self.slug = slug
        self.name = f"{PREFIX}{slug}"
        self.description = announce
        self.with_ = dict(with_ or {})
        self.narrowable = narrowable
        properties: dict[str, Any] = {"what": {"type": "string", "description": "what to ask the helper agent"}}
        if narrowable:
            properties.update(NARROWING_PROPERTIES)
        self.parameters = {"type": "object", "properties": properties, "required": ["what"]}

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Not run in place: the session engine runs helpers as child sessions."""
        return ToolResult.error(f"Error: {self.name} runs as a child session and cannot be called directly")


def helper_slug(tool: Tool) -> str | None:
    """The helper slug of a sub-agent tool, ``None`` for any other tool."""
    return tool.slug if isinstance(tool, SubAgentTool) else None
