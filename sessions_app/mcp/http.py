"""``POST /mcp``: our agents as MCP tools over streamable HTTP, answered with plain JSON (docs/guide-mcp.md §2).

Every request or batch gets one JSON answer, never an event stream, and no ``Mcp-Session-Id``:
each request is served by the SDK server of :mod:`sessions_app.mcp.protocol` on a connection of
its own, through the SDK's in-process dispatcher. One ``ask_<slug>`` tool per root agent, stored
agents included; a call runs a session owned by the caller.

* a request answers 200 with its response; a batch, 200 with the responses of its requests (in
  order); notifications and client responses alone, 202 with no body;
* a body that is not JSON-RPC: 400 with ``-32700``; an empty batch: 400 with ``-32600``; an
  element of a batch that is not JSON-RPC: a ``-32600`` response in the batch's answer;
* an unknown method: ``-32601``, an unknown tool or a call without a string ``prompt``:
  ``-32602``, both in a 200;
* ``GET /mcp`` (and any method but ``POST``): 405.

Who may call is decided as for the REST API: the bearer tokens (401 without a valid one, when
authentication is on) and the origin check (403 ``forbidden_origin``, when it is off).

Parameters for the sessions the calls create come from ``Agents-Param-<name>`` headers (string
values; a ``-`` in the header's name stands for ``_``, since header names holding ``_`` are
dropped) and ``_meta."agents-exe/params"`` (any JSON, over a header of the same name); refused
parameters answer ``-32602`` with the code and message of docs/api.md §7.15.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import mcp_types as types
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.shared.direct_dispatcher import DirectDispatcher, create_direct_dispatcher_pair
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from rest_framework.request import Request

from agents_app.registry import get_registry
from foundation.api import ApiViewSet, error_responses
from foundation.auth import Principal, caller
from foundation.openapi import required_body
from sessions_app.mcp.asks import AskOutcome, ask_agent
from sessions_app.mcp.protocol import LATEST_VERSION, PROTOCOL_VERSIONS, AgentTool, build_server

#: The header a client names its protocol version with after ``initialize``.
VERSION_HEADER = "MCP-Protocol-Version"


#: The prefix of the headers that give parameters.
PARAM_HEADER = "agents-param-"


@dataclass(frozen=True)
class CallerState:
    """The per-request state the SDK server hands to the handlers: who is calling, and the
    parameters its ``Agents-Param-*`` headers give."""

    principal: Principal
    params: dict[str, Any] = field(default_factory=dict)


def header_params(headers: Any) -> dict[str, str]:
    """``Agents-Param-<name>: <value>`` headers as parameter values (``-`` in names read as ``_``)."""
    return {
        name[len(PARAM_HEADER):].lower().replace("-", "_"): value
        for name, value in headers.items()
        if name.lower().startswith(PARAM_HEADER) and len(name) > len(PARAM_HEADER)
    }


class HttpExposure:
    """``ask_<slug>`` for every root agent, files and stored agents, sessions owned by the caller."""

    def tools(self, state: CallerState) -> list[AgentTool]:
        """One tool per root agent, by slug."""
        return [AgentTool(f"ask_{a.spec.slug}", a.spec.slug, a.spec.announce) for a in get_registry().roots()]

    def ask(self, tool: AgentTool, prompt: str, state: CallerState, params: dict[str, Any]) -> AskOutcome:
        """A session of the caller, run until blocked; ``_meta``'s parameters over the headers'."""
        return ask_agent(tool.slug, prompt, state.principal.owner, params={**state.params, **params})

    def refuse(self, message: str) -> types.CallToolResult:
        """An unknown tool or a bad ``prompt`` is ``-32602``."""
        raise MCPError(code=types.INVALID_PARAMS, message=message)


_server = build_server(HttpExposure(), name="agents-server", version="0.1.0")


def _error(message_id: Any, code: int, message: str) -> dict[str, Any]:
    error = types.JSONRPCError(jsonrpc="2.0", id=message_id, error=types.ErrorData(code=code, message=message))
    # an error answering no request still says "id": null, as JSON-RPC 2.0 requires
    return {"id": None, **error.model_dump(by_alias=True, mode="json", exclude_none=True)}


def _error_reply(code: int, message: str, status: int) -> JsonResponse:
    return JsonResponse(_error(None, code, message), status=status)


async def _request(client: DirectDispatcher, request: types.JSONRPCRequest) -> dict[str, Any]:
    """One request through the SDK server: its JSON-RPC response or error."""
    try:
        result = await client.send_raw_request(request.method, request.params)
    except MCPError as error:
        reply: types.JSONRPCResponse | types.JSONRPCError = types.JSONRPCError(
            jsonrpc="2.0", id=request.id, error=error.error
        )
    else:
        reply = types.JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
    return reply.model_dump(by_alias=True, mode="json", exclude_none=True)


async def _serve(messages: list[Any], state: CallerState, version: str) -> list[dict[str, Any] | None]:
    """Serve decoded messages on a fresh connection; a reply (or ``None``) per message, in order."""
    client, server_side = create_direct_dispatcher_pair(can_send_request=False, raise_handler_exceptions=False)
    connection = Connection.from_envelope(version, None, None)
    replies: list[dict[str, Any] | None] = [None] * len(messages)

    async def answer(index: int, message: Any) -> None:
        if isinstance(message, types.JSONRPCRequest):
            replies[index] = await _request(client, message)
        elif isinstance(message, types.JSONRPCNotification):
            await client.notify(message.method, message.params)

    async with anyio.create_task_group() as peers:
        serve = partial(serve_connection, _server, server_side, connection=connection, lifespan_state=state)
        await peers.start(serve)
        # the client's side: the server sends no requests (nothing could carry them) and its
        # notifications have nowhere to go in a JSON answer
        await peers.start(client.run, _no_requests, _drop_notification)
        async with anyio.create_task_group() as requests:
            for index, message in enumerate(messages):
                if isinstance(message, dict):  # an element that is not JSON-RPC
                    replies[index] = _error(message.get("id"), types.INVALID_REQUEST, "Invalid Request")
                else:
                    requests.start_soon(answer, index, message)
        client.close()
        server_side.close()
    return replies


async def _no_requests(dctx: Any, method: str, params: Any) -> dict[str, Any]:
    raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=method)


async def _drop_notification(dctx: Any, method: str, params: Any) -> None:
    return None


def _decode(item: Any) -> Any:
    """A JSON-RPC message of the SDK's types, or the item itself (a dict) when it is not one."""
    try:
        return types.jsonrpc_message_adapter.validate_python(item, by_name=False)
    except ValidationError:
        return item if isinstance(item, dict) else {}


