"""The tools of one agent (docs/tools.md §2, §3.1, §7; docs/decisions.md §4).

:func:`build_toolset` turns a loaded agent into a :class:`ToolSet`: the bash tools of its
``toolDirectory`` and ``bashToolboxes``, the tools of its built-in toolboxes, its ``externalTools`` and its MCP
servers, with LLM-valid, unique wire names. Toolbox kinds this
server does not know make the build fail with one line per offending entry, so an agent
never runs with a silently smaller tool list.

What is fatal and what is only a warning:

* fatal (:class:`ToolBuildError`): a skill source or skill that cannot be read, an unknown
  ``autoEnableSkills`` name; an ``Activation`` of another
  shape; an HTTP toolbox whose entry or document cannot be used (tools_app/openapi); a ``bashToolboxes``
  path that is missing (directory, or ``SingleTool`` file) or not executable; two tools with the
  same name; an ``mcpServers`` entry that cannot be read, whose server does not start, or that
  does not list its tools in time (tools_app/mcp); a binding that cannot apply (``tools_app.bound``).
* warning (``ToolSet.warnings``): a script whose ``describe`` fails (error isolation,
  docs/tools.md §3.2); a missing ``toolDirectory`` (it also holds sub-agent files and is often declared without tools);
  a name rewritten to be LLM-valid (a notice for an OpenAPI or PostgREST name, rewritten as
  documented); a bound argument named in
  its tool's description; an agent binding that matches no tool yet, when MCP servers may list it later.

Bindings (docs/tools.md §8): a bash toolbox's ``Bindings`` apply to its tools, matched by their
slug; then the agent's ``bindings`` to every tool, matched by wire name, MCP tools included each
time their server's list is taken in.

Sub-agent tools (``io_prompt_agent_<slug>``) and other in-process tools are not built here: the
session engine builds them and adds them with :meth:`ToolSet.with_extra_tools`, which applies the
same naming and duplicate rules. Nothing is cached between builds; each build runs every ``describe``
again.

MCP servers and the ``toolDirectory`` are *live* toolboxes: their tool lists can change while the
agent is loaded. A toolset keeps them in ``live`` (after its other tools) and ``leading`` (before
them: the directory's scripts keep the place bash tools always had) and takes in their current
lists whenever it is read, so the model's next request offers the new tools (docs/tools.md §3.9).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from agentfiles.parameters import ParamValue
from agentfiles.schema import ActivationError, AgentSpec, parse_activation
from foundation.redaction import redact_urls

from .activation import HistorySource, meta_tools, open_gates
from .base import Tool, VisibleParams
from .bash.live import LiveBashDirectory
from .bash.loading import BashToolLoadError, load_bash_directory, load_single_tool
from .bash.protocol import DescribeError
from .bash.tool import BashTool
from .bound import ArgBinding, BindReport, BoundTool, bind_tools
from .builtin import build_builtin_tools
from .external import external_tools
from .mcp.client import McpStartError
from .mcp.config import McpConfigError, parse_server
from .mcp.toolbox import McpToolbox
from .names import ToolNameMap
from .openapi.loading import load_http_tools
from .openapi.tools import OpenApiTool
from .postgrest.tools import PostgrestTool
from .skills.tools import auto_enabled, load_skills, skill_tools

log = logging.getLogger("tools.toolset")


class _AgentLike(Protocol):
    """What :func:`build_toolset` needs of ``agentfiles.loader.LoadedAgent``."""

    spec: AgentSpec
    path: Path | None
    base_dir: Path

    def resolve(self, relative: str) -> Path: ...


class LiveToolbox(Protocol):
    """A toolbox whose tools can change while the agent is loaded (an MCP server, a
    ``toolDirectory``: ``tools_app.bash.live``)."""

    def snapshot(self) -> tuple[Hashable, Sequence[Tool]]:
        """``(revision, tools)``: the current tools, and a value that changes when they do."""
        ...


class ToolBuildError(Exception):
    """An agent's tools cannot be built; ``problems`` holds one human-readable line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass
