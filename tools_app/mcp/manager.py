"""The MCP clients of this process, on one event loop thread (docs/guide-mcp.md §1).

The MCP SDK is asyncio; tools are called from worker threads (the step engine's, a Celery
task's). :class:`McpManager` runs one asyncio loop in a daemon thread and keeps one
:class:`~tools_app.mcp.client.McpConnection` per server *key*: the agent that declares it and its
entry. So a server starts at most once per agent per process, however many sessions use it, and
only in a process that builds that agent. Calls cross over with
``asyncio.run_coroutine_threadsafe`` and wait on the future, honouring the call's timeout and
its cancellation event.

The servers stop with the process: :func:`shutdown` (called at exit, and by ``agents serve``
before it leaves) stops every session, so a stdio server gets its stdin closed, then SIGTERM and
SIGKILL. A process forked from this one (a prefork Celery pool) starts with no connection: the
parent's sessions belong to the parent's loop thread, which the child does not have.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar

import mcp_types as types

from foundation.telemetry import current_traceparent

from .client import McpConnection, McpStartError, ProgressCallback
from .config import ServerConfig

log = logging.getLogger("tools.mcp")

T = TypeVar("T")

#: Seconds every session together may take to stop at shutdown.
SHUTDOWN_SECONDS = 15.0
#: How often (seconds) a waiting caller looks at its cancellation event.
_POLL_SECONDS = 0.05


class McpCancelled(Exception):
    """The caller's cancellation event was set; the call was abandoned (and cancelled on the server)."""


class McpTimeout(Exception):
    """The call took longer than its timeout; it was abandoned (and cancelled on the server)."""


#: What a caller gets told of a call's progress: ``(progress, total, message)``.
ProgressSink = Callable[[float, float | None, str | None], None]


class McpManager:
    """One event loop thread and the connections it runs, for this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[Hashable, McpConnection] = {}

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="mcp-clients", daemon=True)
                self._thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    def connection(self, key: Hashable, config: ServerConfig) -> McpConnection:
        """The connection for ``key`` (made, not started, on first use)."""
        with self._lock:
            found = self._connections.get(key)
            if found is None:
                found = self._connections[key] = McpConnection(config)
            return found

    def starts(self) -> int:
        """How many times this process started an MCP server (spawns, for stdio servers)."""
        with self._lock:
            return sum(c.starts for c in self._connections.values())

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        timeout: float | None,
        cancel: threading.Event | None = None,
        progress: queue.SimpleQueue[tuple[float, float | None, str | None]] | None = None,
        on_progress: ProgressSink | None = None,
    ) -> T:
        """Run ``coro`` on the loop and wait for it in this thread.

        Args:
            coro: the coroutine (of a connection of this manager).
            timeout: seconds to wait; ``None`` waits as long as it takes.
            cancel: when set, the coroutine is cancelled and :class:`McpCancelled` raised.
            progress: filled by the coroutine (from the loop); drained here, in the caller's
                thread, into ``on_progress``.
            on_progress: told each progress report, in the caller's thread.
        Returns:
            the coroutine's result.
        Raises:
            McpTimeout, McpCancelled, or whatever ``coro`` raises.
        """
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                try:
                    result = future.result(timeout=_POLL_SECONDS)
                except concurrent.futures.TimeoutError:
                    _drain(progress, on_progress)
                    if cancel is not None and cancel.is_set():
                        raise McpCancelled() from None
                    if deadline is not None and time.monotonic() >= deadline:
                        raise McpTimeout() from None
                    continue
                _drain(progress, on_progress)
                return result
        finally:
            future.cancel()

    def call(
        self,
        key: Hashable,
        config: ServerConfig,
        tool: str,
        arguments: dict[str, Any],
        *,
        start_timeout: float,
        timeout: float | None,
        cancel: threading.Event | None,
        on_progress: ProgressSink | None,
    ) -> types.CallToolResult:
        """Call ``tool`` on the server of ``key``, starting it when it is not running.

        Progress notifications reach ``on_progress`` in this thread, before the result returns.

        Raises:
            McpStartError, McpGone, MCPError (see ``McpConnection.call``), McpTimeout, McpCancelled.
        """
        connection = self.connection(key, config)
        reports: queue.SimpleQueue[tuple[float, float | None, str | None]] = queue.SimpleQueue()
        callback: ProgressCallback | None = None
        if on_progress is not None:

            async def callback(progress: float, total: float | None, message: str | None) -> None:
                reports.put((progress, total, message))

        return self.run(
            # the loop thread runs the call outside this thread's trace context: it is handed over
            connection.call(tool, arguments, callback, start_timeout, current_traceparent()),
            timeout=timeout,
            cancel=cancel,
            progress=reports,
            on_progress=on_progress,
        )

    def start(self, key: Hashable, config: ServerConfig, timeout: float) -> McpConnection:
        """Start (or find running) the server of ``key`` and list its tools.

        Raises:
            McpStartError: it could not be started or did not list its tools within ``timeout`` s.
        """
        connection = self.connection(key, config)
        self.run(connection.ensure_started(timeout), timeout=None)
        return connection

    def shutdown(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Stop every server, then the loop. Safe to call more than once."""
        with self._lock:
            loop, self._loop = self._loop, None
            connections = list(self._connections.values())
            self._connections.clear()
            thread, self._thread = self._thread, None
        if loop is None:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout=timeout)
        except (concurrent.futures.TimeoutError, RuntimeError) as error:
            log.warning("mcp servers not all stopped", extra={"kind": "mcp.shutdown_incomplete", "error": str(error)})
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=1.0)


def _drain(
    reports: queue.SimpleQueue[tuple[float, float | None, str | None]] | None, sink: ProgressSink | None
) -> None:
    if reports is None or sink is None:
        return
    while True:
        try:
            value, total, message = reports.get_nowait()
        except queue.Empty:
            return
        sink(value, total, message)


_manager = McpManager()


def get_manager() -> McpManager:
    """This process's manager."""
    return _manager


def shutdown() -> None:
    """Stop every MCP server this process started (at exit, and before ``agents serve`` leaves)."""
    _manager.shutdown()


def _forget_after_fork() -> None:
    """In a forked child: a manager of its own; the parent's servers stay the parent's."""
    global _manager
    _manager = McpManager()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_after_fork)

__all__ = ["McpCancelled", "McpManager", "McpStartError", "McpTimeout", "get_manager", "shutdown"]
