"""Bindings as data: tool globs, and call-time bindings addressed down the helper tree (docs/tools.md §8).

A binding ties one tool argument to a value (``Literal``) or to a parameter (``Param``). Those of
an agent file are ``agentfiles.schema.Binding``; ``tools_app.bound`` applies them to tools. This
module has what both the loader and the helper calls need:

* :func:`glob_matches`: a binding's ``tool`` against a tool's name (``*`` is any run of
  characters, nothing else is special; no ``tool`` matches every tool);
* :class:`ScopedBinding`: a binding a calling model gives ``prompt_agent_<slug>``, its value
  already resolved, and addressed at the prompted helper (``agent`` absent), at a helper below it
  (``"a"``, ``"a/b"``), or at the helper and everything below (``"**"``);
  :func:`descend` moves such bindings one level down the tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: The address of "this helper and every helper below it".
EVERYWHERE = "**"


def glob_matches(pattern: str | None, name: str) -> bool:
    """Whether a binding's ``tool`` glob matches ``name``; ``None`` matches everything."""
    if pattern is None:
        return True
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, name, flags=re.DOTALL) is not None


@dataclass(frozen=True)
class ScopedBinding:
    """A call-time binding with its value resolved, addressed relative to a helper.

    Attributes:
        address: the helper slugs below the addressed helper, ``()`` for the helper itself, or
            ``("**",)`` for the helper and everything below it.
        tool: the glob on the LLM-visible tool names, ``None`` for every tool.
        arg: the argument.
        value: the value (a parameter of the caller resolved when the call was made).
        secret: whether the value came from a secret parameter (then never stored, traced or shown).
    """

    address: tuple[str, ...]
    tool: str | None
    arg: str
    value: Any = field(repr=False)
    secret: bool = False

    @property
    def here(self) -> bool:
        """Whether it applies to the helper it is addressed relative to."""
        return not self.address or self.address == (EVERYWHERE,)

    def to_json(self) -> dict[str, Any]:
        """A JSON form, for the store of held values (never the database: it may be secret)."""
        return {"address": list(self.address), "tool": self.tool, "arg": self.arg, "value": self.value,
                "secret": self.secret}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScopedBinding:
        """The inverse of :meth:`to_json`."""
        return cls(tuple(data.get("address") or ()), data.get("tool"), data["arg"], data.get("value"),
                   bool(data.get("secret")))


def parse_address(agent: Any) -> tuple[str, ...] | None:
    """A binding's ``agent`` as an address: absent or empty is ``()``; ``"**"``; ``"a/b"``.

    Returns ``None`` when it is not a string of non-empty slugs.
    """
    if agent is None or agent == "":
        return ()
    if not isinstance(agent, str):
        return None
    if agent == EVERYWHERE:
        return (EVERYWHERE,)
    parts = tuple(agent.split("/"))
    return parts if all(parts) and EVERYWHERE not in parts else None


def descend(bindings: Iterable[ScopedBinding], slug: str) -> list[ScopedBinding]:
    """The bindings that reach helper ``slug`` from one level up, re-rooted at it.

    ``"**"`` stays ``"**"``; ``slug/rest`` becomes ``rest``; anything addressed elsewhere is left out.
    """
    reached = []
    for binding in bindings:
        if binding.address == (EVERYWHERE,):
            reached.append(binding)
        elif binding.address and binding.address[0] == slug:
            reached.append(ScopedBinding(binding.address[1:], binding.tool, binding.arg, binding.value, binding.secret))
    return reached


def below(bindings: Iterable[ScopedBinding]) -> list[ScopedBinding]:
    """The bindings that go on down from a helper: those addressed below it, and ``"**"``."""
    return [binding for binding in bindings if binding.address]
