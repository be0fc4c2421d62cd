"""``agents mcp-server``: the agents of the ``--agent-file`` list as MCP tools over stdio (docs/guide-mcp.md §2).

One tool per agent file, ``ask_<slug>_<NNN>`` where ``NNN`` is the file's position in the list
(``ask_weather_000``, ``ask_writer_001``), in that order; helpers stay tools of their root. Each
call is a stored session, run until blocked, as for ``POST /mcp``; its owner is nobody, as
without authentication. An unknown tool or a call without a string ``prompt`` answers an error
result (``got an error: no matching tool for <name>``, ``got an error: no prompt given``).

stdout carries JSON-RPC only: while serving, the SDK's transport points the process's fd 1 at
stderr, where the logs go too.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server

from agents_app.registry import get_registry
from sessions_app.mcp.asks import AskOutcome, ask_agent
from sessions_app.mcp.protocol import AgentTool, build_server


class StdioExposure:
    """``ask_<slug>_<NNN>`` for each agent file, in the order they were given."""

    def tools(self, state: Any) -> list[AgentTool]:
        """One tool per root agent file."""
        trees = get_registry().trees
        return [
            AgentTool(f"ask_{slug}_{index:03d}", slug, tree.root.spec.announce)
            for index, (slug, tree) in enumerate(trees.items())
        ]

    def ask(self, tool: AgentTool, prompt: str, state: Any, params: dict[str, Any]) -> AskOutcome:
        """A session without owner, run until blocked, with the parameters ``_meta`` gives."""
        return ask_agent(tool.slug, prompt, None, params=params)

    def refuse(self, message: str) -> types.CallToolResult:
        """An error result, as agents-exe answers (with ``isError``)."""
        text = types.TextContent(type="text", text=f"got an error: {message}")
        return types.CallToolResult(content=[text], is_error=True)


def serve() -> None:
    """Serve MCP on stdin and stdout until stdin closes."""
    server = build_server(StdioExposure(), name="agents-exe-mcp-server", version="0.0.1")

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)
