"""The mock-llm HTTP server: records requests, picks a rule and sends its answer."""

from __future__ import annotations

import itertools
import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devtools.mockllm.answers import DEFAULT_MODEL, NO_MATCH_CONTENT, Answer, error_body
from devtools.mockllm.matching import matches
from devtools.mockllm.script import validate_script


class MockLlmServer:
    """A scripted chat-completions server on a real socket, served from a daemon thread.

    Attributes:
        url: the base URL to use as an agent's ``modelUrl``, e.g. ``http://127.0.0.1:PORT/v1``.
        requests: every chat-completions request body received, oldest first.
        request_headers: the headers of those requests (lower-cased names), in the same order;
            tests use it to check the ``Authorization`` header.

    Usage::

        server = MockLlmServer({"rules": [{"reply": {"content": "hi"}}]}).start()
        ...
        server.stop()

    It is also a context manager (``with MockLlmServer(script) as server:``), started on entry.

    Raises:
        ValueError: from the constructor, when ``script`` is not valid (see :func:`validate_script`).
        OSError: from the constructor, when the address cannot be bound.
    """

    def __init__(self, script: dict[str, Any], host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> None:
        self.script = validate_script(script)
        self.verbose = verbose
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._request_headers: list[dict[str, str]] = []
        self._uses: dict[int, int] = {}
        self._cancelled: list[int] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._httpd = _HttpServer((host, port), _Handler, self)
        # the socket's own name: server_address is typed for every address family, not AF_INET's pair
        bound_host, bound_port = self._httpd.socket.getsockname()[:2]
        # A wildcard address is not something a client can connect to; name the loopback instead.
        shown_host = "127.0.0.1" if bound_host in ("0.0.0.0", "") else bound_host  # noqa: S104 - recognises the wildcard addresses; binds nothing
        self.host = shown_host
        self.port = int(bound_port)
        self.url = f"http://{shown_host}:{self.port}/v1"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> MockLlmServer:
        """Serve in a daemon thread; returns ``self`` so that ``MockLlmServer(s).start()`` chains."""
        if self._thread is None:
            # A short poll interval makes stop() quick (shutdown waits for the loop to poll).
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"mock-llm:{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Requests waiting on a ``delay`` are cut short."""
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> MockLlmServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- recorded state -----------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of the recorded chat-completions request bodies, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def cancelled(self) -> list[int]:
        """The requests (numbered from 1, as received) whose client hung up during their ``delay``."""
        with self._lock:
            return list(self._cancelled)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """A copy of the recorded request headers (lower-cased names), parallel to :attr:`requests`."""
        with self._lock:
            return [dict(h) for h in self._request_headers]

    def reset(self) -> None:
        """Forget the recorded requests and the ``times`` counters (``POST /_mock/reset``)."""
        with self._lock:
            self._requests.clear()
            self._request_headers.clear()
            self._uses.clear()
            self._cancelled.clear()

    # -- answering ------------------------------------------------------------------------------

    def _record_and_choose(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int | None, Answer, dict[str, Any]]:
        """Record a request and pick its rule; returns (rule number or None, resolved answer, reply)."""
        # One lock around record, match and count, so that `times` holds under concurrency.
        with self._lock:
            self._requests.append(body)
            self._request_headers.append(headers)
            number_of_request = len(self._requests)
            for number, rule in enumerate(self.script["rules"]):
                if not matches(rule.get("when", {}), body):
                    continue
                if "times" in rule and self._uses.get(number, 0) >= rule["times"]:
                    continue
                self._uses[number] = self._uses.get(number, 0) + 1
                reply = rule["reply"]
                return number, Answer(reply, body, self._ids, number_of_request), reply
            fallback = {"content": NO_MATCH_CONTENT}
            return None, Answer(fallback, body, self._ids, number_of_request), fallback

    def _models(self) -> list[str]:
        names = {DEFAULT_MODEL}
        for rule in self.script["rules"]:
            model = rule.get("when", {}).get("model")
            if model:
                names.add(model)
        return sorted(names)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    # Do not wait for handler threads on close: a scripted `delay` must not hold up stop().
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], mock: MockLlmServer) -> None:
        self.mock = mock
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    server_version = "mock-llm/1"

    # -- plumbing -------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.mock.verbose:
            sys.stderr.write(f"mock-llm: {format % args}\n")

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    # -- verbs ----------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        route = self._route()
        mock = self.server.mock
        if route in ("/v1/models", "/models"):
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "mock-llm"} for name in mock._models()]
            self._send_json(200, {"object": "list", "data": data})
        elif route == "/_mock/requests":
            self._send_json(200, mock.requests)
        elif route == "/_mock/cancelled":
            self._send_json(200, mock.cancelled)
        else:
            self._send_json(404, error_body(404, f"no route GET {route}"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        route = self._route()
        raw = self._read_body()
        if route == "/_mock/reset":
            self.server.mock.reset()
            self._send_json(200, {"ok": True})
        elif route in ("/v1/chat/completions", "/chat/completions"):
            self._chat(raw)
        else:
            self._send_json(404, error_body(404, f"no route POST {route}"))

    def _chat(self, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self._send_json(400, error_body(400, "request body must be a JSON object"))
            return
        mock = self.server.mock
        headers = {name.lower(): value for name, value in self.headers.items()}
        number, answer, reply = mock._record_and_choose(body, headers)
        if mock.verbose:
            sys.stderr.write(
                f"mock-llm: request {len(mock.requests)} answered by "
                f"{'no rule' if number is None else f'rule {number}'}\n"
            )
        if reply.get("delay") and not self._wait_delay(float(reply["delay"]), answer.completion_number):
            return
        streaming = body.get("stream") is True
        try:
            if "status" in reply:
                message = reply.get("error", f"mock-llm scripted HTTP {reply['status']}")
                self._send_json(int(reply["status"]), error_body(int(reply["status"]), message))
            elif "stream_error" in reply and not streaming:
                self._send_json(500, error_body(500, reply["stream_error"]))
            elif reply.get("malformed"):
                self._malformed(streaming)
            elif "cut" in reply and not streaming:
                self._cut_body(answer)
            elif streaming:
                options = body.get("stream_options")
                include_usage = isinstance(options, dict) and options.get("include_usage") is True
                if "cut" in reply:
                    self._cut_stream(answer, include_usage, reply["cut"], reply.get("cut_half_event") is True)
                else:
                    self._stream(answer, include_usage, reply.get("stream_error"))
            else:
                self._send_json(200, answer.completion())
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout); there is no one left to answer.
            pass

    def _wait_delay(self, seconds: float, request_number: int) -> bool:
        """Wait out a scripted ``delay`` of request ``request_number``; ``False`` when the server
        stops or the client hangs up first (recorded in :attr:`MockLlmServer.cancelled` by its own
        number: a later request may have come in meanwhile), and nobody is left to answer."""
        mock = self.server.mock
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            # Waiting on the stop event (not time.sleep) lets stop() end a long delay at once.
            if mock._stopping.wait(min(left, 0.05)):
                return False
            if self._client_hung_up():
                with mock._lock:
                    mock._cancelled.append(request_number)
                return False
        return True

    def _client_hung_up(self) -> bool:
        """Whether the client closed its connection: readable with nothing left to read."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _malformed(self, streaming: bool) -> None:
        if streaming:
            data = b"data: {this is not json\n\n"
            content_type = "text/event-stream"
        else:
            data = b"<html>this is not a chat completion</html>"
            content_type = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, answer: Answer, include_usage: bool, stream_error: str | None) -> None:
        # HTTP/1.0 (the handler's default): no Content-Length, the body ends when we close.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in answer.content_chunks():
            self._event(chunk)
        if stream_error is not None:
            self._event(error_body(500, stream_error))
            return
        for chunk in answer.closing_chunks(include_usage):
            self._event(chunk)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _cut_stream(self, answer: Answer, include_usage: bool, cut: str, half_event: bool) -> None:
        """Send the stream up to ``cut``, then half of the next event's line if asked, and close:
        no ``finish_reason`` and no ``[DONE]`` (a provider whose connection broke)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        whole, following = answer.cut_stream(cut, include_usage)
        for chunk in whole:
            self._event(chunk)
        if half_event and following is not None:
            line = b"data: " + json.dumps(following).encode("utf-8")
            self.wfile.write(line[: len(line) // 2])
            self.wfile.flush()
        self.close_connection = True

    def _cut_body(self, answer: Answer) -> None:
        """Announce the whole completion's length, send its first half and close."""
        data = json.dumps(answer.completion()).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")
        # Flush every chunk so that clients see the pieces arrive one by one.
        self.wfile.flush()
