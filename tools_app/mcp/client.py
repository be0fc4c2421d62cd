"""One MCP client session, on the event loop of :mod:`tools_app.mcp.manager` (docs/guide-mcp.md §1).

:class:`McpConnection` starts its server (a child process over stdio, or a streamable HTTP
endpoint), runs ``initialize`` (which sends ``notifications/initialized``) and lists the tools,
following ``nextCursor`` (bounded: docs/tools.md §15.1). It lists them again on
``notifications/tools/list_changed`` (and every 30 s when the server does not promise to send
it), counting each new list in ``generation``.

A server that goes away (its process exits, its stdout closes, the HTTP transport fails) marks
the connection dead: calls in flight fail, and the next call starts the server again. So does a
server that does not answer a ping within :data:`CANCEL_GRACE_SECONDS` after a call to it was
abandoned (timed out or cancelled, which the SDK tells it with ``notifications/cancelled``): its
session is retired (a stdio server's stdin closed, then SIGTERM and SIGKILL, an HTTP session
ended) while the next call starts a new one (docs/tools.md §15.2). Every
coroutine here runs on the manager's loop; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import anyio
import httpx
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from foundation.redaction import redact_urls
from foundation.telemetry import span_context_of

from .config import HttpServer, ServerConfig, StdioServer

log = logging.getLogger("tools.mcp")

CLIENT_INFO = types.Implementation(name="agents-server-mcp-client", version="0.1.0")
#: Seconds a server may take to stop (stdin closed, then SIGTERM and SIGKILL) before its task is cancelled.
STOP_SECONDS = 10.0
#: Seconds between two listings of a server that does not announce changes of its tool list.
POLL_SECONDS = 30.0
#: Most ``tools/list`` pages one listing follows; a server with more is refused, as is one that
#: answers a cursor it answered before (docs/tools.md §15.1).
MAX_LIST_PAGES = 100
#: Characters of a server's cursor quoted in a message (the server chooses its length).
_CURSOR_SHOWN = 40
#: Seconds a server has to answer a ping after a call to it was abandoned before its session is
#: retired, its process stopped, and the next call starts it again (docs/tools.md §15.2).
CANCEL_GRACE_SECONDS = 3.0

#: What the SDK's HTTP transport (and its server) say when a server no longer knows a session.
_SESSION_LOST = ("Session not found", "Session terminated")

#: awaited as ``(progress, total, message)`` with each progress notification of a call
ProgressCallback = ProgressFnT


class McpStartError(Exception):
    """The server could not be started, or did not list its tools in time; the message says which."""


class McpDiscoveryError(McpStartError):
    """``tools/list`` did not end: a ``nextCursor`` answered again, or more than
    :data:`MAX_LIST_PAGES` pages. The message names the server and says which."""


class McpGone(Exception):
    """The server went away during a call (it will be started again by the next one)."""


@asynccontextmanager
async def _transport(config: ServerConfig) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK transport for ``config``: ``(read_stream, write_stream)``."""
    if isinstance(config, StdioServer):
        params = StdioServerParameters(command=config.executable, args=list(config.args), env=config.environment())
        async with stdio_client(params) as streams:
            yield streams
        return
    assert isinstance(config, HttpServer)  # noqa: S101 - narrows the type (never checks input)
    async with create_mcp_http_client(headers=dict(config.headers)) as http:
        http.event_hooks = {**http.event_hooks, "request": [*http.event_hooks["request"], _trace_header]}
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


async def _trace_header(request: httpx.Request) -> None:
    """Send a call's ``params._meta.traceparent`` as the W3C ``traceparent`` header too, so that
    an HTTP server's own tracing continues the call's trace (docs/observability.md §1.2)."""
    try:
        content = request.content
    except httpx.RequestNotRead:
        return
    if request.method != "POST" or b"traceparent" not in content:
        return
    try:
        message = json.loads(content)
    except ValueError:
        return
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get("traceparent") if isinstance(meta, dict) else None
    if isinstance(value, str) and span_context_of(value) is not None:
        request.headers["traceparent"] = value


