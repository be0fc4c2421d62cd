"""Bindings on tools: one wrapper for every tool kind (docs/tools.md §8).

:class:`BoundTool` wraps any :class:`~tools_app.base.Tool` whose arguments are bound:

* the model sees the tool's schema without the bound arguments (and without a note about them);
  an argument bound with ``whenUnbound: "expose"`` stays while its parameter has no value for the
  session (:meth:`BoundTool.schema_for`);
* a call gets the bound values merged into the model's arguments just before it runs, the bound
  value winning: an argument the model sent anyway is dropped and logged
  (``tools.bound_argument_dropped``); a ``Param`` is read from ``ToolContext.params`` at each call;
* a ``Param`` without value fails the call with ``Error: tool <name> is unavailable`` (the
  operator's log says why: ``tools.param_unbound``), is left out (``omit``), or is left to the
  model (``expose``);
* the session keeps the call as the model made it: bound values never enter its history.

:func:`bind_tools` applies a list of agent-file bindings to tools and reports what is wrong with
them (docs/agents.md §5): a binding that matches no tool or no argument, two bindings on one
argument, ``omit`` on a required argument, a secret on a bash argument passed on the command
line, a bash ``Literal`` object or list; a bound argument named in the tool's description is a
warning. Values are never logged, only names.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfiles.bindings import glob_matches
from agentfiles.parameters import ParamValue
from agentfiles.schema import Binding, ParameterDecl

from .base import Tool, ToolContext, ToolResult, VisibleParams

log = logging.getLogger("tools.bound")


@dataclass(frozen=True)
class ArgBinding:
    """One bound argument of one tool.

    Attributes:
        arg: the argument, as the tool declares it.
        param: the parameter it takes its value from, or ``None`` for a fixed value.
        literal: the fixed value (when ``param`` is ``None``).
        when_unbound: ``fail``, ``omit`` or ``expose`` (a ``param`` without value).
        secret: the value is secret (a secret parameter, or a secret routed by a caller).
        origin: where it was declared (``bindings[0]``, ``bashToolboxes[1].contents.Bindings[0]``,
            ``narrowing``), for messages.
    """

    arg: str
    param: str | None = None
    literal: Any = field(default=None, repr=False)
    when_unbound: str = "fail"
    secret: bool = False
    origin: str = ""

    def value_in(self, params: Mapping[str, ParamValue]) -> ParamValue | None:
        """Its value for a call: the literal, or the parameter's value (``None`` when unbound)."""
        if self.param is None:
            return ParamValue(self.literal, self.secret)
        return params.get(self.param)