required_body("mcp")


class McpViewSet(ApiViewSet):
    """``/mcp``: the MCP endpoint (POST only)."""

    @extend_schema(
        operation_id="mcp",
        description="MCP over streamable HTTP (JSON answers only): a JSON-RPC request, notification or batch.",
        request={"application/json": {"$ref": "#/components/schemas/JsonRpcBody"}},
        responses={
            **error_responses(405),
            200: {"$ref": "#/components/schemas/JsonRpcBody"},
            202: OpenApiResponse(description="notifications and client responses only: no body"),
            400: {"$ref": "#/components/schemas/McpRefusal"},
        },
    )
    def create(self, request: Request) -> HttpResponse:
        """Serve one JSON-RPC message or a batch (see the module docstring for the answers)."""
        try:
            body = json.loads(request.body or b"")
        except (ValueError, RecursionError):
            return _error_reply(types.PARSE_ERROR, "Parse error", 400)
        batch = isinstance(body, list)
        if batch and not body:
            return _error_reply(types.INVALID_REQUEST, "Invalid Request: empty batch", 400)
        messages = [_decode(item) for item in (body if batch else [body])]
        if not batch and isinstance(messages[0], dict):
            return _error_reply(types.PARSE_ERROR, "Parse error: not a JSON-RPC message", 400)
        version = request.headers.get(VERSION_HEADER)
        state = CallerState(caller(request), header_params(request.headers))
        replies = anyio.run(_serve, messages, state, version if version in PROTOCOL_VERSIONS else LATEST_VERSION)
        answered = [reply for reply in replies if reply is not None]
        if not answered:
            return HttpResponse(status=202)
        return JsonResponse(answered if batch else answered[0], safe=False)
