"""MCP servers as toolboxes: the client side of MCP (docs/guide-mcp.md §1).

* :mod:`.config`: the ``mcpServers`` entries (``McpSimpleBinary``, and our ``McpStreamableHttp``);
* :mod:`.client`: one client session with one server, on the manager's event loop;
* :mod:`.manager`: this process's event loop thread and its sessions, one per agent and entry;
* :mod:`.toolbox`: the live tools of one entry (``mcp_<server>_<tool>``) and their calls;
* :mod:`.results`: an MCP tool result as a tool result.
"""
