"""A small MCP server for the tests, written with the MCP SDK's server API.

Run as ``python tests/mcp_demo_server.py`` (stdio) or ``python tests/mcp_demo_server.py --http
PORT`` (streamable HTTP at ``http://127.0.0.1:PORT/mcp``). Each start appends its pid to the file
named by ``DEMO_MCP_PID_FILE``, when set, so that tests can count starts and check that none
outlives its server or worker.

Tools: ``files.read`` (a dotted name), ``echo``, ``add_tool`` (adds ``late_tool`` and announces the
change with ``notifications/tools/list_changed``), ``slow`` (reports progress before answering),
``picture`` (an image part and a text part), ``fail`` (``isError: true``), ``refuse`` (a JSON-RPC
error with code -32000, a server's own error code), ``crash`` (the server exits without
answering), ``hang`` (blocks the whole server: it answers nothing any more; over HTTP it wedges its
session alone, see :class:`WedgingApp`) and ``wait`` (never
answers, but a cancellation ends it). ``echo`` answers ``<text> (pid <pid>)``.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

#: A 1x1 red PNG.
RED_DOT = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc000"
        "00030101001bb6ee560000000049454e44ae426082"
    )
).decode()

state = {"late": False}


def _tool(name: str, description: str, properties: dict[str, Any] | None = None) -> types.Tool:
    schema = {"type": "object", "properties": properties or {}, "required": sorted(properties or {})}
    return types.Tool(name=name, description=description, input_schema=schema)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    tools = [
        _tool("files.read", "reads a file", {"path": {"type": "string", "description": "which file"}}),
        _tool("echo", "says the text again", {"text": {"type": "string"}}),
        _tool("add_tool", "adds late_tool to the list"),
        _tool("slow", "reports progress", {"steps": {"type": "integer", "description": "how many"}}),
        _tool("picture", "draws a red dot"),
        _tool("fail", "always fails"),
        _tool("refuse", "answers a JSON-RPC error"),
        _tool("crash", "exits without answering"),
        _tool("hang", "never answers, nor anything else: it blocks the server"),
        _tool("wait", "never answers, until the call is cancelled"),
    ]
    if state["late"]:
        tools.append(_tool("late_tool", "appeared at run time"))
    return types.ListToolsResult(tools=tools)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    name = params.name
    if name == "files.read":
        return _text(f"contents of {arguments.get('path')}")
    if name == "echo":
        return _text(f"{arguments.get('text')} (pid {os.getpid()})")
    if name == "add_tool":
        state["late"] = True
        await ctx.session.send_tool_list_changed()
        return _text("late_tool added")
    if name == "slow":
        steps = int(arguments.get("steps") or 3)
        for step in range(1, steps + 1):
            await ctx.session.report_progress(step, steps, f"step {step} of {steps}")
            await anyio.sleep(0.05)
        return _text(f"{steps} steps done")
    if name == "picture":
        image = types.ImageContent(type="image", data=RED_DOT, mime_type="image/png")
        return types.CallToolResult(content=[types.TextContent(type="text", text="a red dot"), image])
    if name == "fail":
        return types.CallToolResult(content=[types.TextContent(type="text", text="it broke")], is_error=True)
    if name == "refuse":
        raise MCPError(code=-32000, message="upstream unavailable")
    if name == "crash":
        sys.stderr.flush()
        os._exit(3)
    if name == "hang":
        time.sleep(3600)  # blocks the event loop: no ping, no cancellation is answered
    if name == "wait":
        await anyio.sleep_forever()  # notifications/cancelled interrupts it
    if name == "late_tool" and state["late"]:
        return _text("late tool answered")
    raise ValueError(f"unknown tool {name}")


class DemoServer(Server[Any]):
    """Announces ``tools.listChanged`` on every transport (the HTTP one asks with no options)."""

    def create_initialization_options(self, notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, *args, **kwargs)


server = DemoServer("demo", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    args = parser.parse_args()
    pid_file = os.environ.get("DEMO_MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "a") as out:
            out.write(f"{os.getpid()}\n")
    options = server.create_initialization_options()
    if args.http is None:

        async def serve_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, options)

        anyio.run(serve_stdio)
        return
    import uvicorn

    uvicorn.run(WedgingApp(server.streamable_http_app()), host="127.0.0.1", port=args.http, log_level="warning")


class WedgingApp:
    """The HTTP app, where a ``hang`` call wedges its session alone: neither it nor any later
    POST of that session is answered (its ``DELETE`` is), while other sessions work. Each new
    session's id is appended to the file named by ``DEMO_MCP_SESSIONS_FILE``, when set, and the
    ``traceparent`` header of each ``tools/call`` (``-`` without one) to the file named by
    ``DEMO_MCP_TRACEPARENTS_FILE``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.wedged: set[str] = set()
        self.seen: set[str] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        session = dict(scope["headers"]).get(b"mcp-session-id", b"").decode()
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if session and session not in self.seen:
            self.seen.add(session)
            sessions_file = os.environ.get("DEMO_MCP_SESSIONS_FILE")
            if sessions_file:
                with open(sessions_file, "a") as out:
                    out.write(f"{session}\n")
        traceparents_file = os.environ.get("DEMO_MCP_TRACEPARENTS_FILE")
        if traceparents_file and b'"tools/call"' in body:
            with open(traceparents_file, "a") as out:
                out.write(dict(scope["headers"]).get(b"traceparent", b"-").decode() + "\n")
        if session in self.wedged or (b'"tools/call"' in body and b'"name":"hang"' in body.replace(b" ", b"")):
            self.wedged.add(session)
            await anyio.sleep_forever()
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


if __name__ == "__main__":
    main()
