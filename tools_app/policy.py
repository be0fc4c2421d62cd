"""Tool-call policies: which disposition a call gets (docs/tools.md §5).

An agent's ``toolCallPolicyConfig`` is ``{"default": <disposition>, "rules": [{"tool": <name>,
"disposition": <disposition>}, ...]}``. A rule matches the exact LLM-visible (wire) tool name;
the first matching rule wins; a call no rule matches gets ``default``; without a config every call
is ``runSync``.

Choices made here:

* A rule written ``prompt_agent_<slug>`` (the IO slug used in prose) also matches the wire name
  ``io_prompt_agent_<slug>``, and the other way round (docs/decisions.md §4).
* ``decide`` may be given the tool's original (pre-normalization) name too, so a rule written
  with the name a script declares still matches after names.py rewrote it.
* ``decorate`` is flattened to its innermost disposition by :meth:`ToolCallPolicy.decide`
  (decorators are parsed but inert, as in agents-exe, docs/tools.md §5.2); a ``decorate`` without
  ``inner`` counts as ``runSync``. :meth:`ToolCallPolicy.disposition_for` gives the unflattened
  value for callers that want the decorators.
* A tool of the agent's ``externalTools`` that no rule names is deferred: with ``default`` when
  that defers (its reason kept), else with the reason ``external tool``; nothing in the server
  could run it (docs/agents.md §10).
* Every disposition tag the schema knows is accepted; whether the caller can honour
  ``runAsync`` / ``runIsolated`` is the caller's decision, not this module's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from agentfiles.schema import Disposition, ToolCallPolicyConfig

from .external import EXTERNAL_REASON

_IO_PREFIX = "io_"
_HELPER_PREFIX = "prompt_agent_"
RUN_SYNC: dict[str, Any] = {"tag": "runSync"}


def _match_keys(name: str) -> set[str]:
    """The spellings a name is matched under: itself, plus the ``io_`` / bare helper twin."""
    keys = {name}
    if name.startswith(_IO_PREFIX + _HELPER_PREFIX):
        keys.add(name[len(_IO_PREFIX):])
    elif name.startswith(_HELPER_PREFIX):
        keys.add(_IO_PREFIX + name)
    return keys


def _as_json(disposition: Disposition) -> dict[str, Any]:
    return disposition.model_dump(mode="json", exclude_none=True)


def flatten_disposition(disposition: dict[str, Any]) -> dict[str, Any]:
    """Strip ``decorate`` layers: the innermost disposition, ``runSync`` when there is none."""
    seen = 0
    while disposition.get("tag") == "decorate":
        inner = disposition.get("inner")
        seen += 1
        if not isinstance(inner, dict) or seen > 100:
            return dict(RUN_SYNC)
        disposition = inner
    return disposition


@dataclass(frozen=True)
class ToolCallPolicy:
    """A compiled ``toolCallPolicyConfig``.

    Attributes:
        default: the disposition (JSON) for calls no rule matches.
        rules: ``(tool name, disposition JSON)`` pairs in file order.
    """

    default: dict[str, Any] = field(default_factory=lambda: dict(RUN_SYNC))
    rules: tuple[tuple[str, dict[str, Any]], ...] = ()
    external: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, cfg: ToolCallPolicyConfig | None, external: frozenset[str] = frozenset()) -> ToolCallPolicy:
        """Compile an agent's ``toolCallPolicyConfig``; ``None`` gives the all-``runSync`` policy.

        ``external`` are the names of the agent's ``externalTools``: deferred unless a rule names them.
        """
        if cfg is None:
            return cls(external=external)
        return cls(
            default=_as_json(cfg.default),
            rules=tuple((rule.tool, _as_json(rule.disposition)) for rule in cfg.rules),
            external=external,
        )

    def disposition_for(self, tool_name: str, original_name: str | None = None) -> dict[str, Any]:
        """The configured disposition (JSON, ``decorate`` layers kept) for a call.

        Args:
            tool_name: the wire name the LLM called.
            original_name: the name before normalization, when it differs.
        """
        names = _match_keys(tool_name)
        if original_name:
            names |= _match_keys(original_name)
        for rule_tool, disposition in self.rules:
            if rule_tool in names:
                return copy.deepcopy(disposition)
        if names & self.external and flatten_disposition(self.default).get("tag") != "defer":
            return {"tag": "defer", "reason": EXTERNAL_REASON}
        return copy.deepcopy(self.default)

    def decide(self, tool_name: str, original_name: str | None = None) -> dict[str, Any]:
        """The disposition (JSON) a call gets, ``decorate`` flattened: e.g. ``{"tag": "runSync"}``,
        ``{"tag": "defer", "reason": "..."}``, ``{"tag": "runAsync", "attachSeconds": 10}``."""
        return flatten_disposition(self.disposition_for(tool_name, original_name))

    @property
    def is_trivial(self) -> bool:
        """Whether every call is ``runSync`` whatever its name (nothing to defer or background)."""
        if self.external:
            return False
        dispositions = [self.default, *(d for _, d in self.rules)]
        return all(flatten_disposition(d).get("tag") == "runSync" for d in dispositions)
