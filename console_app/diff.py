"""Line diffs between two versions of a stored agent, for the version page."""

from __future__ import annotations

import difflib
import json
from typing import Any


def _lines(contents: dict[str, Any], files: dict[str, str]) -> dict[str, list[str]]:
    """What a version is, as text: its contents as indented JSON, and each file."""
    shown = {"contents": json.dumps(contents, indent=2, sort_keys=True, ensure_ascii=False).splitlines()}
    shown.update({f"files/{path}": text.splitlines() for path, text in sorted(files.items())})
    return shown


def version_diff(
    before: tuple[dict[str, Any], dict[str, str]] | None, after: tuple[dict[str, Any], dict[str, str]]
) -> list[tuple[str, str]]:
    """A unified diff of two versions, one section per part that changed.

    Args:
        before: ``(contents, files)`` of the previous version, or ``None`` for a first version.
        after: ``(contents, files)`` of the version shown.
    Returns:
        ``(kind, line)`` pairs, ``kind`` one of ``"file"`` (a section's header), ``"hunk"``,
        ``"add"``, ``"del"`` or ``"same"``; empty when nothing changed.
    """
    old = _lines(*before) if before is not None else {}
    new = _lines(*after)
    diff: list[tuple[str, str]] = []
    for part in sorted({*old, *new}, key=lambda name: (name != "contents", name)):
        lines = list(
            difflib.unified_diff(
                old.get(part, []), new.get(part, []), fromfile=part if part in old else "/dev/null",
                tofile=part if part in new else "/dev/null", lineterm="", n=3,
            )
        )
        for line in lines:
            if line.startswith(("---", "+++")):
                diff.append(("file", line))
            elif line.startswith("@@"):
                diff.append(("hunk", line))
            elif line.startswith("+"):
                diff.append(("add", line))
            elif line.startswith("-"):
                diff.append(("del", line))
            else:
                diff.append(("same", line))
    return diff