class ToolSet:
    """The tools of an agent, in the order they are declared to the LLM.

    Attributes:
        tools: the tools; their ``name`` (wire name) is unique and LLM-valid. The tools given at
            construction come first, then those of the ``live`` toolboxes as last taken in (any
            method but ``tools`` itself takes in changes first; :meth:`refresh` does it alone).
        warnings: non-fatal load problems, one line each (shown by ``check`` and in logs).
        notices: remarks on bindings (a bound argument named in its tool's description, a binding
            that MCP tools may match later): warnings even for ``check``, which fails on the others.
        live: toolboxes whose tools can change, listed after the others (MCP servers).
        leading: toolboxes whose tools can change, listed before the others but after the tools
            :meth:`with_extra_tools` prepends (the ``toolDirectory``).
        binder: applies the agent's bindings to the live toolboxes' tools as they are taken in.
        initial_gates: the gates open before any call (``autoEnableSkills``; ``tools_app.activation``).

    The model sees a gated tool only while its gate is open in the session: the methods that
    declare tools take the session's answered calls (``history``; ``None`` for none yet), and
    :meth:`hidden` names the tools a call may not reach.

    Raises (on construction):
        ToolBuildError: two tools share a wire name.
    """

    tools: list[Tool]
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    live: list[LiveToolbox] = field(default_factory=list)
    leading: list[LiveToolbox] = field(default_factory=list)
    binder: Callable[[list[Tool]], list[Tool]] | None = None
    initial_gates: frozenset[str] = frozenset()
    _by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)
    _names: ToolNameMap = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name = {}
        self._names = ToolNameMap()
        problems = []
        for tool in self.tools:
            if tool.name in self._by_name:
                problems.append(f"duplicate tool name {tool.name}")
                continue
            self._by_name[tool.name] = tool
            try:
                self._names.reserve(tool.original_name, tool.name)
            except ValueError as exc:
                problems.append(f"tool {tool.name}: {exc}")
        if problems:
            raise ToolBuildError(problems)
        self._static = list(self.tools)
        self._static_by_name = dict(self._by_name)
        self._static_names = self._names.copy()
        #: where the leading toolboxes' tools go in the static list
        self._lead_at = 0
        self._lead: list[Tool] = []
        self._revisions: tuple[Hashable, ...] | None = None
        self._refresh_lock = threading.Lock()
        self.refresh(strict=True)

    def refresh(self, *, strict: bool = False) -> None:
        """Take in the live toolboxes' current tools (nothing to do when none changed).

        A live tool whose wire name another tool has is left out, and logged as
        ``tools.name_clash``; at construction (``strict``) it refuses the toolset instead, as
        any other clash of names does (docs/tools.md §3.9).

        Raises:
            ValueError: ``strict`` and a live tool's name is taken.
        """
        boxes = [*self.leading, *self.live]
        if not boxes:
            return
        snapshots = [box.snapshot() for box in boxes]
        revisions = tuple(revision for revision, _ in snapshots)
        with self._refresh_lock:
            if revisions == self._revisions:
                return
            by_name = dict(self._static_by_name)
            names = self._static_names.copy()
            taken: list[list[Tool]] = []
            for _, listed in snapshots:
                live_tools = self.binder(list(listed)) if self.binder is not None else listed
                kept: list[Tool] = []
                for tool in live_tools:
                    try:
                        if tool.name in by_name:
                            raise ValueError(f"tool name {tool.name!r} is already used")
                        names.reserve(tool.original_name, tool.name)
                    except ValueError as error:
                        if strict:
                            raise
                        log.warning("tool left out", extra={"kind": "tools.name_clash", "reason": str(error)})
                        continue
                    by_name[tool.name] = tool
                    kept.append(tool)
                taken.append(kept)
            lead = [tool for kept in taken[: len(self.leading)] for tool in kept]
            tail = [tool for kept in taken[len(self.leading) :] for tool in kept]
            tools = [*self._static[: self._lead_at], *lead, *self._static[self._lead_at :], *tail]
            self._by_name, self._names, self.tools, self._revisions = by_name, names, tools, revisions
            self._lead = lead

    def get(self, wire_name: str) -> Tool | None:
        """The tool the LLM called by ``wire_name``, ``None`` when there is none."""
        self.refresh()
        return self._by_name.get(wire_name)

    def names(self) -> list[str]:
        """The wire names, in order."""
        self.refresh()
        return [tool.name for tool in self.tools]

    def original_name(self, wire_name: str) -> str | None:
        """The name before normalization of a wire name (``None`` when unknown)."""
        self.refresh()
        return self._names.original(wire_name)

    def visible(self, history: HistorySource = None) -> list[Tool]:
        """The tools the model sees after ``history`` (the session's answered calls, oldest
        first, or a function giving them, called only when some tool is gated): the ungated ones,
        and the gated ones whose gate is open (``tools_app.activation``)."""
        self.refresh()
        if not any(tool.gate for tool in self.tools):
            return list(self.tools)
        calls = history() if callable(history) else history
        gates = open_gates(calls, self._by_name, self.initial_gates)
        return [tool for tool in self.tools if tool.gate is None or tool.gate in gates]

    def hidden(self, history: HistorySource = None) -> set[str]:
        """The wire names of the tools the model does not see after ``history``."""
        shown = {tool.name for tool in self.visible(history)}
        return {tool.name for tool in self.tools if tool.name not in shown}

    def openai_tools(self, params: VisibleParams = None, history: HistorySource = None) -> list[dict[str, Any]]:
        """The ``tools`` list of a chat-completions request: the tools :meth:`visible` after
        ``history``; ``params`` (the session's values) hide the exposed arguments that have a value
        (``tools_app.bound``)."""
        return [tool.openai_tool(params) for tool in self.visible(history)]

    def system_tools(self, params: VisibleParams = None, history: HistorySource = None) -> list[dict[str, Any]]:
        """The ``userTools`` list stored in a session's user turn (arguments as for :meth:`openai_tools`)."""
        return [tool.system_tool(params) for tool in self.visible(history)]

    def narrowed(self, bindings: dict[str, list[ArgBinding]]) -> ToolSet:
        """A copy whose tools named in ``bindings`` (wire name -> bound arguments) have those
        arguments bound too: a helper narrowed for one call (docs/tools.md §8.6). The tools as they
        are now, live ones included, are the copy's fixed list; this toolset is left alone."""
        self.refresh()
        tools = [BoundTool(tool, bindings[tool.name]) if bindings.get(tool.name) else tool for tool in self.tools]
        result = ToolSet(
            tools=tools, warnings=list(self.warnings), notices=list(self.notices), initial_gates=self.initial_gates
        )
        result._names = result._static_names = self._names.copy()
        return result

    def with_extra_tools(self, extra: Sequence[Tool], *, prepend: bool = True) -> ToolSet:
        """A new toolset with ``extra`` added (the extension point for sub-agent and IO tools).

        ``prepend`` puts them first, as agents-exe lists its in-process tools before the bash
        tools (docs/tools.md §1.4). A tool whose name is not LLM-valid, or collides with a
        normalized name, is added as a renamed shallow copy (the caller's object is left alone)
        and a warning is recorded.

        Raises:
            ToolBuildError: an extra tool has the same name as a tool already present (or as
                another extra tool).
        """
        self.refresh()
        names = self._static_names.copy()
        problems: list[str] = []
        warnings = list(self.warnings)
        added: list[Tool] = []
        # the toolDirectory's scripts as they are now: a helper may not take a name one has
        lead = {name for tool in self._lead for name in (tool.name, tool.original_name)}
        for tool in extra:
            original = tool.original_name
            if names.normalized(original) is not None or original in names or original in lead:
                problems.append(f"duplicate tool name {original}")
                continue
            wire = names.add(original)
            if wire != tool.name:
                tool = copy.copy(tool)
                tool.name = wire
                warnings.append(f"tool name {original} is not accepted by LLM APIs; exposed as {wire}")
            added.append(tool)
        if problems:
            raise ToolBuildError(problems)
        tools = added + self._static if prepend else self._static + added
        result = ToolSet(tools=tools, warnings=warnings, notices=list(self.notices), initial_gates=self.initial_gates)
        # Renamed copies no longer know their original name; keep the map that does.
        result._names = result._static_names = names
        result.live = list(self.live)
        result.leading = list(self.leading)
        result._lead_at = self._lead_at + (len(added) if prepend else 0)
        result.binder = self.binder
        result.refresh()
        return result


