"""The HTTP server (daphne) with a graceful shutdown (docs/api.md §14.2), and limits on request
heads (docs/api.md §1.5: ``agentsite.http_limits``).

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
import sys
import time
from typing import Any

log = logging.getLogger("agentsite.server")

#: Connections the kernel keeps waiting to be accepted (Twisted's default is 50).
LISTEN_BACKLOG = 1024


def serve(bind: str, port: int, grace: float) -> None:
    """Serve ``agentsite.asgi:application`` on ``bind:port`` until a signal, then drain and exit."""
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server  # installs the asyncio reactor before twisted's is imported
    from django.conf import settings
    from twisted.internet import reactor

    from agentsite.asgi import application
    from agentsite.http_limits import install
    from sessions_app import hub

    install(settings.AGENTS["HEADER_TIMEOUT"])

    class GracefulServer(Server):
        """A daphne server that remembers its listening ports, to close them on shutdown."""

        ports: list[Any] = []
        listen_failures: list[str] = []

        def listen_success(self, listening_port: Any) -> None:
            self.ports.append(listening_port)
            super().listen_success(listening_port)

        def listen_error(self, failure: Any) -> None:
            # daphne logs it and stops with status 0: a supervisor would take that for a clean stop
            self.listen_failures.append(failure.getErrorMessage())
            self.stop()

    # a deep accept queue: a burst of connections waits to be accepted rather than being retried
    endpoints = [f"{endpoint}:backlog={LISTEN_BACKLOG}" for endpoint in build_endpoint_description_strings(bind, port)]
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
        reactor.callFromThread(begin_shutdown)

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
