"""The Developer toolbox's file editing: ``read-file-range``, ``write-file-range``, ``patch-file``.

Files are read and written through the toolbox's sandbox. Lines are numbered from 1; a file's
last line end is kept as it was. A snapshot reference is the MD5 of the file's bytes: every read
and write answers one, and ``expected_snapshot_ref`` makes a write or a patch fail when the file
is no longer what the model read. Writes replace the file atomically (a temporary file renamed
over it, its mode kept).

``write-file-range`` takes ranges ``N`` (replace line N), ``N-M`` (replace N to M), ``N+``
(insert after line N), ``head`` (insert before line 1, which also creates a file), ``tail``
(append) and ``whole`` (replace everything), one content block per range (``""`` deletes). With
``commit: false`` the edits are staged in a write session (``sessionId``); later calls with
``session_id`` add edits in the file's original line numbers (they may not overlap), read the
staged text, and ``commit: true`` writes it, once. ``commit`` defaults to true without a
session and to false with one. A session expires after an hour unused, refuses ``whole``, and
refuses to commit if the file changed on disk since it started. Sessions are rows
(``tools_app.models.StagedWrite``), so any worker can continue one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from ..base import ToolContext
from .patching import PatchError, apply_patch, parse_patch
from .sandbox import FileSandbox

#: A write session unused for this long is gone.
SESSION_LIFETIME = timedelta(hours=1)

_WRITE_RANGE = re.compile(r"^(?:(\d+)(?:-(\d+)|(\+))?|head|tail|whole)$")
_READ_RANGE = re.compile(r"^(?:(\d+)(?:-(\d+))?|head|tail)$")


class EditError(Exception):
    """A file operation that cannot be done; ``report`` is what the model gets (text or JSON)."""

    def __init__(self, report: str | dict[str, Any]) -> None:
        super().__init__(report if isinstance(report, str) else json.dumps(report))
        self.report = report


@dataclass
class TextFile:
    """A file as lines (decoded as UTF-8, undecodable bytes kept as they are)."""

    lines: list[str]
    newline_at_end: bool
    snapshot: str
    size: int

    @classmethod
    def parse(cls, data: bytes) -> TextFile:
        """Split ``data`` into lines; the last line end is remembered, not kept as a line."""
        text = data.decode("utf-8", "surrogateescape")
        lines = text.split("\n")
        newline = text.endswith("\n")
        if newline or text == "":
            lines.pop()
        return cls(lines, newline, snapshot_of(data), len(data))

    def dump(self, lines: list[str], newline_at_end: bool | None = None) -> bytes:
        """``lines`` joined into file bytes, ending as this file did (or as told)."""
        end = self.newline_at_end if newline_at_end is None else newline_at_end
        text = "\n".join(lines) + ("\n" if lines and end else "")
        return text.encode("utf-8", "surrogateescape")


EMPTY = TextFile([], True, hashlib.md5(b"", usedforsecurity=False).hexdigest(), 0)


def snapshot_of(data: bytes) -> str:
    """The snapshot reference of file content: its MD5 in hex."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _shown(line: str) -> str:
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _load(path: Path) -> TextFile:
    if path.exists() and not path.is_file():
        raise EditError(f"{path} is not a regular file")
    try:
        return TextFile.parse(path.read_bytes())
    except FileNotFoundError:
        raise EditError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise EditError(f"{path} is a directory") from None


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically, keeping its mode."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _text_arg(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise EditError(f'the argument "{key}" is required')
    return value


# --- read-file-range ------------------------------------------------------------------------


