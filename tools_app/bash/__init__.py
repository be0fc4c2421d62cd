"""Bash / binary tools, protocol v1 (docs/tools.md §3).

* :mod:`.protocol`: the ``describe`` document and the ``run`` command line and environment;
* :mod:`.process`: running one process in its own process group, with timeouts and cancellation;
* :mod:`.tool`: :class:`~.tool.BashTool`, the tool the LLM calls as ``bash_<slug>``;
* :mod:`.loading`: loading one executable or every tool of a directory.
"""
