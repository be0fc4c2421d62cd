"""Narrowing helpers when they are called, ``describe_agent`` and ``derive_agent`` (docs/tools.md §8.6).

A call of ``io_prompt_agent_<slug>`` may carry ``bindings``, ``with`` and ``as`` besides ``what``.
:func:`prepare_helper_call` checks them against the helper tree and turns them into what the
helper's session gets: its parameter values (the entry's ``with``, the call's, a derived one's)
and its :class:`Narrowing` (bindings on its own tools, and bindings for the helpers below it).
Everything the calling model can fix is a :class:`NarrowingError` whose text names what is still
open; nothing is run then.

The helper's own tools stay shared: :func:`narrowed_toolset` gives its session a copy where the
bound arguments are bound (``ToolSet.narrowed``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentfiles.bindings import EVERYWHERE, ScopedBinding, descend, glob_matches, parse_address
from agentfiles.parameters import AgentParameters, ParamValue
from agentfiles.schema import AgentSpec, BindingValue
from tools_app.base import Tool, ToolContext, ToolResult
from tools_app.bound import ArgBinding, BoundTool
from tools_app.subagent import SubAgentTool, helper_slug
from tools_app.toolset import ToolSet

log = logging.getLogger("agents.narrowing")

#: How deep ``describe_agent`` goes below the helper it describes.
MAX_DESCRIBE_DEPTH = 4
DESCRIBE_NAME = "describe_agent"
DERIVE_NAME = "derive_agent"


class NarrowingError(Exception):
    """A helper call's narrowing is refused; the message is for the calling model."""


class HelperAgent(Protocol):
    """What narrowing needs of a runtime agent (``agents_app.runtime.RuntimeAgent``)."""

    toolset: ToolSet
    parameters: AgentParameters

    @property
    def slug(self) -> str: ...


#: Finds the runtime agent of a slug (``agents_app.runtime.runtime_agent``).
Lookup = Callable[[str], Any]