def read_file_range(sandbox: FileSandbox, tool: str, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """``read-file-range {path, ranges?, session_id?, metadata_only?}``: numbered lines.

    Raises:
        EditError, sandbox.SandboxError: a refused or missing file, a bad range, an unknown session.
    """
    given = _text_arg(arguments, "path")
    path = sandbox.check_read(given)
    if arguments.get("session_id"):
        row = _session(tool, ctx, str(arguments["session_id"]), path)
        current = _load(path)
        _still_unchanged(row, current)
        staged = _apply(current.lines, row.edits)
        data = current.dump(staged)
        file, snapshot = TextFile.parse(data), row.base_snapshot
    else:
        file = _load(path)
        snapshot = file.snapshot
    answer: dict[str, Any] = {
        "path": given,
        "content": "",
        "linesRead": 0,
        "totalLineCount": len(file.lines),
        "totalFileSize": file.size,
        "rangesParsed": [],
        "snapshotRef": snapshot,
    }
    if arguments.get("metadata_only") is True:
        return {**answer, "metadataOnly": True}
    spans = _read_spans(arguments.get("ranges"), len(file.lines))
    numbers = [n for start, end in spans for n in range(start, end + 1)]
    answer["content"] = "".join(f"{n}\t{_shown(file.lines[n - 1])}\n" for n in numbers)
    answer["linesRead"] = len(numbers)
    answer["rangesParsed"] = [f"{start}-{end}" for start, end in spans]
    return answer


def _read_spans(ranges: Any, total: int) -> list[tuple[int, int]]:
    if ranges is None or (isinstance(ranges, str) and not ranges.strip()):
        return [(1, total)] if total else []
    if not isinstance(ranges, str):
        raise EditError('"ranges" must be a string like "1-10,20-30"')
    spans = []
    for part in (p.strip() for p in ranges.split(",")):
        match = _READ_RANGE.match(part)
        if match is None:
            raise EditError(f"invalid range {part!r}: use N, N-M, head or tail, separated by commas")
        if part in ("head", "tail"):
            spans.append((1, total))
            continue
        start = int(match.group(1))
        end = int(match.group(2) or start)
        if start < 1 or end < start:
            raise EditError(f"invalid range {part!r}: lines count from 1 and a range goes up")
        if start > total:
            raise EditError(f"range {part!r} is out of bounds: the file has {total} lines")
        spans.append((start, min(end, total)))
    return [span for span in spans if span[0] <= span[1]]


# --- write-file-range -----------------------------------------------------------------------


def _write_edits(ranges: Any, blocks: Any, total: int) -> list[list[Any]]:
    """``[start, end, lines]`` per range: lines ``start..end`` (1-based) become ``lines``; an
    insertion before line ``start`` has ``end == start - 1``."""
    if not isinstance(ranges, str) or not ranges.strip():
        raise EditError('the argument "ranges" is required (N, N-M, N+, head, tail or whole)')
    if not isinstance(blocks, list) or not all(isinstance(b, str) for b in blocks):
        raise EditError('the argument "contentBlocks" is required: a list of strings, one per range')
    parts = [p.strip() for p in ranges.split(",")]
    if len(parts) != len(blocks):
        raise EditError(f"{len(parts)} ranges but {len(blocks)} content blocks; give one block per range")
    edits = []
    for part, block in zip(parts, blocks, strict=True):
        match = _WRITE_RANGE.match(part)
        if match is None:
            raise EditError(f"invalid range {part!r}: use N, N-M, N+, head, tail or whole")
        lines = block.split("\n")
        if block.endswith("\n") or block == "":
            lines.pop()
        if part == "head":
            start, end = 1, 0
        elif part == "tail":
            start, end = total + 1, total
        elif part == "whole":
            start, end = 1, total
        elif match.group(3):
            start = int(match.group(1)) + 1
            end = start - 1
        else:
            start = int(match.group(1))
            end = int(match.group(2) or start)
            if start < 1 or end < start:
                raise EditError(f"invalid range {part!r}: lines count from 1 and a range goes up")
        if start - 1 > total or end > total:
            raise EditError(f"range {part!r} is out of bounds: the file has {total} lines")
        edits.append([start, end, lines])
    return edits


def _check_overlaps(edits: list[list[Any]]) -> None:
    ordered = sorted(edits, key=lambda e: (e[0], e[1]))
    for (start_a, end_a, _), (start_b, end_b, _) in zip(ordered, ordered[1:], strict=False):
        both_inserts = end_a < start_a and end_b < start_b and start_a == start_b
        if start_b <= end_a or both_inserts:
            raise EditError(
                f"edits overlap: lines {start_a}-{end_a} and {start_b}-{end_b} (in the file's original numbers)"
            )


def _apply(lines: list[str], edits: list[list[Any]]) -> list[str]:
    out: list[str] = []
    position = 1
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        out += lines[position - 1 : start - 1]
        out += new
        position = max(position, end + 1)
    return out + lines[position - 1 :]


def _session(tool: str, ctx: ToolContext, session_id: str, path: Path) -> Any:
    from tools_app.models import StagedWrite

    try:
        row = StagedWrite.objects.filter(pk=uuid.UUID(session_id), tool=tool, session_id=ctx.session_id).first()
    except ValueError:
        row = None
    if row is None:
        raise EditError(f"no write session {session_id!r} (sessions belong to the conversation that opened them)")
    if row.committed_at is not None:
        raise EditError(f"write session {session_id} is already committed; start a new one")
    if timezone.now() - row.updated_at > SESSION_LIFETIME:
        raise EditError(f"write session {session_id} expired after an hour without use; start a new one")
    if row.path != str(path):
        raise EditError(f"write session {session_id} edits {row.path}, not {path}")
    return row


def _still_unchanged(row: Any, current: TextFile) -> None:
    if current.snapshot != row.base_snapshot:
        raise EditError(
            f"{row.path} changed on disk since write session {row.id} started"
            f" (snapshot {row.base_snapshot}, now {current.snapshot}); read it again and start a new session"
        )


def write_file_range(sandbox: FileSandbox, tool: str, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """``write-file-range {path, ranges, contentBlocks, session_id?, expected_snapshot_ref?, commit?}``.

    Raises:
        EditError, sandbox.SandboxError: see the module docstring.
    """
    from tools_app.models import StagedWrite

    given = _text_arg(arguments, "path")
    session_id = arguments.get("session_id")
    commit = arguments.get("commit")
    commit = (not session_id) if commit is None else commit is True
    path = sandbox.check_write(given)
    current = _load(path) if path.exists() else EMPTY
    expected = arguments.get("expected_snapshot_ref")
    if expected and expected != current.snapshot:
        raise EditError(f"{given} changed: its snapshot is {current.snapshot}, not {expected}; read it again")
    row = _session(tool, ctx, str(session_id), path) if session_id else None
    if row is not None:
        _still_unchanged(row, current)
    adding = not (row is not None and commit and arguments.get("ranges") is None)
    edits = _write_edits(arguments.get("ranges"), arguments.get("contentBlocks"), len(current.lines)) if adding else []
    whole = isinstance(arguments.get("ranges"), str) and "whole" in arguments["ranges"].split(",")
    if whole and (row is not None or not commit):
        raise EditError("the range whole cannot be used in a write session; write it in one call with commit true")
    every = (row.edits if row is not None else []) + edits
    _check_overlaps(every)
    lines = _apply(current.lines, every)
    data = current.dump(lines)
    now = timezone.now()
    if commit:
        sandbox.check_write(given, len(data))
        write_atomically(path, data)
    if row is None and not commit:
        row = StagedWrite.objects.create(
            tool=tool,
            session_id=ctx.session_id,
            path=str(path),
            base_snapshot=current.snapshot,
            edits=every,
            created_at=now,
            updated_at=now,
        )
    elif row is not None:
        row.edits, row.updated_at = every, now
        row.committed_at = now if commit else None
        row.save(update_fields=["edits", "updated_at", "committed_at"])
    return {
        "path": given,
        "rangesModified": len(edits),
        "linesWritten": sum(len(e[2]) for e in edits),
        "beforeSnapshotRef": current.snapshot,
        "afterSnapshotRef": snapshot_of(data),
        "sessionId": str(row.id) if row is not None else None,
        "sessionNetDelta": sum(len(new) - (end - start + 1) for start, end, new in every),
        "sessionCommitted": commit,
        "sessionStatus": "committed" if commit else "staged",
    }


# --- patch-file -----------------------------------------------------------------------------


def patch_file(sandbox: FileSandbox, tool: str, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """``patch-file {path, patch, expected_snapshot_ref?}``: every hunk applied, or none.

    Raises:
        EditError: with ``{"error", "expected"?, "actual"?}`` when the patch does not apply (the
            file is left as it was); refused or missing files.
        sandbox.SandboxError: refused by the sandbox.
    """
    given = _text_arg(arguments, "path")
    patch = _text_arg(arguments, "patch")
    path = sandbox.check_write(given)
    if not path.exists():
        raise EditError({"error": f"File not found: {given}"})
    current = _load(path)
    expected = arguments.get("expected_snapshot_ref")
    if expected and expected != current.snapshot:
        raise EditError(f"{given} changed: its snapshot is {current.snapshot}, not {expected}; read it again")
    try:
        hunks = parse_patch(patch)
        lines, changed, no_newline = apply_patch(current.lines, hunks)
    except PatchError as error:
        report = error.to_json()
        if error.expected is not None:
            report["expected"] = [_shown(line) for line in error.expected]
            report["actual"] = [_shown(line) for line in error.actual or []]
        raise EditError(report) from None
    data = current.dump(lines, False if no_newline else None)
    sandbox.check_write(given, len(data))
    write_atomically(path, data)
    return {
        "path": given,
        "hunksApplied": len(hunks),
        "hunksRejected": 0,
        "linesChanged": changed,
        "beforeSnapshotRef": current.snapshot,
        "afterSnapshotRef": snapshot_of(data),
    }
