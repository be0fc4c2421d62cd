"""On-demand tool groups and gated tools (docs/guide-toolboxes.md §4; docs/tools.md §11).

A toolbox's ``Activation`` is ``"always"`` (the default) or ``{"tag": "on-demand", "toolgroup":
G}``; the key is read as ``Activation`` or ``activation``. The tools of an on-demand toolbox carry
the *gate* ``group:G`` and stay out of the model's tool list until the model calls
``meta_activate_tool {"toolgroup": G}``; ``meta_deactivate_tool`` hides them again and
``meta_discover_tools`` lists the groups. Skill scripts are gated the same way (``skill:<name>``,
``tools_app.skills``).

Nothing is stored besides the session's turns: which gates are open is a fold over the session's
answered tool calls, oldest first (:func:`open_gates`), so it survives restarts and is inherited by
forks. Every tool that opens or closes a gate says so through :meth:`Tool.gate_switch`.
``Activation`` and ``parse_activation`` live with the agent-file schema (``agentfiles.schema``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .base import Tool, ToolContext, ToolResult

ACTIVATE_NAME = "meta_activate_tool"
DEACTIVATE_NAME = "meta_deactivate_tool"
DISCOVER_NAME = "meta_discover_tools"
META_NAMES = (ACTIVATE_NAME, DEACTIVATE_NAME, DISCOVER_NAME)

#: A session's answered tool calls, oldest first: ``(call, response)`` in document form.
History = Sequence[tuple[Mapping[str, Any], Any]]
#: The history, or a function that reads it: only toolsets with gated tools read it, and reading
#: it walks every turn of the session.
HistorySource = History | Callable[[], History] | None



def call_arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    """The decoded arguments of a tool call in document form (``{}`` when they are not an object)."""
    raw = (call.get("function") or {}).get("arguments") or "{}"
    try:
        decoded = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def succeeded(response: Any) -> bool:
    """Whether a stored response is not a failure text (failures start with ``Error``)."""
    return not (isinstance(response, str) and response.startswith("Error"))


def open_gates(history: History | None, tools: Mapping[str, Tool], initial: Iterable[str] = ()) -> frozenset[str]:
    """The gates open after ``history``.

    Args:
        history: the session's answered calls, oldest first (``None``: none yet).
        tools: the agent's tools by wire name; a call's tool says which gate it opens or closes.
        initial: gates open from the start (``autoEnableSkills``).
    Returns:
        the open gates; a later call wins over an earlier one, failed calls count for nothing.
    """
    gates = set(initial)
    for call, response in history or ():
        tool = tools.get((call.get("function") or {}).get("name") or "")
        if tool is None or not succeeded(response):
            continue
        switch = tool.gate_switch(call_arguments(call))
        if switch is None:
            continue
        gate, is_open = switch
        if is_open:
            gates.add(gate)
        else:
            gates.discard(gate)
    return frozenset(gates)


class _GroupTool(Tool):
    """One of the three meta tools; what they answer is what agents-exe's answered (the fixture
    session of docs/guide-toolboxes.md §4 replays with it)."""

    def __init__(self, name: str, groups: Sequence[str]) -> None:
        self.name = name
        self.groups = list(groups)
        listed = ", ".join(self.groups)
        if name == DISCOVER_NAME:
            self.description = f"List all available toolgroups. Toolgroups: {listed}"
            self.parameters = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
            return
        verb = "Activate" if name == ACTIVATE_NAME else "Deactivate"
        purpose = "access" if name == ACTIVATE_NAME else "hide"
        self.description = f"{verb} a toolgroup to {purpose} its tools. Available toolgroups: {listed}"
        self.parameters = {
            "type": "object",
            "properties": {
                "toolgroup": {
                    "type": "string",
                    "description": f"Name of the toolgroup to {verb.lower()}. Available: {listed}",
                }
            },
            "required": ["toolgroup"],
            "additionalProperties": False,
        }

    def gate_switch(self, arguments: Mapping[str, Any]) -> tuple[str, bool] | None:
        group = arguments.get("toolgroup")
        if self.name == DISCOVER_NAME or group not in self.groups:
            return None
        return f"group:{group}", self.name == ACTIVATE_NAME

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if self.name == DISCOVER_NAME:
            return ToolResult(json.dumps({"toolgroups": self.groups}, separators=(",", ":")))
        group = arguments.get("toolgroup")
        if group not in self.groups:
            return ToolResult.error(
                f"Error: {self.name}: unknown toolgroup {group!r}; toolgroups: {', '.join(self.groups)}"
            )
        done = "activated" if self.name == ACTIVATE_NAME else "deactivated"
        return ToolResult(f"Toolgroup '{group}' {done}")


def hidden_text(tool: Tool) -> str:
    """What the model reads when it calls ``tool`` while its gate is closed: how to open it."""
    gate = tool.gate or ""
    if gate.startswith("group:"):
        how = f'call {ACTIVATE_NAME} with {{"toolgroup": "{gate.removeprefix("group:")}"}} first'
    elif gate.startswith("skill:"):
        how = f"call skill_enable_{gate.removeprefix('skill:')} first"
    else:
        how = "it is not available in this session"
    return f"Error: tool {tool.name} is not active: {how}"


def meta_tools(groups: Iterable[str]) -> list[Tool]:
    """``meta_activate_tool``, ``meta_deactivate_tool`` and ``meta_discover_tools`` for ``groups``
    (in the order first seen); none when there is no on-demand group."""
    ordered = list(dict.fromkeys(groups))
    return [_GroupTool(name, ordered) for name in META_NAMES] if ordered else []
