"""An MCP stdio server for the tests whose one tool, ``environment``, answers its process's
environment as a JSON object (docs/tools.md, "Tool environments")."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {}, "required": []}
    tool = types.Tool(name="environment", description="its environment", input_schema=schema)
    return types.ListToolsResult(tools=[tool])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = json.dumps(dict(os.environ), sort_keys=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("environment", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve)
