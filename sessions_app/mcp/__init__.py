"""Our agents as MCP tools: the server side of MCP (docs/guide-mcp.md §2).

* :mod:`.asks`: one call of an agent, a stored session run until blocked, and its outcome;
* :mod:`.protocol`: the MCP SDK server both transports share (methods, versions, tools);
* :mod:`.http`: ``POST /mcp`` on ``agents serve``, plain JSON answers;
* :mod:`.stdio`: ``agents mcp-server`` over stdio.
"""