@dataclass
class Narrowing:
    """What a caller gave a helper's session for its call.

    Attributes:
        here: bindings on the helper's own tools (values resolved).
        below: bindings for the helpers it prompts in turn, addressed relative to it.
    """

    here: list[ScopedBinding] = field(default_factory=list)
    below: list[ScopedBinding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """For the values a session holds outside the database (it may hold secrets)."""
        return {"here": [b.to_json() for b in self.here], "below": [b.to_json() for b in self.below]}

    @classmethod
    def from_json(cls, data: Any) -> Narrowing:
        """The inverse of :meth:`to_json`."""
        data = data if isinstance(data, dict) else {}
        return cls(
            [ScopedBinding.from_json(b) for b in data.get("here", [])],
            [ScopedBinding.from_json(b) for b in data.get("below", [])],
        )


@dataclass
class HelperCall:
    """A helper call as its session gets it: the prompt, the values, the narrowing (or ``None``)."""

    prompt: str
    params: dict[str, ParamValue]
    narrowing: Narrowing | None = None


def _open_args(tool: Tool, bound: set[str]) -> list[str]:
    return [arg for arg in (tool.parameters.get("properties") or {}) if arg not in bound]


def narrowable_tools(toolset: ToolSet) -> list[Tool]:
    """A helper's tools a caller may narrow: all but helpers, ``describe_agent`` and ``derive_agent``."""
    return [t for t in toolset.tools if helper_slug(t) is None and t.name not in (DESCRIBE_NAME, DERIVE_NAME)]


def narrowed_toolset(toolset: ToolSet, here: Sequence[ScopedBinding]) -> ToolSet:
    """``toolset`` with the bindings of a narrowing applied (a copy; the shared toolset is untouched)."""
    if not here:
        return toolset
    per_tool: dict[str, list[ArgBinding]] = {}
    for tool in narrowable_tools(toolset):
        bound = tool.bound_args() if isinstance(tool, BoundTool) else set()
        for binding in here:
            if glob_matches(binding.tool, tool.name) and binding.arg in _open_args(tool, bound):
                bound = {*bound, binding.arg}
                per_tool.setdefault(tool.name, []).append(
                    ArgBinding(binding.arg, literal=binding.value, secret=binding.secret, origin="narrowing")
                )
    return toolset.narrowed(per_tool)


def _resolve(value: Any, where: str, caller: Mapping[str, ParamValue]) -> ParamValue:
    """A binding value of the calling model: a ``Literal`` (never secret) or a caller's ``Param``."""
    try:
        parsed = BindingValue.model_validate(value)
    except ValueError:
        raise NarrowingError(
            f'{where}: a value is {{"tag": "Literal", "contents": <JSON>}} or {{"tag": "Param", "contents": "<name>"}}'
        ) from None
    if parsed.param is None:
        return ParamValue(parsed.contents)
    found = caller.get(parsed.param)
    if found is None:
        raise NarrowingError(f"{where}: the caller's parameter {parsed.param} has no value")
    return found


def _targets(root: HelperAgent, address: tuple[str, ...], lookup: Lookup, narrowable: Callable[[str, str], bool],
             where: str) -> list[HelperAgent]:
    """The agents a binding's address reaches below (and including) ``root``."""
    if address == (EVERYWHERE,):
        found: list[HelperAgent] = []
        queue = [root]
        while queue:
            agent = queue.pop(0)
            if any(agent.slug == known.slug for known in found):
                continue
            found.append(agent)
            queue.extend(lookup(child) for child in _children(agent) if narrowable(agent.slug, child))
        return found
    agent = root
    for slug in address:
        children = _children(agent)
        if slug not in children:
            raise NarrowingError(
                f"{where}: {agent.slug} has no helper {slug}" + (f" (its helpers: {', '.join(children)})" if children
                                                                   else " (it has no helpers)")
            )
        if not narrowable(agent.slug, slug):
            raise NarrowingError(f"{where}: helper {slug} cannot be narrowed")
        agent = lookup(slug)
    return [agent]


def _children(agent: HelperAgent) -> list[str]:
    return [slug for t in agent.toolset.tools if (slug := helper_slug(t)) is not None]


def _entries(agent: HelperAgent) -> dict[str, SubAgentTool]:
    return {t.slug: t for t in agent.toolset.tools if isinstance(t, SubAgentTool)}


def _is_narrowable(lookup: Lookup) -> Callable[[str, str], bool]:
    def narrowable(parent: str, child: str) -> bool:
        entry = _entries(lookup(parent)).get(child)
        return entry is None or entry.narrowable

    return narrowable


def _check_binding(agents: list[HelperAgent], binding: ScopedBinding, reaching: Mapping[str, list[ScopedBinding]],
                   where: str) -> bool:
    """Check a call binding where it lands; ``False`` when an ancestor's binding already holds every
    argument it names (it is dropped: only narrows)."""
    matched_any, fresh = False, False
    for agent in agents:
        for tool in narrowable_tools(agent.toolset):
            if not glob_matches(binding.tool, tool.name):
                continue
            matched_any = True
            already = {b.arg for b in reaching.get(agent.slug, []) if glob_matches(b.tool, tool.name)}
            bound = tool.bound_args() if isinstance(tool, BoundTool) else set()
            if binding.arg in already:
                continue
            if binding.arg not in _open_args(tool, bound):
                continue
            problem = tool.bound_value_problem(binding.arg, binding.value)
            if problem is None and binding.secret:
                problem = tool.secret_transport_problem(binding.arg)
            if problem is not None:
                raise NarrowingError(f"{where}: {problem}")
            fresh = True
    if not matched_any:
        names = ", ".join(t.name for agent in agents for t in narrowable_tools(agent.toolset)) or "none"
        raise NarrowingError(f"{where}: no tool matches {binding.tool or '*'!r} (tools: {names})")
    if fresh:
        return True
    ancestor = any(
        binding.arg in {b.arg for b in reaching.get(agent.slug, [])} for agent in agents
    )
    if ancestor:
        return False
    open_args = sorted({
        f"{tool.name}.{arg}"
        for agent in agents
        for tool in narrowable_tools(agent.toolset)
        if glob_matches(binding.tool, tool.name)
        for arg in _open_args(tool, tool.bound_args() if isinstance(tool, BoundTool) else set())
    })
    raise NarrowingError(f"{where}: {binding.arg} is not an open argument (open: {', '.join(open_args) or 'none'})")


def prepare_helper_call(
    tool: SubAgentTool,
    arguments: Mapping[str, Any],
    *,
    caller: Mapping[str, ParamValue],
    inherited: Sequence[ScopedBinding],
    derived: Mapping[tuple[str, str], Mapping[str, Any]],
    lookup: Lookup,
) -> HelperCall:
    """Check a helper call's narrowing and give what the helper's session gets (docs/tools.md §8.6).

    Args:
        tool: the helper's tool in the caller (its entry's ``with`` and ``narrowable``).
        arguments: the call's arguments (``what`` is the engine's to check).
        caller: the caller's parameter values for the call.
        inherited: bindings the caller's own caller addressed below it.
        derived: ``(helper, name) -> {"bindings", "with"}`` from the caller's ``derive_agent`` calls.
        lookup: finds a helper's runtime agent.
    Raises:
        NarrowingError: what the calling model can fix.
    """
    helper = lookup(tool.slug)
    raw_bindings, raw_with, name = arguments.get("bindings"), arguments.get("with"), arguments.get("as")
    reaching_here = descend(inherited, tool.slug)
    if not tool.narrowable and (raw_bindings or raw_with or name or reaching_here):
        raise NarrowingError(f"helper {tool.slug} cannot be narrowed: call it with 'what' only")
    if raw_bindings is not None and not isinstance(raw_bindings, list):
        raise NarrowingError("bindings must be a list")
    if raw_with is not None and not isinstance(raw_with, dict):
        raise NarrowingError("with must be an object of the helper's parameter names")
    derived_entry: Mapping[str, Any] = {}
    if name is not None:
        if (tool.slug, name) not in derived:
            raise NarrowingError(f"no derived agent {name!r} of helper {tool.slug}: call derive_agent first")
        derived_entry = derived[(tool.slug, name)]
    narrowable = _is_narrowable(lookup)
    # what the caller's ancestors bound, where it lands (only narrows: they win)
    reaching: dict[str, list[ScopedBinding]] = {}
    for binding in reaching_here:
        for agent in _targets(helper, binding.address, lookup, narrowable, "an inherited binding"):
            reaching.setdefault(agent.slug, []).append(binding)
    calls: list[ScopedBinding] = []
    entries = [*(derived_entry.get("bindings") or []), *(raw_bindings or [])]
    for index, raw in enumerate(entries):
        where = f"bindings[{index}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("arg"), str):
            raise NarrowingError(f'{where}: a binding is {{"agent"?, "tool"?, "arg", "value"}}')
        address = parse_address(raw.get("agent"))
        if address is None:
            raise NarrowingError(f'{where}: agent is a helper path ("a", "a/b") or "**"')
        if raw.get("tool") is not None and not isinstance(raw.get("tool"), str):
            raise NarrowingError(f"{where}: tool is a glob on tool names")
        value = _resolve(raw.get("value"), where, caller)
        binding = ScopedBinding(address, raw.get("tool"), raw["arg"], value.value, value.secret)
        targets = _targets(helper, address, lookup, narrowable, where)
        if _check_binding(targets, binding, reaching, where):
            calls.append(binding)
        else:
            log.warning("binding dropped", extra={"kind": "narrowing.binding_dropped", "agent": tool.slug,
                                                  "tool": binding.tool, "arg": binding.arg})
    params = _helper_values(tool, helper, raw_with or {}, derived_entry.get("with") or {}, caller)
    combined = [*reaching_here, *calls]
    here = [b for b in combined if b.here]
    below = [b for b in combined if b.address]
    narrowing = Narrowing(here, below) if combined else None
    return HelperCall(str(arguments.get("what") or ""), params, narrowing)


def _helper_values(
    tool: SubAgentTool,
    helper: HelperAgent,
    call_with: Mapping[str, Any],
    derived_with: Mapping[str, Any],
    caller: Mapping[str, ParamValue],
) -> dict[str, ParamValue]:
    """The helper session's values: the entry's ``with``, then the call's, then a derived one's."""
    declared = helper.parameters.decls
    values: dict[str, ParamValue] = {}
    for key, value in (tool.with_ or {}).items():
        param = value.param
        found = ParamValue(value.contents) if param is None else caller.get(param)
        if found is not None:
            values[key] = found
    for source, given in (("with", call_with), ("the derived with", derived_with)):
        for key, value in given.items():
            if key not in declared:
                raise NarrowingError(f"{source}: helper {tool.slug} has no parameter {key}"
                                     f" (its parameters: {', '.join(declared) or 'none'})")
            if key in (tool.with_ or {}):
                raise NarrowingError(f"{source}: parameter {key} of helper {tool.slug} is already given")
            if key not in values:
                values[key] = _resolve(value, f"{source}.{key}", caller)
    return {k: ParamValue(v.value, v.secret or declared[k].secret) for k, v in values.items() if k in declared}


def derived_table(calls: Iterable[tuple[dict[str, Any], Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """``(helper, name) -> {"bindings", "with"}`` from a session's answered tool calls, oldest first:
    the ``derive_agent`` calls that succeeded (a later one of the same name wins)."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for call, response in calls:
        function = call.get("function") or {}
        if function.get("name") != DERIVE_NAME or not _stored(response):
            continue
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict) and isinstance(arguments.get("from"), str) and isinstance(
            arguments.get("slug"), str
        ):
            table[(arguments["from"], arguments["slug"])] = {
                "bindings": arguments.get("bindings") or [],
                "with": arguments.get("with") or {},
            }
    return table


def _stored(response: Any) -> bool:
    content = response.get("content") if isinstance(response, dict) and response.get("type") == "json" else None
    return isinstance(content, dict) and content.get("stored") is True


def _json(content: Any) -> ToolResult:
    return ToolResult({"type": "json", "content": content})


class DescribeAgentTool(Tool):
    """``describe_agent {"slug"}``: a helper as the caller may narrow it (docs/tools.md §8.6).

    Args:
        helpers: the caller's helper tools by slug.
        lookup: finds a helper's runtime agent.
    """

    def __init__(self, helpers: Mapping[str, SubAgentTool], lookup: Lookup) -> None:
        self.helpers = dict(helpers)
        self.lookup = lookup
        self.name = DESCRIBE_NAME
        self.description = "Describe a helper agent: its parameters and the open arguments of its tools."
        self.parameters = {
            "type": "object",
            "properties": {"slug": {"type": "string", "description": "the helper's slug", "enum": sorted(helpers)}},
            "required": ["slug"],
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """The description, or an error naming the helpers."""
        slug = arguments.get("slug")
        entry = self.helpers.get(slug) if isinstance(slug, str) else None
        if entry is None:
            return ToolResult.error(f"Error: no helper {slug!r} (helpers: {', '.join(sorted(self.helpers))})")
        inherited = [b for b in ctx.inherited_bindings if isinstance(b, ScopedBinding)]
        return _json(self._describe(entry, descend(inherited, entry.slug), [], 0))

    def _describe(self, entry: SubAgentTool, reaching: list[ScopedBinding], path: list[str], depth: int) -> Any:
        agent = self.lookup(entry.slug)
        spec: AgentSpec = agent.loaded.spec
        if not entry.narrowable:
            return {"slug": entry.slug, "announce": spec.announce}
        static = entry.with_ or {}
        parameters = [
            {"name": decl.name, "description": decl.description,
             "bound": agent.parameters.process_value(decl.name) is not None or decl.name in static}
            for decl in spec.parameters
        ]
        tools = []
        here = [b for b in reaching if b.here]
        for tool in narrowable_tools(agent.toolset):
            bound = tool.bound_args() if isinstance(tool, BoundTool) else set()
            bound |= {b.arg for b in here if glob_matches(b.tool, tool.name)}
            properties = tool.parameters.get("properties") or {}
            tools.append({
                "name": tool.name,
                "description": tool.description,
                "open": [
                    {"arg": arg, "type": properties[arg].get("type", "string"),
                     "description": properties[arg].get("description", "")}
                    for arg in _open_args(tool, bound)
                ],
            })
        helpers = []
        if depth < MAX_DESCRIBE_DEPTH:
            for child in _entries(agent).values():
                if child.slug in path or child.slug == entry.slug:
                    continue
                helpers.append(self._describe(child, descend(reaching, child.slug), [*path, entry.slug], depth + 1))
        return {"slug": entry.slug, "announce": spec.announce, "parameters": parameters, "tools": tools,
                "helpers": helpers}


class DeriveAgentTool(Tool):
    """``derive_agent {from, slug, bindings?, with?}``: names a narrowing of a direct helper, for
    later calls with ``"as"`` (docs/tools.md §8.6). Nothing is stored but the call itself."""

    def __init__(self, helpers: Mapping[str, SubAgentTool]) -> None:
        self.helpers = dict(helpers)
        self.name = DERIVE_NAME
        self.description = 'Name a narrowing of a helper agent, to prompt it later with "as": <slug>.'
        self.parameters = {
            "type": "object",
            "properties": {
                "from": {"type": "string", "description": "the helper", "enum": sorted(helpers)},
                "slug": {"type": "string", "description": "the name of the narrowing"},
                "bindings": {
                    "type": "array", "description": "bindings, as on a helper call", "items": {"type": "object"}
                },
                "with": {"type": "object", "description": "the helper's parameters, as on a helper call"},
            },
            "required": ["from", "slug"],
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """``{"stored": true, "from", "slug"}``, or an error naming what is wrong."""
        source, slug = arguments.get("from"), arguments.get("slug")
        entry = self.helpers.get(source) if isinstance(source, str) else None
        if entry is None:
            return ToolResult.error(f"Error: no helper {source!r} (helpers: {', '.join(sorted(self.helpers))})")
        if not entry.narrowable:
            return ToolResult.error(f"Error: helper {source} cannot be narrowed")
        if not isinstance(slug, str) or not slug:
            return ToolResult.error("Error: slug names the narrowing: a non-empty string")
        if not isinstance(arguments.get("bindings") or [], list) or not isinstance(arguments.get("with") or {}, dict):
            return ToolResult.error("Error: bindings is a list and with an object, as on a helper call")
        return _json({"stored": True, "from": source, "slug": slug})


def helper_tools(helpers: Sequence[SubAgentTool], lookup: Lookup) -> list[Tool]:
    """An agent's helper tools, with ``describe_agent`` and ``derive_agent`` when it has helpers."""
    if not helpers:
        return []
    by_slug = {tool.slug: tool for tool in helpers}
    return [*helpers, DescribeAgentTool(by_slug, lookup), DeriveAgentTool(by_slug)]
