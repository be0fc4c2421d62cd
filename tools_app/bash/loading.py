"""Finding and loading bash tools: one executable, or every tool of a directory (docs/tools.md §3).

:func:`describe_script` runs ``<exe> describe`` and parses the document; :func:`load_single_tool`
makes one :class:`~tools_app.bash.tool.BashTool` (a ``SingleTool`` toolbox);
:func:`list_tool_files` picks the candidate files of a directory and :func:`load_bash_directory`
loads them all, a failing ``describe`` dropping only that file (error isolation).

* ``BasenameFilter`` keeps the files whose basename contains it anywhere (``".sh"``, ``"git"``),
  as agents-exe does, or, when it holds glob characters, whose whole basename matches it as a
  glob (:func:`list_tool_files`).
"""

from __future__ import annotations

import fnmatch
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from foundation.toolenv import base_environment

from .process import format_seconds, run_process, tail_text
from .protocol import DescribeError, ScriptInfo
from .tool import BashTool

#: Seconds a ``describe`` call may take before the script is dropped.
DESCRIBE_TIMEOUT = 10.0
#: Bytes a ``describe`` document may take.
DESCRIBE_MAX_BYTES = 1024 * 1024
#: How many ``describe`` calls run at once when loading a directory.
_DESCRIBE_WORKERS = 8
#: File suffixes that mark sub-agent files in a ``toolDirectory``, never tools.
AGENT_FILE_SUFFIXES = (".json", ".tramaj")


class BashToolLoadError(Exception):
    """A toolbox path is unusable: the directory or file is missing or not executable."""


def _is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def describe_script(path: Path, *, timeout: float = DESCRIBE_TIMEOUT) -> ScriptInfo:
    """Run ``<path> describe`` (for at most ``timeout`` seconds) and parse its output.

    Returns:
        the parsed document.
    Raises:
        DescribeError: the script could not start, exited non-zero, timed out, printed more than
            :data:`DESCRIBE_MAX_BYTES`, or printed something that is not a valid ``ScriptInfo``
            document.
    """
    try:
        outcome = run_process(
            [str(path), "describe"],
            stdin_data=None,
            env=base_environment(),
            timeout=timeout,
            max_stdout=DESCRIBE_MAX_BYTES,
        )
    except (OSError, ValueError) as exc:
        raise DescribeError(f"describe could not be started: {exc}") from exc
    if outcome.timed_out:
        raise DescribeError(f"describe timed out after {format_seconds(timeout)}")
    if outcome.returncode != 0:
        detail = tail_text(outcome.stderr, 500)
        raise DescribeError(
            f"describe exited with code {outcome.returncode}" + (f": {detail}" if detail else "")
        )
    if outcome.stdout_truncated:
        raise DescribeError(f"describe printed {outcome.stdout_bytes} bytes, more than {DESCRIBE_MAX_BYTES}")
    try:
        data = json.loads(outcome.stdout.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise DescribeError(f"describe did not print valid JSON: {exc}") from exc
    return ScriptInfo.parse(data)


def load_single_tool(path: Path, *, timeout: float = DESCRIBE_TIMEOUT) -> BashTool:
    """Load one bash tool (a ``SingleTool`` toolbox, or one file of a directory).

    Raises:
        BashToolLoadError: ``path`` is missing, not a regular file, or not executable.
        DescribeError: ``describe`` failed (see :func:`describe_script`).
    """
    path = Path(path)
    if not path.exists():
        raise BashToolLoadError(f"{path}: no such file")
    if not _is_executable_file(path):
        raise BashToolLoadError(f"{path}: not an executable regular file")
    return BashTool(path, describe_script(path, timeout=timeout))


def _basename_matches(name: str, basename_filter: str) -> bool:
    if any(ch in basename_filter for ch in "*?["):
        return fnmatch.fnmatchcase(name, basename_filter)
    return basename_filter in name


def list_tool_files(directory: Path, basename_filter: str | None = None) -> list[Path]:
    """The candidate tools of a directory, sorted by name (not recursive).

    Keeps executable regular files (symlinks followed), skips sub-agent files (``*.json``,
    ``*.tramaj``). ``basename_filter``, when given, keeps only files whose basename *contains*
    it, anywhere (``".sh"`` keeps ``read.sh`` and ``x.sh.bak``, ``"git"`` keeps ``my-git-log``),
    as agents-exe filters its bash toolboxes. A filter holding glob characters (``*?[``) is
    matched as a glob on the whole basename instead (``"git-*"``, ``"*.sh"``): our extension,
    for what a substring cannot say (anchoring); agents-exe would look for those characters
    literally, which no real tool name contains.

    Raises:
        BashToolLoadError: ``directory`` is missing or not a directory.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BashToolLoadError(f"{directory}: tool directory not found")
    found = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(AGENT_FILE_SUFFIXES):
            continue
        if basename_filter and not _basename_matches(entry.name, basename_filter):
            continue
        if _is_executable_file(entry):
            found.append(entry)
    return found


def load_bash_directory(
    path: Path, basename_filter: str | None = None, *, timeout: float = DESCRIBE_TIMEOUT
) -> tuple[list[BashTool], list[str]]:
    """Load every tool of a directory, a failing ``describe`` dropping only that file.

    ``describe`` runs concurrently for the files (see :func:`list_tool_files` for which files).
    A file whose ``describe`` fails is dropped and yields one warning ``"<file>: <reason>"``.

    Returns:
        ``(tools, warnings)``, tools in file-name order.
    Raises:
        BashToolLoadError: the directory is missing.
    """
    files = list_tool_files(path, basename_filter)
    if not files:
        return [], []

    def load(file: Path) -> BashTool | str:
        try:
            return BashTool(file, describe_script(file, timeout=timeout))
        except DescribeError as exc:
            return f"{file}: {exc}"

    with ThreadPoolExecutor(max_workers=min(_DESCRIBE_WORKERS, len(files))) as pool:
        outcomes = list(pool.map(load, files))
    tools = [o for o in outcomes if isinstance(o, BashTool)]
    warnings = [o for o in outcomes if isinstance(o, str)]
    return tools, warnings
