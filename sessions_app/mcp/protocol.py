"""Our agents as MCP tools: the MCP server both transports share, built on the MCP SDK's ``Server``.

An :class:`Exposure` says which agents are tools and under which names: ``ask_<slug>`` for
``POST /mcp``, ``ask_<slug>_<NNN>`` for ``agents mcp-server``. :func:`build_server` gives the SDK
server that answers ``initialize``, ``ping``, ``tools/list``, ``tools/call`` and the empty
``resources/list`` and ``prompts/list``; any other method is ``-32601``. Protocol versions
``2025-06-18``, ``2025-03-26`` and ``2024-11-05`` are spoken: a client asking for one of them
gets it, any other gets ``2025-06-18``.

A call's input is ``{"prompt": string}``; it runs the agent as :func:`~sessions_app.mcp.asks.ask_agent`
says, in a thread (it blocks and uses the database), and its result carries
``_meta.session_id``. ``_meta."agents-exe/params"`` on the call gives the session's parameters
(an object of name -> JSON value, over the transport's own, e.g. ``Agents-Param-*`` headers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio.to_thread
import mcp_types as types
from django.db import connections
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError

from sessions_app.mcp.asks import AskOutcome

#: The protocol versions spoken, newest first.
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
LATEST_VERSION = PROTOCOL_VERSIONS[0]
#: Where a ``tools/call`` carries parameters for the session it creates.
PARAMS_META_KEY = "agents-exe/params"
#: The methods answered; anything else is -32601.
METHODS = frozenset({"initialize", "ping", "tools/list", "tools/call", "resources/list", "prompts/list"})

PROMPT_SCHEMA = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "Prompt to send to the agent"}},
    "required": ["prompt"],
}


@dataclass(frozen=True)
class AgentTool:
    """One agent exposed as an MCP tool: the tool's name, the agent's slug and its announce."""

    name: str
    slug: str
    description: str


class Exposure(Protocol):
    """Which agents a transport exposes, and how it runs them (both called in a worker thread)."""

    def tools(self, state: Any) -> list[AgentTool]:
        """The tools, in order. ``state`` is the transport's per-request state (the caller)."""
        ...

    def ask(self, tool: AgentTool, prompt: str, state: Any, params: dict[str, Any]) -> AskOutcome:
        """Run the agent behind ``tool`` on ``prompt`` for the caller in ``state``, with the
        parameters ``_meta`` gave the call."""
        ...

    def refuse(self, message: str) -> types.CallToolResult:
        """What an unknown tool, a call without a string ``prompt``, or refused parameters answer:
        a result, or an ``MCPError`` raised (``-32602``)."""
        ...


def _in_thread(function: Any, *args: Any) -> Any:
    """Run ``function`` and close the database connections it opened in this (worker) thread."""
    try:
        return function(*args)
    finally:
        connections.close_all()


def call_result(outcome: AskOutcome) -> types.CallToolResult:
    """The ``tools/call`` result of an outcome: one text part, ``isError`` on failure, the session in ``_meta``."""
    meta = {"session_id": outcome.session_id} if outcome.session_id else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=outcome.text)], is_error=outcome.is_error, _meta=meta
    )


async def _negotiate(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: answer only :data:`METHODS`, and ``initialize`` with one of :data:`PROTOCOL_VERSIONS`."""
    if ctx.request_id is None:  # notifications pass
        return await call_next(ctx)
    if ctx.method not in METHODS:
        raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    params = ctx.params
    if ctx.method == "initialize" and isinstance(params, Mapping):
        if params.get("protocolVersion") not in PROTOCOL_VERSIONS:
            ctx = replace(ctx, params={**params, "protocolVersion": LATEST_VERSION})
    return await call_next(ctx)


def build_server(exposure: Exposure, *, name: str, version: str) -> Server[Any]:
    """The SDK server exposing ``exposure``'s agents; its lifespan state is the transport's
    per-request state (handed to the exposure).

    Args:
        exposure: the agents and how to run them.
        name, version: the ``serverInfo``.
    """

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        tools = await anyio.to_thread.run_sync(_in_thread, exposure.tools, ctx.lifespan_context)
        return types.ListToolsResult(
            tools=[types.Tool(name=t.name, description=t.description, input_schema=PROMPT_SCHEMA) for t in tools]
        )

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        state = ctx.lifespan_context
        tools = await anyio.to_thread.run_sync(_in_thread, exposure.tools, state)
        tool = next((t for t in tools if t.name == params.name), None)
        if tool is None:
            return exposure.refuse(f"no matching tool for {params.name}")
        prompt = (params.arguments or {}).get("prompt")
        if not isinstance(prompt, str):
            return exposure.refuse("no prompt given")
        given = (params.meta or {}).get(PARAMS_META_KEY) if isinstance(params.meta, Mapping) else None
        if given is not None and not isinstance(given, dict):
            return exposure.refuse(f"_meta.{PARAMS_META_KEY} must be an object of parameter name -> value")
        outcome = await anyio.to_thread.run_sync(_in_thread, exposure.ask, tool, prompt, state, given or {})
        if outcome.refused:
            return exposure.refuse(outcome.text)
        return call_result(outcome)

    async def empty_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def empty_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    server: Server[Any] = Server(
        name,
        version=version,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=empty_resources,
        on_list_prompts=empty_prompts,
    )
    server.middleware.append(_negotiate)
    return server