def build_toolset(
    agent: _AgentLike, params: Mapping[str, ParamValue] | None = None, api_keys: Mapping[str, str] | None = None
) -> ToolSet:
    """Build the tools of ``agent`` (a ``LoadedAgent``; only ``spec`` and ``resolve`` are used).

    ``params`` are the agent's parameter values in this process (process values and defaults):
    the ``Param`` values of its MCP servers' ``env`` and ``headers`` read them. ``api_keys`` are
    the API keys file's entries, for HTTP toolbox secrets read from it.

    Sources, in this order: executables of ``toolDirectory``, then each ``bashToolboxes`` entry
    (``FileSystemDirectory`` honouring ``BasenameFilter``, see ``list_tool_files``, or
    ``SingleTool``), then the ``builtinToolboxes`` (``tools_app.builtin``), then the OpenAPI and
    PostgREST toolboxes (their documents fetched now, ``tools_app.openapi``), then the skills of
    ``skillSources`` (repositories cloned now, ``tools_app.skills``), then the ``externalTools``
    (``tools_app.external``, named as declared), then the meta tools of the on-demand tool groups
    (``tools_app.activation``). Paths go through
    ``agent.resolve`` (relative to the agent file's directory). Bash tools get the wire name
    ``bash_<slug>``; every name is normalized if an LLM API would reject it.
    Then each ``mcpServers`` entry: its server is started (once per agent and process) and its
    tools listed, as the live toolboxes of the result (``mcp_<server>_<tool>``).

    Returns:
        the :class:`ToolSet` (possibly empty) with its warnings.
    Raises:
        ToolBuildError: listing every fatal problem found (see the module docstring).
    """
    spec = agent.spec
    problems: list[str] = []
    warnings: list[str] = []
    loaded: list[tuple[str, BashTool]] = []  # (where it came from, tool)

    leading: list[LiveBashDirectory] = []
    if spec.toolDirectory:
        directory = agent.resolve(spec.toolDirectory)
        # live: scripts dropped in, changed or removed later are taken in (docs/tools.md §3.9)
        tool_directory = LiveBashDirectory(directory, "toolDirectory", spec.slug)
        leading.append(tool_directory)
        if directory.is_dir():
            warnings.extend(f"toolDirectory: {w}" for w in tool_directory.load())
            for script in tool_directory.snapshot()[1]:
                loaded.append(("toolDirectory", script))
                if script.name != script.original_name:
                    warnings.append(f"{script.path}: tool name {script.original_name} is not accepted by LLM APIs; "
                                    f"exposed as {script.name}")
        else:
            warnings.append(f"toolDirectory: {directory}: directory not found; no tools loaded from it")

    for index, box in enumerate(spec.bashToolboxes):
        where = f"bashToolboxes[{index}]"
        contents = box.contents.model_dump()
        try:
            gate = parse_activation(contents).gate
        except ActivationError as error:
            problems.append(f"{where}.contents.{error}")
            continue
        path = agent.resolve(contents["Path"])
        try:
            if box.tag == "FileSystemDirectory":
                box_tools, found_warnings = load_bash_directory(path, contents.get("BasenameFilter"))
                warnings.extend(f"{where}: {w}" for w in found_warnings)
            else:
                box_tools = [load_single_tool(path)]
        except BashToolLoadError as exc:
            problems.append(f"{where}: {exc}")
            continue
        except DescribeError as exc:
            warnings.append(f"{where}: {path}: {exc}")
            continue
        for bash_tool in box_tools:
            bash_tool.gate = gate
        loaded.extend((where, tool) for tool in box_tools)

    # The same script reached twice (e.g. a SingleTool inside the toolDirectory) is still two
    # tools with one name: an error, since the LLM could not tell them apart.
    first_seen: dict[str, tuple[str, BashTool]] = {}
    unique: list[BashTool] = []
    for where, bash_tool in loaded:
        previous = first_seen.get(bash_tool.original_name)
        if previous is not None:
            problems.append(
                f"{where}: duplicate tool name {bash_tool.original_name}: {bash_tool.path} "
                f"(already provided by {previous[1].path} from {previous[0]})"
            )
            continue
        first_seen[bash_tool.original_name] = (where, bash_tool)
        if where != "toolDirectory":
            unique.append(bash_tool)

    builtin, builtin_warnings, builtin_problems = build_builtin_tools(agent)
    warnings.extend(builtin_warnings)
    problems.extend(builtin_problems)
    http, http_problems, http_notices = load_http_tools(
        spec, base_dir=agent.base_dir, api_keys=api_keys, resolve=agent.resolve
    )
    problems.extend(http_problems)
    skills, skill_warnings, skill_problems = load_skills(spec.skillSources, agent.resolve)
    warnings.extend(skill_warnings)
    problems.extend(skill_problems)
    initial_gates, auto_problems = auto_enabled(spec.autoEnableSkills, skills)
    problems.extend(auto_problems if not skill_problems else [])
    live = _mcp_toolboxes(agent, problems, params or {})
    if problems:
        raise ToolBuildError(problems)

    gated = [tool.gate for tool in [*unique, *builtin, *http]] + [box.gate for box in live]
    groups = [gate.removeprefix("group:") for gate in gated if gate and gate.startswith("group:")]
    tools: list[Tool] = [
        *unique, *builtin, *http, *skill_tools(skills), *external_tools(spec.externalTools), *meta_tools(groups)
    ]
    names = ToolNameMap.build(tool.original_name for tool in tools)
    for tool in tools:
        wire = names.normalized(tool.original_name)
        assert wire is not None  # noqa: S101 - narrows the type (never checks input)
        if wire != tool.original_name:
            renamed = f"tool name {tool.original_name} is not accepted by LLM APIs; exposed as {wire}"
            if isinstance(tool, OpenApiTool | PostgrestTool):
                # operation ids and table names are the API's, not the agent author's: expected, not a fault
                http_notices.append(f"{tool.config.where}: {renamed}")
            else:
                warnings.append(f"{getattr(tool, 'path', None) or 'builtinToolboxes'}: {renamed}")
        tool.name = wire
    origins = {id(tool): where for where, tool in loaded}
    notices: list[str] = list(http_notices)
    tools, binder = _bind(spec, tools, origins, leading, live, problems, notices)
    if problems:
        raise ToolBuildError(problems)
    return ToolSet(
        tools=tools, warnings=warnings, notices=notices, live=list(live), leading=list(leading), binder=binder,
        initial_gates=initial_gates,
    )