class McpConnection:
    """A long-lived client session with one MCP server, shared by every caller of this process.

    Attributes:
        config: the server's entry.
        tools: its tools as last listed (``mcp_types.Tool``), empty until then.
        generation: how many listings there have been; ``0`` until the first one.
        starts: how many times its server was started (spawns, for a stdio server).
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tools: list[types.Tool] = []
        self.generation = 0
        self.starts = 0
        self._session: ClientSession | None = None
        self._runner: asyncio.Task[None] | None = None
        self._done: anyio.Event | None = None
        self._stopping = False
        self._relist: anyio.Event | None = None
        self._start_lock: anyio.Lock | None = None
        # held while the tools are listed, so that a call's result can wait for a listing that
        # its own change notification started
        self._list_lock: anyio.Lock | None = None
        # set once the ping after an abandoned call is answered or the session retired: a call
        # waits for it rather than queue behind a server that may be wedged
        self._probe: anyio.Event | None = None
        # the probes, and the runners of retired sessions still stopping their server: stop()
        # waits for them, and holding them keeps them from being collected
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def alive(self) -> bool:
        """Whether a session is up and its server has not gone away."""
        return self._session is not None and self._done is not None and not self._done.is_set()

    async def ensure_started(self, timeout: float) -> ClientSession:
        """The live session, starting the server (again) when there is none.

        Args:
            timeout: seconds the start, ``initialize`` and the first listing may take.
        Raises:
            McpStartError: ``<name>: Failed to initialize MCP server: <why>`` or
                ``<name>: Timeout waiting for MCP server tool discovery (<N>s)``.
        """
        if self._start_lock is None:
            self._start_lock = anyio.Lock()
        if self._probe is not None:
            await self._probe.wait()
        async with self._start_lock:
            if self.alive:
                assert self._session is not None  # noqa: S101 - narrows the type (never checks input)
                return self._session
            await self._close()
            return await self._start(timeout)

    async def _start(self, timeout: float) -> ClientSession:
        ready: anyio.Event = anyio.Event()
        failure: list[BaseException] = []
        self._done = anyio.Event()
        self._stopping = False
        self._relist = anyio.Event()
        self.starts += 1
        log.info("mcp server starting", extra={"kind": "mcp.server_starting", **self.config.describe()})
        self._runner = asyncio.get_running_loop().create_task(self._serve(ready, failure))
        with anyio.move_on_after(timeout):
            await ready.wait()
        if ready.is_set() and not failure:
            assert self._session is not None  # noqa: S101 - narrows the type (never checks input)
            log.info(
                "mcp server started",
                extra={"kind": "mcp.server_started", **self.config.describe(), "tools": [t.name for t in self.tools]},
            )
            return self._session
        await self._close()
        name = self.config.name
        if failure and isinstance(_first(failure[0]), McpDiscoveryError):
            raise _first(failure[0])
        if failure:
            raise McpStartError(f"{name}: Failed to initialize MCP server: {_describe_error(failure[0])}")
        raise McpStartError(f"{name}: Timeout waiting for MCP server tool discovery ({timeout:g}s)")

    async def _serve(self, ready: anyio.Event, failure: list[BaseException]) -> None:
        """Own the transport and the session until :meth:`_close`, or until the server goes away."""
        assert self._done is not None  # noqa: S101 - narrows the type (never checks input)
        done = self._done
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.config))
                relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
                tasks = await stack.enter_async_context(anyio.create_task_group())
                tasks.start_soon(self._relay, read, relay_in, done)
                session = await stack.enter_async_context(
                    ClientSession(relay_out, write, message_handler=self._on_message, client_info=CLIENT_INFO)
                )
                initialized = await session.initialize()
                await self._list_tools(session)
                self._session = session
                ready.set()
                listens = bool(initialized.capabilities.tools and initialized.capabilities.tools.list_changed)
                tasks.start_soon(self._relist_loop, session, listens)
                await done.wait()
                tasks.cancel_scope.cancel()
        except Exception as error:
            failure.append(error)
        finally:
            # a retired session's runner ends after the next session started: leave that one be
            current = self._done is done
            was_up = current and self._session is not None
            if current:
                self._session = None
            done.set()
            ready.set()
        if was_up and not self._stopping:
            detail = {"error": _describe_error(failure[0])} if failure else {}
            log.warning("mcp server gone", extra={"kind": "mcp.server_gone", **self.config.describe(), **detail})

    async def _relay(
        self, source: Any, sink: MemoryObjectSendStream[Any], done: anyio.Event
    ) -> None:
        """Pass the transport's messages to the session; their end means the server went away."""
        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            done.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._relist is not None:
            self._relist.set()

    async def _relist_loop(self, session: ClientSession, listens: bool) -> None:
        while True:
            assert self._relist is not None  # noqa: S101 - narrows the type (never checks input)
            with anyio.move_on_after(None if listens else POLL_SECONDS):
                await self._relist.wait()
            self._relist = anyio.Event()
            try:
                await self._list_tools(session)
            except (MCPError, McpDiscoveryError) as error:
                self._list_failed(error)

    def _list_failed(self, error: Exception) -> None:
        """Log a listing after the first that failed; the tools as last listed stay."""
        log.warning(
            "mcp tools not listed",
            extra={"kind": "mcp.list_failed", **self.config.describe(), "error": _describe_error(error)},
        )

    async def _list_tools(self, session: ClientSession) -> None:
        if self._list_lock is None:
            self._list_lock = anyio.Lock()
        async with self._list_lock:
            await self._list_tools_now(session)

    async def _list_tools_now(self, session: ClientSession) -> None:
        """List every page of the server's tools and keep them when they changed.

        Raises:
            McpDiscoveryError: a cursor answered twice, or more than :data:`MAX_LIST_PAGES` pages;
                the tools as last listed stay.
            MCPError: the server refused a page.
        """
        tools: list[types.Tool] = []
        cursor: str | None = None
        cursors: set[str] = set()
        name = self.config.name
        for pages in range(1, MAX_LIST_PAGES + 1):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
            if cursor in cursors:
                shown = cursor if len(cursor) <= _CURSOR_SHOWN else cursor[:_CURSOR_SHOWN] + "..."
                raise McpDiscoveryError(
                    f"{name}: tool discovery stopped: tools/list answered the cursor {shown!r} again"
                    f" after {pages} pages (a cursor loop)"
                )
            cursors.add(cursor)
        else:
            raise McpDiscoveryError(f"{name}: tool discovery stopped: tools/list had more than {MAX_LIST_PAGES} pages")
        if [t.model_dump() for t in tools] != [t.model_dump() for t in self.tools] or not self.generation:
            self.tools = tools
            self.generation += 1
            if self.generation > 1:
                log.info(
                    "mcp tools changed",
                    extra={"kind": "mcp.tools_changed", **self.config.describe(), "tools": [t.name for t in tools]},
                )

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        progress: ProgressCallback | None,
        timeout: float,
        traceparent: str = "",
    ) -> types.CallToolResult:
        """Call tool ``name`` (its MCP name), starting the server first when needed.

        Args:
            name: the tool's name on the server.
            arguments: the model's arguments.
            progress: awaited with each ``notifications/progress`` of the call.
            timeout: seconds a (re)start may take.
            traceparent: the calling span's W3C ``traceparent``, sent as the request's
                ``_meta.traceparent`` (and, over HTTP, as the header); ``""`` sends none.
        Raises:
            McpStartError: the server could not be started.
            McpGone: it went away before answering.
            MCPError: it answered with a JSON-RPC error.
        """
        for attempt in (1, 2):
            session = await self.ensure_started(timeout)
            done = self._done
            try:
                # an extra key of _meta (PEP 728), which mypy does not read yet
                meta = cast(types.RequestParamsMeta, {"traceparent": traceparent}) if traceparent else None
                pending = asyncio.ensure_future(
                    session.call_tool(name, arguments, progress_callback=progress, meta=meta)
                )
                pending.add_done_callback(_retrieve)
                try:
                    # shielded, so that an abandoned call (timed out, cancelled) starts its probe
                    # at once, before a later call can reach the session
                    result = await asyncio.shield(pending)
                except asyncio.CancelledError:
                    self._abandoned(session, done)
                    pending.cancel()  # the SDK tells the server: notifications/cancelled
                    raise
                await self._take_in_changes(session)
                return result
            except MCPError as error:
                if attempt == 1 and _session_lost(error):
                    # an HTTP server that restarted forgot our session and ran nothing: a new one
                    self._mark_gone(done)
                    continue
                if _connection_closed(error) or not self.alive:
                    self._mark_gone(done)
                    raise McpGone(error.error.message) from error
                raise
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
                self._mark_gone(done)
                raise McpGone(_describe_error(error)) from error
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _take_in_changes(self, session: ClientSession) -> None:
        """List the tools now when the server announced a change during a call, so that the
        model's next request (which follows this result) offers the new list."""
        await anyio.sleep(0)  # let a list_changed notification that came with the result land
        with anyio.move_on_after(POLL_SECONDS):
            if self._relist is not None and self._relist.is_set():
                self._relist = anyio.Event()
                try:
                    await self._list_tools(session)
                except McpDiscoveryError as error:
                    self._list_failed(error)
            elif self._list_lock is not None and self._list_lock.locked():
                # the relisting task took the notification first: wait for its new list
                async with self._list_lock:
                    pass

    def _mark_gone(self, done: anyio.Event | None) -> None:
        """Consider the server of the session that ``done`` ends gone: the session ends, and the
        next call starts it again."""
        if done is not None:
            done.set()

    def _abandoned(self, session: ClientSession, done: anyio.Event | None) -> None:
        """A call on ``session`` was abandoned: ping the server in the background (one probe at a
        time), and calls wait for the verdict (:meth:`_probe_session`)."""
        if done is None or done.is_set() or (self._probe is not None and not self._probe.is_set()):
            return
        probe = self._probe = anyio.Event()
        task = asyncio.get_running_loop().create_task(self._probe_session(session, done, probe))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _probe_session(self, session: ClientSession, done: anyio.Event, probe: anyio.Event) -> None:
        """Keep the session when the server answers a ping (even with an error) within
        :data:`CANCEL_GRACE_SECONDS`; else retire it, so that no call queues behind it."""
        try:
            # a task of its own: an unanswered ping's courtesy cancel (which the SDK writes
            # shielded, for up to 5 s on a wedged HTTP session) must not delay the verdict
            ping = asyncio.ensure_future(session.send_ping())
            ping.add_done_callback(_retrieve)
            self._background.add(ping)
            ping.add_done_callback(self._background.discard)
            await asyncio.wait([ping], timeout=CANCEL_GRACE_SECONDS)
            answered = _answered(ping)
            ping.cancel()
            if not answered and not done.is_set():
                log.warning(
                    "mcp server unresponsive",
                    extra={
                        "kind": "mcp.server_unresponsive",
                        **self.config.describe(),
                        "grace_seconds": CANCEL_GRACE_SECONDS,
                    },
                )
                self._retire(done)
        finally:
            probe.set()

    def _retire(self, done: anyio.Event) -> None:
        """End the session of ``done`` without waiting for its server to stop: its runner stops it
        in the background, and the next call starts a new one at once."""
        if self._done is not done or self._runner is None:
            done.set()
            return
        runner, self._runner = self._runner, None
        self._session = None
        self._background.add(runner)
        runner.add_done_callback(self._background.discard)
        done.set()

    async def stop(self) -> None:
        """Stop the session and its server (a stdio server: stdin closed, then its process group
        killed), and wait for retired sessions to have stopped theirs (:data:`STOP_SECONDS` at most)."""
        if self._start_lock is None:
            self._start_lock = anyio.Lock()
        async with self._start_lock:
            await self._close()
            retired = list(self._background)
            if retired:
                with anyio.CancelScope(shield=True):
                    await asyncio.wait(retired, timeout=STOP_SECONDS)

    async def _close(self) -> None:
        """End the runner task: let it leave its transport (which stops the server), or cancel it
        when it is still starting or does not finish within :data:`STOP_SECONDS`."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping = True
        if self._done is not None:
            self._done.set()
        if self._session is None:
            runner.cancel()
        with anyio.CancelScope(shield=True):
            done, _ = await asyncio.wait([runner], timeout=STOP_SECONDS)
            if not done:
                runner.cancel()
                await asyncio.wait([runner])


def _session_lost(error: MCPError) -> bool:
    """Whether a streamable HTTP server answered that it does not know our session (HTTP 404)."""
    return error.error.code == types.INVALID_REQUEST and error.error.message in _SESSION_LOST


#: How the SDK's own "connection closed" errors begin (the stdio session's, and the streamable
#: HTTP transport's when a response stream ends or fails without an answer).
_SDK_CLOSED_MESSAGES = ("Connection closed", "SSE stream ")


def _connection_closed(error: MCPError) -> bool:
    """Whether the SDK itself reports the connection gone. Its code, -32000, is also the first of
    the codes JSON-RPC leaves to servers, which answer it for their own errors (a live server
    refusing a call); only the SDK's own messages tell the two apart."""
    return error.error.code == types.CONNECTION_CLOSED and error.error.message.startswith(_SDK_CLOSED_MESSAGES)


def _answered(ping: asyncio.Future[Any]) -> bool:
    """Whether a ping got an answer: a result or a server's error, not the SDK's "connection
    closed", a transport failure or nothing yet."""
    if not ping.done() or ping.cancelled():
        return False
    error = ping.exception()
    if error is None:
        return True
    return isinstance(error, MCPError) and not _connection_closed(error)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Take a call's outcome, so that an abandoned call's (awaited by no one) is not reported as
    never retrieved."""
    if not task.cancelled():
        task.exception()


def _first(error: BaseException) -> BaseException:
    """The first error of a group (of a group...), or ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe_error(error: BaseException) -> str:
    """A one-line account of an error, the first of a group's."""
    error = _first(error)
    if isinstance(error, MCPError):
        return redact_urls(f"{error.error.message} (code {error.error.code})")
    # an HTTP transport's error quotes the server's URL, credentials included
    text = redact_urls(str(error))
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
