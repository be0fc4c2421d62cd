"""An MCP server (the SDK's low-level ``Server``, over stdio) whose ``tools/list`` never ends.

``python mcp_pages.py same`` answers every page with ``nextCursor: "again"`` (a cursor loop);
``python mcp_pages.py new`` answers a new cursor every page (``page-1``, ``page-2``, ...). Each
``tools/list`` request appends a line to the file named by ``MCP_PAGES_FILE``, so that a test can
count how many pages it was asked.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

MODE = sys.argv[1]
asked = {"pages": 0}


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    asked["pages"] += 1
    with open(os.environ["MCP_PAGES_FILE"], "a") as out:
        out.write(f"{asked['pages']}\n")
    cursor = "again" if MODE == "same" else f"page-{asked['pages']}"
    tool = types.Tool(name=f"tool_{asked['pages']}", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool], next_cursor=cursor)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text="never listed")])


server = Server("pages", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
