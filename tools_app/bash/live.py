"""A live ``toolDirectory``: scripts added, changed or removed while serving (docs/tools.md §3.9).

:class:`LiveBashDirectory` is a live toolbox (``tools_app.toolset.LiveToolbox``). Each time its
tools are read, at most once per :data:`CHECK_INTERVAL`, it lists the directory and compares every
candidate file's signature (inode, size, modification and change times in nanoseconds) with the
one it last described. Only a new or changed file runs ``describe`` again; a removed one is
dropped. No thread and no watcher: a process that never reads the tools never looks, and every
process (server or worker) looks for itself, so all of them follow the same files.

A file whose ``describe`` fails is left out and reported once per version of the file: the first
build returns the line as a warning (``check`` and ``serve`` print it), later ones are logged as
``tools.skipped``; an unchanged broken file is not described again and says nothing more.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..names import ToolNameMap
from .loading import DESCRIBE_TIMEOUT, BashToolLoadError, describe_script, list_tool_files
from .protocol import DescribeError
from .tool import BashTool

log = logging.getLogger("tools.bash.live")

#: Seconds between two looks at the directory: reads in between reuse the last look.
CHECK_INTERVAL = 1.0
#: How many ``describe`` calls run at once when files changed.
_DESCRIBE_WORKERS = 8

#: What identifies one version of a file: (inode, size, mtime_ns, ctime_ns).
Signature = tuple[int, int, int, int]


def _signature(path: Path) -> Signature | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class LiveBashDirectory:
    """The bash tools of one directory, kept in step with its files.

    Args:
        directory: the directory (resolved against the agent file's directory by the caller).
        where: the label of its warnings (``"toolDirectory"``).
        agent: the agent's slug, for log lines.
        interval: seconds between two looks (``None``: :data:`CHECK_INTERVAL`).
        clock: monotonic seconds (tests of the rule pass their own).
        timeout: seconds one ``describe`` may take.

    The directory may be missing (no tools) and appear later.
    """

    gate: str | None = None

    def __init__(
        self,
        directory: Path,
        where: str,
        agent: str,
        *,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = DESCRIBE_TIMEOUT,
    ) -> None:
        self.directory = Path(directory)
        self.where = where
        self.agent = agent
        self._interval = CHECK_INTERVAL if interval is None else interval
        self._clock = clock
        self._timeout = timeout
        self._lock = threading.Lock()
        #: path -> (signature, the tool or the reason its describe failed)
        self._known: dict[Path, tuple[Signature, BashTool | str]] = {}
        self._checked_at: float | None = None
        self._tools: list[BashTool] = []
        self._revision: Hashable = ()

    def load(self) -> list[str]:
        """Look at the directory now (the agent's first build); return the warning lines of the
        files whose ``describe`` failed, ``"<file>: <reason>"`` each (they are not logged)."""
        with self._lock:
            return self._look()

    def snapshot(self) -> tuple[Hashable, list[BashTool]]:
        """``(revision, tools)``: the tools in file-name order, looked at again when the last look
        is :data:`CHECK_INTERVAL` old; the revision changes exactly when the tools do. New
        ``describe`` failures are logged (``tools.skipped``), once per version of a file."""
        with self._lock:
            now = self._clock()
            if self._checked_at is None or now - self._checked_at >= self._interval:
                for line in self._look():
                    log.warning("tool skipped", extra={"kind": "tools.skipped", "agent": self.agent,
                                                       "reason": f"{self.where}: {line}"})
            return self._revision, list(self._tools)

    def _look(self) -> list[str]:
        """List the files, describe the new and changed ones, drop the removed ones; return the new
        failures. Called with the lock held."""
        self._checked_at = self._clock()
        try:
            files = list_tool_files(self.directory)
        except BashToolLoadError:
            files = []
        current = {path: _signature(path) for path in files}
        described = {path: sig for path, (sig, _) in self._known.items()}
        changed = [path for path, sig in current.items() if sig is not None and described.get(path) != sig]
        failures: list[str] = []
        if changed:
            with ThreadPoolExecutor(max_workers=min(_DESCRIBE_WORKERS, len(changed))) as pool:
                outcomes = list(pool.map(self._describe, changed))
            for path, outcome in zip(changed, outcomes, strict=True):
                signature = current[path]
                assert signature is not None  # noqa: S101 - narrows the type (``changed`` has none)
                self._known[path] = (signature, outcome)
                if isinstance(outcome, str):
                    failures.append(outcome)
        removed = [path for path in self._known if current.get(path) is None]
        for gone in removed:
            del self._known[gone]
        if changed or removed:
            entries = sorted(self._known.items(), key=lambda item: item[0].name)
            self._tools = _named([outcome for _, (_, outcome) in entries if isinstance(outcome, BashTool)])
            self._revision = tuple(
                (path.name, sig) for path, (sig, outcome) in entries if isinstance(outcome, BashTool)
            )
            log.info("tool directory read", extra={"kind": "tools.directory_read", "agent": self.agent,
                                                   "directory": str(self.directory), "tools": len(self._tools)})
        return failures

    def _describe(self, path: Path) -> BashTool | str:
        """The tool of ``path``, or the line saying why its ``describe`` failed."""
        try:
            return BashTool(path, describe_script(path, timeout=self._timeout))
        except DescribeError as exc:
            return f"{path}: {exc}"


def _named(tools: list[BashTool]) -> list[BashTool]:
    """The tools with LLM-valid wire names unique among them (``tools_app.names``): a tool whose
    name must change is a renamed copy, so a toolset built from an earlier look keeps its names."""
    names = ToolNameMap.build(tool.original_name for tool in tools)
    result = []
    for tool in tools:
        wire = names.normalized(tool.original_name)
        if wire is not None and wire != tool.name:
            tool = copy.copy(tool)
            tool.name = wire
        result.append(tool)
    return result