def _bind(
    spec: AgentSpec,
    tools: list[Tool],
    origins: dict[int, str],
    leading: list[LiveBashDirectory],
    live: list[McpToolbox],
    problems: list[str],
    notices: list[str],
) -> tuple[list[Tool], Callable[[list[Tool]], list[Tool]] | None]:
    """Apply the bash toolboxes' ``Bindings``, then the agent's ``bindings`` (checked against the
    ``toolDirectory``'s and the MCP servers' tools as listed now too); return the tools and the
    binder of live tools."""
    decls = {decl.name: decl for decl in spec.parameters}
    report = BindReport()
    for index, box in enumerate(spec.bashToolboxes):
        where = f"bashToolboxes[{index}]"
        entries = [(f"{where}.contents.Bindings[{i}]", b) for i, b in enumerate(box.contents.Bindings)]
        if not entries:
            continue
        positions = [i for i, tool in enumerate(tools) if origins.get(id(tool)) == where]
        # a bash toolbox's tools are BashTools: origins names no other tool after a toolbox
        bound = bind_tools(
            [tools[i] for i in positions], entries, decls, name_of=lambda tool: cast(BashTool, tool).slug, report=report
        )
        for position, tool in zip(positions, bound, strict=True):
            tools[position] = tool
    agent_bindings = [(f"bindings[{i}]", b) for i, b in enumerate(spec.bindings)]
    binder = None
    if agent_bindings:
        boxes: list[LiveToolbox] = [*leading, *live]
        listed = [tool for box in boxes for tool in box.snapshot()[1]]
        checked = bind_tools(
            [*tools, *listed], agent_bindings, decls, name_of=lambda tool: tool.name, report=report,
            unmatched_is_warning=bool(live),
        )
        tools = checked[: len(tools)]
        binder = _live_binder(spec.slug, agent_bindings, decls) if live or leading else None
    problems.extend(report.problems)
    notices.extend(report.warnings)
    return tools, binder


