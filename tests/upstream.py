"""A real HTTP service for the HTTP toolbox tests: it serves documents, answers the petstore's
operations and records every request it receives (method, target, headers, body)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The body of the petstore's 404, compared byte for byte with what the model reads.
NOT_FOUND_BODY = '{"code": 404, "message": "no pet with id 7 here"}'


@dataclass
class Recorded:
    """One request as the service received it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class Upstream:
    """The service, on a free port of 127.0.0.1, in a thread of the test process.

    Args:
        documents: path -> JSON document answered to ``GET <path>``.
        redirects: path -> the ``Location`` of a ``302 Found`` answered to any request of it.
    """

    def __init__(self, documents: dict[str, Any], redirects: dict[str, str] | None = None) -> None:
        self.documents = documents
        self.redirects = redirects or {}
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with upstream._lock:
                    upstream.requests.append(
                        Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                location = upstream.redirects.get(self.path.split("?", 1)[0])
                if location is not None:
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status, payload = upstream.route(self.command, self.path, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def route(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        """The answer to a request: documents, the petstore, and an echo of anything else."""
        path = target.split("?", 1)[0]
        if method == "GET" and path in self.documents:
            return 200, self.documents[path]
        if method == "GET" and path.endswith(".json"):
            return 404, b"no such document"
        if path == "/pets/42" and method == "GET":
            return 200, {"id": 42, "name": "Rex", "tag": "dog"}
        if path.startswith("/pets/") and method == "GET":
            return 404, NOT_FOUND_BODY.encode()
        if path.startswith("/pets/") and method == "DELETE":
            return 204, b""
        if path == "/pets" and method == "POST":
            return 201, json.loads(body or b"{}")
        if path == "/pets":
            return 200, [{"id": 42, "name": "Rex"}]
        return 200, [json.loads(body)] if body else []

    def seen(self, method: str | None = None) -> list[Recorded]:
        """The requests received so far, documents excluded, oldest first."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.target.split("?", 1)[0] not in self.documents and (method is None or r.method == method)
            ]

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
