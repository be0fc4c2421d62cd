"""Unified diffs applied to a list of lines: all hunks or none (docs/guide-toolboxes.md §1).

A patch is read leniently, the way models write them: everything before the first ``@@`` header
(``---``, ``+++``, ``diff``, ``index`` lines) is ignored; in a hunk, ``-`` removes a line, ``+``
adds one, and a context line may start with a space or with nothing at all. The line counts of a
header are not trusted, only its start lines. Every hunk is checked against the file before
anything changes: its removed and context lines must be there, exactly, at its start line; hunks
may not overlap. Then they are applied from the bottom up.

No library is used: ``unidiff`` and ``whatthepatch`` refuse context lines without a prefix and
hunks without file headers, which models produce all the time, and neither reports a mismatch
with the expected and actual lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch that cannot be applied; nothing was changed.

    Attributes:
        message: what is wrong (``Context mismatch at line 12: ...``, ``Hunks 1 and 2 overlap``).
        expected, actual: for a context mismatch, the lines the hunk expects and those in the file.
    """

    def __init__(self, message: str, expected: list[str] | None = None, actual: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.expected = expected
        self.actual = actual

    def to_json(self) -> dict[str, Any]:
        """``{"error": message, "expected"?: [...], "actual"?: [...]}``."""
        report: dict[str, Any] = {"error": self.message}
        if self.expected is not None:
            report["expected"] = self.expected
            report["actual"] = self.actual
        return report


@dataclass
class Hunk:
    """One hunk: its number (from 1), the old start line, and its ``(op, text)`` lines."""

    number: int
    old_start: int
    lines: list[tuple[str, str]] = field(default_factory=list)
    no_newline_at_end: bool = False

    @property
    def old(self) -> list[str]:
        """The lines the file must hold: context and removed lines."""
        return [text for op, text in self.lines if op != "+"]

    @property
    def new(self) -> list[str]:
        """The lines that replace them: context and added lines."""
        return [text for op, text in self.lines if op != "-"]

    @property
    def changed(self) -> int:
        """Lines removed plus lines added."""
        return sum(1 for op, _ in self.lines if op != " ")


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a unified diff.

    Raises:
        PatchError: no hunk at all, or a ``@@`` line that is not a hunk header.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    hunks: list[Hunk] = []
    for line in lines:
        if line.startswith("@@"):
            match = _HEADER.match(line)
            if match is None:
                raise PatchError(f"Patch parse error: {line!r} is not a hunk header like '@@ -10,5 +10,6 @@'")
            hunks.append(Hunk(len(hunks) + 1, int(match.group(1))))
        elif not hunks:
            continue  # file headers and anything else before the first hunk
        elif line.startswith("\\"):
            last = hunks[-1].lines[-1][0] if hunks[-1].lines else " "
            hunks[-1].no_newline_at_end = last != "-"
        elif line[:1] in ("-", "+", " "):
            hunks[-1].lines.append((line[0], line[1:]))
        else:
            hunks[-1].lines.append((" ", line))
    if not hunks:
        raise PatchError("Patch parse error: no hunk (a hunk starts with a header like '@@ -10,5 +10,6 @@')")
    for hunk in hunks:
        if not hunk.lines:
            raise PatchError(f"Patch parse error: hunk {hunk.number} has no lines")
    return hunks


def _span(hunk: Hunk, total: int) -> tuple[int, int]:
    """The 0-based ``[start, end)`` of the file lines a hunk replaces.

    Raises:
        PatchError: the hunk starts outside the file.
    """
    size = len(hunk.old)
    start = hunk.old_start if size == 0 else hunk.old_start - 1
    if start < 0 or start + size > total or (size and hunk.old_start < 1):
        raise PatchError(
            f"Invalid line number: hunk {hunk.number} starts at line {hunk.old_start} and needs {size} lines,"
            f" but the file has {total}"
        )
    return start, start + size


def apply_patch(lines: list[str], hunks: list[Hunk]) -> tuple[list[str], int, bool]:
    """Apply every hunk to ``lines`` (a file's lines without line ends), or none.

    Returns:
        ``(new_lines, lines_changed, no_newline_at_end)``; the last is true when the patch says
        the new file ends without a line end (``\\ No newline at end of file`` after its last line).
    Raises:
        PatchError: a hunk outside the file, a context mismatch (with the expected and actual
            lines), or two hunks over the same lines.
    """
    spans = []
    for hunk in hunks:
        start, end = _span(hunk, len(lines))
        actual = lines[start:end]
        if actual != hunk.old:
            first = next((i for i, (a, b) in enumerate(zip(actual, hunk.old, strict=False)) if a != b), 0)
            raise PatchError(
                f"Context mismatch at line {start + first + 1}: hunk {hunk.number} does not match the file",
                expected=hunk.old,
                actual=actual,
            )
        spans.append((start, end, hunk))
    spans.sort(key=lambda item: (item[0], item[1]))
    for (start_a, end_a, a), (start_b, end_b, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a or (start_a == start_b and end_a == start_a and end_b == start_b):
            raise PatchError(
                f"Hunks {a.number} and {b.number} overlap (lines {start_a + 1}-{end_a} and {start_b + 1}-{end_b})"
            )
    result = list(lines)
    for start, end, hunk in reversed(spans):
        result[start:end] = hunk.new
    at_end = [hunk for start, end, hunk in spans if end == len(lines)]
    no_newline = bool(at_end) and at_end[-1].no_newline_at_end
    return result, sum(hunk.changed for hunk in hunks), no_newline
