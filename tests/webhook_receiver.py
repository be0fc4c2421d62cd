"""A real HTTP receiver of webhooks for the tests: it checks every request's Standard Webhooks
signature with the ``standardwebhooks`` library, and answers as scripted (a status, after a delay,
or a redirect)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass
class Received:
    """One request: when it came (monotonic seconds), its path, headers and body, and whether its
    signature verified against the receiver's secret."""

    at: float
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    checked: Any = None

    @property
    def payload(self) -> Any:
        """The JSON body."""
        return json.loads(self.body)


@dataclass
class Receiver:
    """The receiver's state: set ``secret`` before deliveries come; ``answers`` are
    ``(status, delay_seconds, extra_headers)`` used first to last (then ``default``); ``check``,
    when set, is called with each request as it arrives and its answer kept in ``checked``."""

    url: str = ""
    secret: str | None = None
    answers: list[tuple[int, float, dict[str, str]]] = field(default_factory=list)
    default: tuple[int, float, dict[str, str]] = (200, 0.0, {})
    check: Callable[[Received], Any] | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kinds(self) -> list[str]:
        """The ``type`` of every request received, in arrival order."""
        with self.lock:
            return [item.payload["type"] for item in self.received]

    def processed(self) -> dict[str, Received]:
        """The verified requests, deduplicated by ``webhook-id`` as a receiver should."""
        with self.lock:
            return {item.headers["webhook-id"]: item for item in self.received if item.verified}


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    """Start a receiver on a free loopback port; stopped on exit."""
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the standard library's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            verified = False
            if state.secret is not None:
                try:
                    Webhook(state.secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    verified = False
            item = Received(time.monotonic(), self.path, headers, body, verified)
            if state.check is not None:
                item.checked = state.check(item)
            with state.lock:
                state.received.append(item)
                status, delay, extra = state.answers.pop(0) if state.answers else state.default
            time.sleep(delay)
            try:
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
