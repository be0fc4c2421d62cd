"""The HTTP server (daphne) with a graceful shutdown (docs/api.md §14.2), limits on request
heads (docs/api.md §1.5: ``foundation.http_limits``) and an optional Unix socket (``--socket``).

On SIGTERM or SIGINT: stop listening, end the event streams and answer ``wait=true`` requests
with the current state, give the other requests up to ``--shutdown-grace`` seconds, then exit 0.
An address it cannot listen on (taken, say) ends it with status 2.
Runs of the embedded worker hand their session back after their current step, and the MCP
servers this process started are stopped.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import sys
import time
from typing import Any

log = logging.getLogger("agentsite.server")

#: Connections the kernel keeps waiting to be accepted (Twisted's default is 50).
LISTEN_BACKLOG = 1024


class SocketPathInUse(Exception):
    """``--socket PATH`` names a file that is not a stale socket: a live server's, or not a socket."""


def clear_socket_path(path: str) -> None:
    """Make room for the Unix socket ``path`` (docs/api.md §14.1): a stale socket is removed.

    Raises:
        SocketPathInUse: a server answers on it, or the file there is not a socket (it is left
            alone: a typo must not delete a user's file).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketPathInUse(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            # nobody answers: the socket of a server that was killed
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        except OSError as error:
            raise SocketPathInUse(f"{path}: {error.strerror}") from None
    raise SocketPathInUse(f"{path}: another server is listening on it")


def serve(bind: str, port: int, grace: float, unix_socket: str | None = None) -> None:
    """Serve ``agentsite.asgi:application`` on ``bind:port`` (and on the Unix socket ``unix_socket``,
    mode 0600, unlinked when it closes) until a signal, then drain and exit."""
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server  # installs the asyncio reactor before twisted's is imported
    from django.conf import settings
    from twisted.internet import reactor
    from twisted.internet.endpoints import quoteStringArgument
    from twisted.internet.interfaces import IReactorThreads

    from agentsite.asgi import application
    from foundation.http_limits import install
    from sessions_app import hub

    install(settings.AGENTS["HEADER_TIMEOUT"], settings.AGENTS["BODY_TIMEOUT"])

    class GracefulServer(Server):
        """A daphne server that remembers its listening ports, to close them on shutdown."""

        ports: list[Any] = []
        listen_failures: list[str] = []

        def listen_success(self, listening_port: Any) -> None:
            self.ports.append(listening_port)
            super().listen_success(listening_port)
            # the bound address, not the asked one: with ``--port 0`` this line is how a
            # supervisor (or the test harness) learns the port the kernel chose
            address = listening_port.getHost()
            where = (
                {"bind": address.host, "port": address.port}
                if hasattr(address, "port")
                else {"socket": str(getattr(address, "name", ""))}
            )
            log.info("server listening", extra={"kind": "server.listening", **where})

        def listen_error(self, failure: Any) -> None:
            # daphne logs it and stops with status 0: a supervisor would take that for a clean stop
            self.listen_failures.append(failure.getErrorMessage())
            self.stop()

    # a deep accept queue: a burst of connections waits to be accepted rather than being retried
    endpoints = [f"{endpoint}:backlog={LISTEN_BACKLOG}" for endpoint in build_endpoint_description_strings(bind, port)]
    if unix_socket:
        # Twisted's lock file is not used: clear_socket_path has dealt with a stale socket
        endpoints.append(f"unix:{quoteStringArgument(unix_socket)}:mode=600:lockfile=0:backlog={LISTEN_BACKLOG}")
    server = GracefulServer(
        application,
        endpoints=endpoints,
        signal_handlers=False,
        verbosity=0,
        application_close_timeout=grace,
    )
    state = {"stopping": False}

    def begin_shutdown() -> None:
        if state["stopping"]:
            return
        state["stopping"] = True
        log.info("server stopping", extra={"kind": "server.stopping", "grace_seconds": grace})
        for listening_port in server.ports:
            listening_port.stopListening()
        hub.begin_shutdown()
        deadline = time.monotonic() + grace

        def drain() -> None:
            busy = [
                d
                for d in server.connections.values()
                if d.get("application_instance") is not None and not d["application_instance"].done()
            ]
            if not busy or time.monotonic() >= deadline:
                log.info("server stopped", extra={"kind": "server.stopped", "unfinished_requests": len(busy)})
                reactor.stop()
            else:
                reactor.callLater(0.05, drain)

        reactor.callLater(0.05, drain)

    def on_signal(signum: int, frame: Any) -> None:
        # the reactor itself: Twisted's types declare the threads interface apart
        IReactorThreads(reactor).callFromThread(begin_shutdown)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.run()
    # os._exit skips the atexit hooks: stop the MCP servers this process started first, and leave
    # the fleet that keeps the held values readable (sessions_app/secrets.py).
    from sessions_app.secrets import leave_fleet
    from tools_app.mcp.manager import shutdown as stop_mcp_servers

    stop_mcp_servers()
    leave_fleet()
    status = 0
    if server.listen_failures:
        status = 2
        log.error("cannot listen", extra={"kind": "server.listen_failed", "errors": server.listen_failures})
        print(f"agents serve: cannot listen on {bind}:{port}: {server.listen_failures[0]}", file=sys.stderr)
    # Threads still busy (an embedded run waiting on its LLM, say) would hold the interpreter
    # past the grace period: leave now. Their sessions are recovered when a server starts again.
    logging.shutdown()
    os._exit(status)