def _without(schema: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """``schema`` without the properties ``hidden`` (nor their ``required`` entries)."""
    if not hidden:
        return schema
    reduced = dict(schema)
    reduced["properties"] = {k: v for k, v in (schema.get("properties") or {}).items() if k not in hidden}
    if "required" in schema:
        reduced["required"] = [name for name in schema.get("required") or [] if name not in hidden]
    return reduced


class BoundTool(Tool):
    """A tool with some arguments bound (see the module docstring).

    Args:
        inner: the tool (a bound tool's own inner tool, when ``inner`` is already bound: the
            bindings then add up).
        bindings: the arguments bound, at most one binding per argument.
    """

    def __init__(self, inner: Tool, bindings: Sequence[ArgBinding]) -> None:
        if isinstance(inner, BoundTool):
            bindings = [*inner.bindings, *bindings]
            inner = inner.inner
        self.inner: Tool = inner
        self.bindings: tuple[ArgBinding, ...] = tuple(bindings)
        self.name = inner.name
        self.description = inner.description
        self.gate = inner.gate
        hidden = {b.arg for b in self.bindings if b.when_unbound != "expose"}
        self.parameters = _without(inner.parameters, hidden)

    def __getattr__(self, name: str) -> Any:
        # what else a tool kind offers (a bash tool's path and slug, an MCP tool's toolbox)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"BoundTool({self.inner!r}, args={[b.arg for b in self.bindings]})"

    @property
    def original_name(self) -> str:
        """The wrapped tool's name before normalization."""
        return self.inner.original_name

    def bound_args(self) -> set[str]:
        """Every argument bound, exposed ones included."""
        return {b.arg for b in self.bindings}

    def schema_for(self, params: VisibleParams = None) -> dict[str, Any]:
        """The schema without the bound arguments; an exposed one is shown while its parameter has
        no value in ``params`` (the session's values, message-scope ones left out)."""
        exposed = {b.arg for b in self.bindings if b.when_unbound == "expose" and b.value_in(params or {}) is not None}
        return _without(self.parameters, exposed)

    def system_properties(self, params: VisibleParams = None) -> list[dict[str, Any]]:
        """The wrapped tool's properties, less those the model does not see."""
        shown = set(self.schema_for(params).get("properties") or {})
        return [p for p in self.inner.system_properties() if p.get("propertyKey") in shown]

    def gate_switch(self, arguments: Mapping[str, Any]) -> tuple[str, bool] | None:
        """As the wrapped tool says."""
        return self.inner.gate_switch(arguments)

    def bound_value_problem(self, arg: str, value: Any) -> str | None:
        """As the wrapped tool says."""
        return self.inner.bound_value_problem(arg, value)

    def secret_transport_problem(self, arg: str) -> str | None:
        """As the wrapped tool says."""
        return self.inner.secret_transport_problem(arg)

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Merge the bound values into the model's ``arguments`` and run the wrapped tool.

        Never raises: an unbound ``fail`` parameter, or a value the tool cannot take, gives
        ``Error: tool <name> is unavailable`` (the model is not told about bound arguments;
        the log names the argument and the parameter, never a value).
        """
        merged = dict(arguments)
        for binding in self.bindings:
            value = binding.value_in(ctx.params)
            if value is None:
                if binding.when_unbound == "expose":
                    continue
                merged.pop(binding.arg, None)
                if binding.when_unbound == "omit":
                    continue
                self._log("tools.param_unbound", binding, ctx, "a bound parameter has no value")
                return self._unavailable()
            if binding.arg in arguments:
                self._log("tools.bound_argument_dropped", binding, ctx, "the model sent a bound argument")
            problem = self.inner.bound_value_problem(binding.arg, value.value)
            if problem is not None:
                self._log("tools.bound_value_refused", binding, ctx, problem)
                return self._unavailable()
            merged[binding.arg] = value.value
        return self.inner.run(merged, ctx)

    def _unavailable(self) -> ToolResult:
        return ToolResult.error(f"Error: tool {self.name} is unavailable")

    def _log(self, kind: str, binding: ArgBinding, ctx: ToolContext, reason: str) -> None:
        log.warning(
            reason,
            extra={
                "kind": kind,
                "session_id": ctx.session_id,
                "tool": self.name,
                "arg": binding.arg,
                "param": binding.param,
                "origin": binding.origin,
            },
        )


def _mentions(description: str, arg: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(arg)}(?![A-Za-z0-9_])", description or "") is not None


@dataclass
class BindReport:
    """What :func:`bind_tools` found: ``problems`` stop the agent, ``warnings`` do not."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def bind_tools(
    tools: Sequence[Tool],
    bindings: Sequence[tuple[str, Binding]],
    decls: Mapping[str, ParameterDecl],
    *,
    name_of: Callable[[Tool], str],
    report: BindReport,
    unmatched_is_warning: bool = False,
) -> list[Tool]:
    """Apply an agent file's bindings to ``tools`` and check them (docs/agents.md §5).

    Args:
        tools: the tools, maybe already bound (by a toolbox's bindings; the agent's come after).
        bindings: ``(where, binding)`` pairs, ``where`` naming it in messages.
        decls: the agent's parameters by name (the loader checked that ``Param`` names exist).
        name_of: the name a binding's ``tool`` glob is matched against (a bash tool's slug for a
            toolbox's ``Bindings``, the wire name for the agent's ``bindings``).
        report: gets a line per problem and warning, prefixed with ``where``.
        unmatched_is_warning: a binding matching no tool is a warning (the agent has MCP servers,
            whose tools may come later), not a problem.
    Returns:
        the tools, each bound one replaced by a :class:`BoundTool`, in the same order.
    """
    added: dict[int, list[ArgBinding]] = {}
    for where, binding in bindings:
        matched = [index for index, tool in enumerate(tools) if glob_matches(binding.tool, name_of(tool))]
        if not matched:
            target = f"tool {binding.tool!r}" if binding.tool is not None else "any tool"
            (report.warnings if unmatched_is_warning else report.problems).append(
                f"{where}: the binding matches no tool ({target})"
            )
            continue
        param = binding.value.param
        decl = decls.get(param) if param is not None else None
        secret = decl is not None and decl.secret
        hits = 0
        for index in matched:
            tool = tools[index]
            already = {b.arg for b in added.get(index, [])} | (
                tool.bound_args() if isinstance(tool, BoundTool) else set()
            )
            if binding.arg in already:
                report.problems.append(f"{where}: argument {binding.arg} of {tool.name} is bound twice")
                hits += 1
                continue
            if binding.arg not in (tool.parameters.get("properties") or {}):
                continue
            hits += 1
            problem = _problem(tool, binding, secret)
            if problem is not None:
                report.problems.append(f"{where}: {problem}")
                continue
            if _mentions(tool.description, binding.arg):
                report.warnings.append(
                    f"{where}: the description of {tool.name} names its bound argument {binding.arg}"
                )
            arg_binding = ArgBinding(
                arg=binding.arg,
                param=param,
                literal=copy.deepcopy(binding.value.contents) if param is None else None,
                when_unbound=binding.whenUnbound,
                secret=secret,
                origin=where,
            )
            added.setdefault(index, []).append(arg_binding)
        if not hits:
            report.problems.append(
                f"{where}: no tool matching {binding.tool or '*'!r} has an argument {binding.arg}"
            )
    return [BoundTool(tool, added[index]) if index in added else tool for index, tool in enumerate(tools)]


def _problem(tool: Tool, binding: Binding, secret: bool) -> str | None:
    """What makes ``binding`` unusable on ``tool`` (an argument it has), or ``None``."""
    required = binding.arg in (tool.parameters.get("required") or [])
    if binding.whenUnbound == "omit" and required:
        return f"argument {binding.arg} of {tool.name} is required: it cannot be omitted"
    if secret:
        problem = tool.secret_transport_problem(binding.arg)
        if problem is not None:
            return problem
    if binding.value.param is None:
        return tool.bound_value_problem(binding.arg, binding.value.contents)
    return None