def _live_binder(
    slug: str, bindings: list[tuple[str, Any]], decls: dict[str, Any]
) -> Callable[[list[Tool]], list[Tool]]:
    """Binds a live toolbox's tools each time its list is taken in; problems are logged, never fatal."""

    def bind(listed: list[Tool]) -> list[Tool]:
        report = BindReport()
        bound = bind_tools(
            listed, bindings, decls, name_of=lambda tool: tool.name, report=report, unmatched_is_warning=True
        )
        for problem in report.problems:
            if "no tool matching" not in problem:
                log.warning("binding not applied", extra={"kind": "tools.binding_problem", "agent": slug,
                                                          "reason": problem})
        return bound

    return bind


def _mcp_toolboxes(agent: _AgentLike, problems: list[str], params: Mapping[str, ParamValue]) -> list[McpToolbox]:
    """Start the servers of ``mcpServers`` and list their tools; add a line to ``problems`` for
    each entry that cannot be read, whose server does not start, or that lists nothing in time."""
    boxes: list[McpToolbox] = []
    seen: set[str] = set()
    agent_key = (agent.spec.slug, str(agent.path) if agent.path is not None else None)
    for index, entry in enumerate(agent.spec.mcpServers or []):
        where = f"mcpServers[{index}]"
        try:
            config = parse_server(entry, where, agent.resolve, params)
        except McpConfigError as error:
            problems.append(str(error))
            continue
        if config.name in seen:
            problems.append(f"{where}: duplicate MCP server name {config.name!r}")
            continue
        seen.add(config.name)
        contents = getattr(entry, "contents", None) if not isinstance(entry, dict) else entry.get("contents")
        try:
            gate = parse_activation(contents if isinstance(contents, dict) else {}).gate
        except ActivationError as error:
            problems.append(f"{where}.contents.{error}")
            continue
        box = McpToolbox(agent_key, config, gate)
        try:
            box.start()
        except McpStartError as error:
            problems.append(redact_urls(f"{where}: {error}"))
            continue
        boxes.append(box)
    return boxes
