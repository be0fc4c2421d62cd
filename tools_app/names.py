"""Tool names an LLM API accepts (docs/tools.md §2, docs/decisions.md §4).

OpenAI-compatible APIs accept a function name only if it matches ``^[A-Za-z0-9_-]{1,64}$``.
Most of our names already do (``bash_read-file``: dashes are kept, as the real agents-exe session
files show), but a slug or a toolbox name is user-controlled and may hold dots, spaces, colons,
non-ASCII letters or be too long. Such a name is rewritten by :func:`normalize_tool_name` and the
original is kept in a :class:`ToolNameMap` so that a call coming back from the LLM can be routed.

Rules of :func:`normalize_tool_name` (docs/tools.md §2; deliberately simpler than the rewriting
agents-exe's documentation proposes, which contradicts itself and forbids the dashes real
sessions use):

1. A name that is already valid is returned unchanged.
2. Every character outside ``[A-Za-z0-9_-]`` becomes ``_`` (one ``_`` per code point).
3. An empty name becomes ``tool``.
4. A name longer than 64 characters keeps its first 55 characters, then ``_`` and the first 8 hex
   digits of the SHA-1 of the *original* name, so two long names differing only in their tails
   stay distinct.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator

#: The name pattern every LLM-visible tool name must match.
VALID_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOL_NAME_LENGTH = 64

_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8


def is_valid_tool_name(name: str) -> bool:
    """Whether ``name`` is accepted by LLM APIs as is (``^[A-Za-z0-9_-]{1,64}$``)."""
    return bool(VALID_TOOL_NAME.match(name))


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:_HASH_LENGTH]


def _fit(base: str, suffix: str, *, original: str) -> str:
    """``base + suffix`` cut to 64 characters; a cut base gets a hash of ``original`` first."""
    if len(base) + len(suffix) <= MAX_TOOL_NAME_LENGTH:
        return base + suffix
    tail = "_" + _short_hash(original) + suffix
    return base[: MAX_TOOL_NAME_LENGTH - len(tail)] + tail


def normalize_tool_name(name: str) -> str:
    """Return a version of ``name`` that matches ``^[A-Za-z0-9_-]{1,64}$``.

    Valid names come back unchanged; see the module docstring for the rewriting rules.
    The function is pure and deterministic (the hash suffix depends only on ``name``).
    """
    if is_valid_tool_name(name):
        return name
    cleaned = _INVALID_CHAR.sub("_", name) or "tool"
    return _fit(cleaned, "", original=name)


class ToolNameMap:
    """A two-way map between original tool names and the LLM-visible (normalized) names.

    Each distinct original gets a distinct normalized name: when two originals normalize to the
    same text, the later one gets ``_2``, then ``_3``, ... (still at most 64 characters).
    Adding the same original twice returns the name it already has.
    """

    def __init__(self) -> None:
        self._to_original: dict[str, str] = {}
        self._to_normalized: dict[str, str] = {}

    @classmethod
    def build(cls, originals: Iterable[str]) -> ToolNameMap:
        """A map holding ``originals``, valid names reserved first.

        Reserving the already-valid names first means a valid name never loses its exact spelling
        to an invalid one that happens to normalize to it (``a.b`` → ``a_b`` vs. a real ``a_b``).
        """
        names = list(originals)
        mapping = cls()
        for name in names:
            if is_valid_tool_name(name):
                mapping.add(name)
        for name in names:
            mapping.add(name)
        return mapping

    def add(self, original: str) -> str:
        """Register ``original`` and return its LLM-visible name."""
        known = self._to_normalized.get(original)
        if known is not None:
            return known
        base = normalize_tool_name(original)
        candidate = base
        counter = 1
        while candidate in self._to_original:
            counter += 1
            candidate = _fit(base, f"_{counter}", original=original)
        self._to_original[candidate] = original
        self._to_normalized[original] = candidate
        return candidate

    def reserve(self, original: str, normalized: str) -> None:
        """Record a pair decided elsewhere (e.g. when copying a built toolset).

        Raises:
            ValueError: ``normalized`` is not a valid tool name, or either side is already taken
                by a different pair.
        """
        if not is_valid_tool_name(normalized):
            raise ValueError(f"{normalized!r} is not a valid tool name")
        if self._to_original.get(normalized, original) != original:
            raise ValueError(f"tool name {normalized!r} is already used by {self._to_original[normalized]!r}")
        if self._to_normalized.get(original, normalized) != normalized:
            raise ValueError(f"{original!r} is already exposed as {self._to_normalized[original]!r}")
        self._to_original[normalized] = original
        self._to_normalized[original] = normalized

    def copy(self) -> ToolNameMap:
        """An independent copy."""
        other = ToolNameMap()
        other._to_original = dict(self._to_original)
        other._to_normalized = dict(self._to_normalized)
        return other

    def original(self, normalized: str) -> str | None:
        """The original name behind an LLM-visible name, ``None`` when unknown."""
        return self._to_original.get(normalized)

    def normalized(self, original: str) -> str | None:
        """The LLM-visible name of a registered original, ``None`` when unknown."""
        return self._to_normalized.get(original)

    def renamed(self) -> dict[str, str]:
        """Originals whose LLM-visible name differs: ``{original: normalized}`` (for warnings)."""
        return {o: n for o, n in self._to_normalized.items() if o != n}

    def __contains__(self, normalized: object) -> bool:
        return normalized in self._to_original

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """``(normalized, original)`` pairs in insertion order."""
        return iter(self._to_original.items())

    def __len__(self) -> int:
        return len(self._to_original)
