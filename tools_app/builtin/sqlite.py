"""The SQLite toolbox: ``sqlite_<Name>_query {sql}`` (docs/guide-toolboxes.md §1).

One connection per toolbox per process, opened on first use and shared by every session and
thread of the process, one statement at a time (a lock). ``SqliteReadOnly`` opens the file
read-only (``mode=ro`` and ``query_only``), so a write is an error the model sees;
``SqliteReadWrite`` creates the file on first use, commits each statement, and logs writes
(``tools.sqlite_write``: toolbox and rows changed, never the SQL). ``ATTACH`` and ``VACUUM INTO``
are refused, so a query cannot reach another file. A statement that runs past the call's time
limit (``AGENTS_TOOL_TIMEOUT``, or the agent's ``asyncCallTimeoutSeconds``) or whose call is
cancelled is interrupted through SQLite's progress handler. Rows come back as JSON, cut once
they would pass the output cap.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agentfiles.builtins import BuiltinToolbox, SqliteConfig

from ..base import ToolContext, ToolResult
from .common import BuiltinTool, json_result, json_safe, json_size

log = logging.getLogger("tools.sqlite")

#: SQLite virtual-machine instructions between two looks at the deadline.
PROGRESS_STEPS = 1000
#: Room kept under the output cap for what surrounds the rows in a result.
ENVELOPE_BYTES = 256
#: Seconds a statement waits for another process's write lock on the file.
BUSY_TIMEOUT = 5.0


def _authorize(action: int, *_: Any) -> int:
    """Refuse ATTACH and DETACH (VACUUM INTO goes through ATTACH too)."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class SqliteTool(BuiltinTool):
    """``sqlite_<Name>_query``: run one SQL statement on the toolbox's database.

    Args:
        box: the parsed ``SqliteToolbox`` entry.
        path: the database file, resolved.
    """

    def __init__(self, box: BuiltinToolbox, path: Path) -> None:
        config = box.config
        assert isinstance(config, SqliteConfig)  # noqa: S101 - narrows the type (never checks input)
        self.path = path
        self.read_only = config.read_only
        mode = "read-only" if self.read_only else "read-write"
        super().__init__(
            box,
            f"sqlite_{config.Name}_query",
            f"{config.Description or config.Name} (a {mode} SQLite database). Runs one SQL statement and"
            ' answers {"columns": [...], "rows": [[...], ...], "rowCount": n}; a statement without rows'
            ' answers {"changes", "lastRowId"}.',
            {
                "type": "object",
                "properties": {"sql": {"type": "string", "description": "one SQL statement"}},
                "required": ["sql"],
            },
        )
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._pid: int | None = None

    def _connect(self) -> sqlite3.Connection:
        """The process's connection (a new one after a fork); called with the lock held."""
        if self._connection is None or self._pid != os.getpid():
            mode = "ro" if self.read_only else "rwc"
            connection = sqlite3.connect(
                f"file:{quote(str(self.path))}?mode={mode}",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=BUSY_TIMEOUT,
            )
            if self.read_only:
                connection.execute("PRAGMA query_only = ON")
            connection.set_authorizer(_authorize)
            self._connection, self._pid = connection, os.getpid()
        return self._connection

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run ``arguments["sql"]``.

        Errors (``is_error``, the text names the tool): no ``sql``; the database cannot be
        opened; a write on a read-only database; an SQL error; the time limit or a cancellation
        (the statement is interrupted).
        """
        sql = arguments.get("sql") if isinstance(arguments, dict) else None
        if not isinstance(sql, str) or not sql.strip():
            return self.fail('the argument "sql" (one SQL statement) is required')
        started = time.monotonic()
        deadline = started + ctx.timeout if ctx.timeout is not None else None
        wait = None if deadline is None else max(0.0, deadline - started)
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            return self.fail(f"the database stayed busy with another query for {wait:.0f}s")
        try:
            return self._query(sql, ctx, deadline)
        finally:
            self._lock.release()

    def _query(self, sql: str, ctx: ToolContext, deadline: float | None) -> ToolResult:
        try:
            connection = self._connect()
        except sqlite3.Error as error:
            return self.fail(f"cannot open the database {self.path}: {error}")
        stopped: list[str] = []

        def progress() -> int:
            if ctx.cancel is not None and ctx.cancel.is_set():
                stopped.append("the call was cancelled; the query was interrupted")
            elif deadline is not None and time.monotonic() > deadline:
                stopped.append(f"the query ran longer than {ctx.timeout:g}s and was interrupted")
            return 1 if stopped else 0

        connection.set_progress_handler(progress, PROGRESS_STEPS)
        try:
            cursor = connection.execute(sql)
            if cursor.description is None:
                result: dict[str, Any] = {"changes": max(cursor.rowcount, 0), "lastRowId": cursor.lastrowid}
            else:
                result = self._rows(cursor, ctx.output_max_bytes - ENVELOPE_BYTES)
            changes = result.get("changes", 0)
        except sqlite3.Error as error:
            if stopped:
                return self.fail(stopped[0])
            text = str(error)
            if self.read_only and ("readonly" in text or "read-only" in text or "query_only" in text):
                return self.fail(f"the database is read-only (SqliteReadOnly); the statement was refused: {text}")
            return self.fail(f"SQL error: {text}")
        finally:
            connection.set_progress_handler(None, 0)
            if connection.in_transaction:
                connection.rollback()
        if changes and not self.read_only:
            log.info("sqlite write", extra={"kind": "tools.sqlite_write", "tool": self.name, "changes": changes})
        return json_result(result)

    @staticmethod
    def _rows(cursor: sqlite3.Cursor, max_bytes: int) -> dict[str, Any]:
        """Columns and rows, fetched until they would pass ``max_bytes`` of JSON."""
        columns = [column[0] for column in cursor.description]
        rows: list[list[Any]] = []
        size = json_size(columns)
        truncated = False
        for row in cursor:
            values = json_safe(list(row))
            size += json_size(values) + 1
            if size > max_bytes:
                truncated = True
                break
            rows.append(values)
        result: dict[str, Any] = {"columns": columns, "rows": rows, "rowCount": len(rows)}
        if truncated:
            result["truncated"] = True
        return result
