"""MCP servers as toolboxes: :class:`McpToolbox` and the tools it lists (docs/guide-mcp.md §1).

A toolbox is one ``mcpServers`` entry of one agent. :meth:`McpToolbox.start` starts its server
(once per process: the manager keys it by the agent and the entry) and lists its tools; a spawn
failure or a discovery timeout is a :class:`~tools_app.mcp.client.McpStartError`, which the
toolset turns into a load error. :meth:`McpToolbox.snapshot` gives the tools as last listed,
with a revision that changes whenever the server's list does, so the toolset can offer the new
list to the model's next request.

Each tool is :class:`McpTool`, called ``mcp_<server>_<tool>`` (normalized, with the reverse map
names.py keeps; a name keeps its normalized form for the life of the toolbox). Its JSON schema
is the server's ``inputSchema``; a call goes to the server through the manager and comes back
through :func:`~tools_app.mcp.results.convert_result`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Hashable
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from foundation.env import env

from ..base import Tool, ToolContext, ToolResult
from ..names import ToolNameMap
from .client import McpGone, McpStartError
from .config import ServerConfig
from .manager import McpCancelled, McpTimeout, get_manager
from .results import convert_result

#: Seconds a server may take to start and list its tools, when settings do not say.
DEFAULT_DISCOVERY_TIMEOUT = 30.0


def discovery_timeout() -> float:
    """``settings.AGENTS["MCP_DISCOVERY_TIMEOUT"]`` (``AGENTS_MCP_DISCOVERY_TIMEOUT``, 30 s by
    default); the environment variable directly where Django is not set up (``agents check``)."""
    from django.conf import settings

    if settings.configured and hasattr(settings, "AGENTS"):
        return float(settings.AGENTS.get("MCP_DISCOVERY_TIMEOUT", DEFAULT_DISCOVERY_TIMEOUT))
    return env.float("AGENTS_MCP_DISCOVERY_TIMEOUT", default=DEFAULT_DISCOVERY_TIMEOUT)


def adapt_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """The server's ``inputSchema`` for the model: an object schema with ``properties``, each with
    a ``description`` (``""`` when the server gives none); ``required`` as the server says."""
    adapted = copy.deepcopy(schema) if isinstance(schema, dict) else {}
    adapted["type"] = "object"
    properties = adapted.get("properties")
    adapted["properties"] = dict(properties) if isinstance(properties, dict) else {}
    for key, value in adapted["properties"].items():
        if isinstance(value, dict) and "description" not in value:
            adapted["properties"][key] = {**value, "description": ""}
    return adapted


class McpTool(Tool):
    """One tool of an MCP server, as the model sees it.

    Attributes:
        name: the wire name (``mcp_<server>_<tool>``, normalized).
        mcp_name: the tool's own name on the server, used to call it.
        toolbox: the toolbox it came from.
    """

    def __init__(self, toolbox: McpToolbox, listed: types.Tool, wire_name: str) -> None:
        self.toolbox = toolbox
        self.mcp_name = listed.name
        self.name = wire_name
        self.description = listed.description or listed.title or ""
        self.parameters = adapt_schema(listed.input_schema)
        self.gate = toolbox.gate

    @property
    def original_name(self) -> str:
        """``mcp_<server>_<tool>`` before normalization."""
        return self.toolbox.original_name(self.mcp_name)

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Call the tool on its server (started again first if it went away).

        Never raises: a server that cannot start, that goes away during the call, answers a
        JSON-RPC error or ``isError: true``, or a timeout or cancellation, all give a tool error
        whose text names the tool. Progress notifications reach ``ctx.progress``.
        """
        try:
            result = get_manager().call(
                self.toolbox.key,
                self.toolbox.config,
                self.mcp_name,
                arguments,
                start_timeout=discovery_timeout(),
                timeout=ctx.timeout,
                cancel=ctx.cancel,
                on_progress=ctx.progress,
            )
        except McpStartError as error:
            return ToolResult.error(f"Error: tool {self.name}: {error}")
        except McpGone as error:
            return ToolResult.error(
                f"Error: tool {self.name}: MCP server {self.toolbox.config.name} stopped during the call ({error});"
                " it will be started again on the next call"
            )
        except MCPError as error:
            return ToolResult.error(f"Error: tool {self.name}: calling error: {error.error.message}")
        except McpTimeout:
            return ToolResult.error(f"Error: tool {self.name} timed out after {ctx.timeout:g}s")
        except McpCancelled:
            return ToolResult.error(f"Error: tool {self.name} was cancelled")
        except Exception as error:  # a tool failure must reach the model, not crash the step
            return ToolResult.error(f"Error: tool {self.name} failed: {type(error).__name__}: {error}")
        return convert_result(result)


class McpToolbox:
    """The live tools of one ``mcpServers`` entry of one agent.

    Args:
        agent_key: what identifies the agent declaring it in this process (its slug and file).
        config: the entry.
        gate: the gate of its tools, from the entry's ``Activation`` (``tools_app.activation``).
    """

    def __init__(self, agent_key: Hashable, config: ServerConfig, gate: str | None = None) -> None:
        self.config = config
        self.gate = gate
        self.key: Hashable = (agent_key, config)
        self._names = ToolNameMap()
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None
        self._tools: list[McpTool] = []

    def original_name(self, mcp_name: str) -> str:
        """``mcp_<server>_<tool>``, the LLM name before normalization."""
        return f"mcp_{self.config.name}_{mcp_name}"

    def start(self, timeout: float | None = None) -> None:
        """Start the server (or find it running) and list its tools.

        Raises:
            McpStartError: ``<name>: Failed to initialize MCP server: ...`` or ``<name>: Timeout
                waiting for MCP server tool discovery (30s)``.
        """
        get_manager().start(self.key, self.config, discovery_timeout() if timeout is None else timeout)
        self.snapshot()

    def snapshot(self) -> tuple[Hashable, list[McpTool]]:
        """``(revision, tools)``: the tools as last listed, and a value that changes with them.

        Before this process listed them (a forked worker that has not called the server yet),
        the tools last known are kept.
        """
        connection = get_manager().connection(self.key, self.config)
        with self._lock:
            current = (id(connection), connection.generation)
            if connection.generation and current != self._seen:
                self._tools = [
                    McpTool(self, listed, self._names.add(self.original_name(listed.name)))
                    for listed in connection.tools
                ]
                self._seen = current
            return self._seen, list(self._tools)
