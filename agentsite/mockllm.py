"""mock-llm: a scripted, OpenAI-compatible chat-completions server.

It lets the demo run without an API key (``agents mock-llm --script FILE --port P``) and gives the
test suite a real HTTP endpoint to talk to. It speaks just enough of the OpenAI chat-completions
API for the agents server (spec/agent-files.md §2): plain and streamed answers, tool calls,
reasoning text, usage, and error answers. Point an agent at it with
``"modelUrl": "http://127.0.0.1:PORT/v1"``; any ``modelName`` and any API key (or none) work.

Endpoints
---------
- ``POST /v1/chat/completions`` (``/chat/completions`` too): answer from the script.
- ``GET /v1/models``: the model names the script mentions, plus ``mock-model``.
- ``GET /_mock/requests``: a JSON list of every chat-completions request body received so far.
- ``POST /_mock/reset``: forget the recorded requests and the ``times`` counters.

Script format
-------------
A JSON object with a list of rules::

    {"rules": [
      {"when": {"last_role": "user", "last_contains": "Paris"},
       "reply": {"content": "Let me check.", "reasoning": "optional thinking",
                 "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
      {"when": {"last_role": "tool"}, "reply": {"content": "Here is what I found: {last_content}"}},
      {"when": {"any_contains": "crash"}, "reply": {"status": 500, "error": "scripted failure"}},
      {"when": {"last_contains": "slow"}, "reply": {"delay": 2.5, "content": "done"}},
      {"when": {"last_contains": "garbage"}, "reply": {"malformed": true}},
      {"reply": {"content": "default answer"}}
    ]}

For each request the rules are tried in order and the first one that matches answers, so the
same conversation always gets the same answer, however many sessions run at once. When no rule
matches, the answer is the text ``(mock-llm: no rule matched)``.

A rule is ``{"when": {...}, "reply": {...}, "times": N}``; only ``reply`` is required.

``when`` (every condition given must hold; a missing ``when`` matches everything):

- ``last_role``: the role of the last message (``"user"``, ``"tool"``, ``"assistant"``, ``"system"``).
- ``last_contains``: a substring of the last message's text. The text of a message is its string
  ``content``, or the ``text`` parts of a list ``content`` joined with newlines.
- ``any_contains``: a substring of the text of any message, the system prompt included.
- ``model``: the request's ``model`` equals this.
- ``has_tool``: a tool with this name is offered in the request's ``tools``.
- ``tool_results``: an integer; the number of ``tool`` messages after the last ``user`` message
  (after the start of the conversation when there is no user message) equals it.

``times`` (a positive integer): the rule answers at most that many requests, then it is skipped.
The counters belong to one server and are cleared by ``POST /_mock/reset``.

``reply``:

- ``content``: the answer text. ``{last_content}`` in it is replaced by the last message's text.
- ``reasoning``: thinking text, sent as ``message.reasoning_content`` (as Moonshot/Kimi do).
- ``tool_calls``: a list of ``{"name": ..., "arguments": <object or JSON string>, "id": ...}``;
  ``id`` defaults to a server-unique ``call_<n>``. The ``finish_reason`` is ``"tool_calls"`` when
  there are tool calls, ``"stop"`` otherwise.
- ``status`` and ``error``: answer with this HTTP status (400-599) and an OpenAI-style error body
  ``{"error": {"message": error, "type": ..., "code": status}}``.
- ``delay``: seconds to wait before answering (to exercise timeouts and concurrency).
- ``malformed``: ``true`` answers 200 with a body that is not JSON (a stream of non-JSON events
  when the request asked for streaming).
- ``stream_error``: when streaming, send the content, then this message as an ``{"error": ...}``
  event instead of finishing; without streaming, answer HTTP 500 with it.

Every successful answer carries a ``usage`` object with rough token counts (about four characters
per token).

Streaming
---------
When the request has ``"stream": true`` the answer is ``text/event-stream`` in the OpenAI chunk
format: a first chunk with the role, the reasoning as ``delta.reasoning_content`` pieces, the
content in word-sized pieces (they concatenate back to the exact text), each tool call by
``index`` with its id and name in the first fragment and its ``arguments`` in two or more
fragments, a chunk with the ``finish_reason``, a usage chunk (``"choices": []``) only when the
request has ``stream_options.include_usage: true``, and ``data: [DONE]``.

This module uses the standard library only, so the CLI can run it without Django.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

NO_MATCH_CONTENT = "(mock-llm: no rule matched)"
DEFAULT_MODEL = "mock-model"

_WHEN_KEYS: dict[str, tuple[type, ...]] = {
    "last_role": (str,),
    "last_contains": (str,),
    "any_contains": (str,),
    "model": (str,),
    "has_tool": (str,),
    "tool_results": (int,),
}
_REPLY_KEYS = {"content", "reasoning", "tool_calls", "status", "error", "delay", "malformed", "stream_error"}
_RULE_KEYS = {"when", "reply", "times"}
_TOOL_CALL_KEYS = {"name", "arguments", "id"}


# --------------------------------------------------------------------------------------------
# Script validation


def validate_script(script: Any) -> dict[str, Any]:
    """Check a decoded script and return it unchanged.

    Unknown keys are refused rather than ignored: a misspelt matcher would otherwise match every
    request and make a demo or a test silently wrong.

    Raises:
        ValueError: naming the rule (counted from 0) and the key at fault.
    """
    if not isinstance(script, dict):
        raise ValueError('a mock-llm script must be a JSON object {"rules": [...]}')
    extra = set(script) - {"rules"}
    if extra:
        raise ValueError(f"unknown top-level key(s) in mock-llm script: {', '.join(sorted(extra))}")
    rules = script.get("rules")
    if not isinstance(rules, list):
        raise ValueError('a mock-llm script needs "rules": a list of rules')
    for number, rule in enumerate(rules):
        _validate_rule(number, rule)
    return script


def _validate_rule(number: int, rule: Any) -> None:
    where = f"rule {number}"
    if not isinstance(rule, dict):
        raise ValueError(f"{where}: a rule must be an object with 'reply' (and optionally 'when', 'times')")
    extra = set(rule) - _RULE_KEYS
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; expected when, reply, times")
    when = rule.get("when", {})
    if not isinstance(when, dict):
        raise ValueError(f"{where}: 'when' must be an object")
    for key, value in when.items():
        if key not in _WHEN_KEYS:
            raise ValueError(f"{where}: unknown matcher when.{key}; known: {', '.join(sorted(_WHEN_KEYS))}")
        # bool is an int subclass, so refuse it explicitly for tool_results.
        if not isinstance(value, _WHEN_KEYS[key]) or isinstance(value, bool):
            kind = "an integer" if key == "tool_results" else "a string"
            raise ValueError(f"{where}: when.{key} must be {kind}")
    if "times" in rule:
        times = rule["times"]
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise ValueError(f"{where}: 'times' must be a positive integer")
    if "reply" not in rule:
        raise ValueError(f"{where}: missing 'reply'")
    _validate_reply(where, rule["reply"])


def _validate_reply(where: str, reply: Any) -> None:
    if not isinstance(reply, dict):
        raise ValueError(f"{where}: 'reply' must be an object")
    extra = set(reply) - _REPLY_KEYS
    if extra:
        raise ValueError(f"{where}: unknown reply key(s) {', '.join(sorted(extra))}")
    for key in ("content", "reasoning", "error", "stream_error"):
        if key in reply and not isinstance(reply[key], str):
            raise ValueError(f"{where}: reply.{key} must be a string")
    if "status" in reply:
        status = reply["status"]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise ValueError(f"{where}: reply.status must be an HTTP error status (400-599)")
    if "delay" in reply:
        delay = reply["delay"]
        if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
            raise ValueError(f"{where}: reply.delay must be a number of seconds >= 0")
    if "malformed" in reply and not isinstance(reply["malformed"], bool):
        raise ValueError(f"{where}: reply.malformed must be true or false")
    calls = reply.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ValueError(f"{where}: reply.tool_calls must be a list")
    for position, call in enumerate(calls):
        at = f"{where}: reply.tool_calls[{position}]"
        if not isinstance(call, dict):
            raise ValueError(f"{at} must be an object with 'name' and 'arguments'")
        extra = set(call) - _TOOL_CALL_KEYS
        if extra:
            raise ValueError(f"{at}: unknown key(s) {', '.join(sorted(extra))}")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise ValueError(f"{at}: 'name' must be a non-empty string")
        if not isinstance(call.get("arguments", {}), dict | str):
            raise ValueError(f"{at}: 'arguments' must be an object or a JSON string")
        if "id" in call and not isinstance(call["id"], str):
            raise ValueError(f"{at}: 'id' must be a string")


def load_script(path: str | Path) -> dict[str, Any]:
    """Read and validate a script file (the format is in this module's docstring).

    Raises:
        ValueError: the file cannot be read, is not JSON, or is not a valid script; the message
            names the file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"cannot read mock-llm script {path}: {err.strerror or err}") from err
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"mock-llm script {path} is not valid JSON: {err}") from err
    try:
        return validate_script(document)
    except ValueError as err:
        raise ValueError(f"mock-llm script {path}: {err}") from err


# --------------------------------------------------------------------------------------------
# Matching


def message_text(message: Any) -> str:
    """The text of a chat message: string content, or the text parts of list content."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _tool_results_since_last_user(messages: list[Any]) -> int:
    count = 0
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            break
        if role == "tool":
            count += 1
    return count


def _offered_tool_names(body: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.add(function["name"])
    return names


def _matches(when: dict[str, Any], body: dict[str, Any]) -> bool:
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    last = messages[-1] if messages else {}
    last_role = last.get("role") if isinstance(last, dict) else None
    if "last_role" in when and last_role != when["last_role"]:
        return False
    if "last_contains" in when and when["last_contains"] not in message_text(last):
        return False
    if "any_contains" in when and not any(when["any_contains"] in message_text(m) for m in messages):
        return False
    if "model" in when and body.get("model") != when["model"]:
        return False
    if "has_tool" in when and when["has_tool"] not in _offered_tool_names(body):
        return False
    if "tool_results" in when and _tool_results_since_last_user(messages) != when["tool_results"]:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Answers


def _split_words(text: str) -> list[str]:
    """Word-sized pieces of ``text`` that concatenate back to it exactly (spaces kept)."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def _split_fragments(text: str) -> list[str]:
    """Two or three fragments of a tool call's arguments (one only when shorter than 2 characters)."""
    if len(text) < 2:
        return [text]
    size = -(-len(text) // (3 if len(text) >= 6 else 2))  # ceiling division
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(chars: int) -> int:
    """A plausible token count for ``chars`` characters (about four per token)."""
    return max(1, chars // 4)


class _Answer:
    """A reply resolved for one request: texts substituted, tool call ids assigned."""

    def __init__(
        self, reply: dict[str, Any], body: dict[str, Any], next_call_id: Iterator[int], completion_number: int
    ) -> None:
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        last_text = message_text(messages[-1]) if messages else ""
        self.tool_calls: list[dict[str, Any]] = []
        for call in reply.get("tool_calls", []):
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            self.tool_calls.append(
                {
                    "id": call.get("id") or f"call_{next(next_call_id)}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments},
                }
            )
        content = reply.get("content")
        if content is not None:
            # str.replace, not str.format: scripted answers may well contain other braces (JSON).
            content = content.replace("{last_content}", last_text)
        elif not self.tool_calls:
            content = ""
        # OpenAI sends content null next to tool calls when there is no text; so do we.
        self.content: str | None = content
        self.reasoning: str | None = reply.get("reasoning")
        self.finish_reason = "tool_calls" if self.tool_calls else "stop"
        self.model = body.get("model") if isinstance(body.get("model"), str) else DEFAULT_MODEL
        self.id = f"chatcmpl-mock-{completion_number}"
        self.created = int(time.time())
        prompt_chars = sum(len(message_text(m)) for m in messages)
        completion_text = (self.content or "") + (self.reasoning or "")
        for call in self.tool_calls:
            completion_text += call["function"]["name"] + call["function"]["arguments"]
        prompt_tokens = _estimate_tokens(prompt_chars)
        completion_tokens = _estimate_tokens(len(completion_text))
        self.usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def completion(self) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def content_chunks(self) -> list[dict[str, Any]]:
        """The stream up to and including the content pieces (role, reasoning, content)."""
        chunks = [self._chunk({"role": "assistant", "content": ""})]
        chunks += [self._chunk({"reasoning_content": p}) for p in _split_words(self.reasoning or "")]
        chunks += [self._chunk({"content": p}) for p in _split_words(self.content or "")]
        return chunks

    def closing_chunks(self, include_usage: bool) -> list[dict[str, Any]]:
        """The stream after the content: tool call fragments, finish, and the optional usage."""
        chunks = []
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            chunks.append(self._chunk({"tool_calls": [first]}))
            for fragment in _split_fragments(function["arguments"]):
                piece = {"index": index, "function": {"arguments": fragment}}
                chunks.append(self._chunk({"tool_calls": [piece]}))
        chunks.append(self._chunk({}, self.finish_reason))
        if include_usage:
            chunks.append(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage,
                }
            )
        return chunks


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "rate_limit_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


# --------------------------------------------------------------------------------------------
# The server


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
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._httpd = _HttpServer((host, port), _Handler, self)
        bound_host, bound_port = self._httpd.server_address[:2]
        # A wildcard address is not something a client can connect to; name the loopback instead.
        shown_host = "127.0.0.1" if bound_host in ("0.0.0.0", "") else bound_host
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

    # -- answering ------------------------------------------------------------------------------

    def _record_and_choose(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int | None, _Answer, dict[str, Any]]:
        """Record a request and pick its rule; returns (rule number or None, resolved answer, reply)."""
        # One lock around record, match and count, so that `times` holds under concurrency.
        with self._lock:
            self._requests.append(body)
            self._request_headers.append(headers)
            number_of_request = len(self._requests)
            for number, rule in enumerate(self.script["rules"]):
                if not _matches(rule.get("when", {}), body):
                    continue
                if "times" in rule and self._uses.get(number, 0) >= rule["times"]:
                    continue
                self._uses[number] = self._uses.get(number, 0) + 1
                reply = rule["reply"]
                return number, _Answer(reply, body, self._ids, number_of_request), reply
            fallback = {"content": NO_MATCH_CONTENT}
            return None, _Answer(fallback, body, self._ids, number_of_request), fallback

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
        else:
            self._send_json(404, _error_body(404, f"no route GET {route}"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        route = self._route()
        raw = self._read_body()
        if route == "/_mock/reset":
            self.server.mock.reset()
            self._send_json(200, {"ok": True})
        elif route in ("/v1/chat/completions", "/chat/completions"):
            self._chat(raw)
        else:
            self._send_json(404, _error_body(404, f"no route POST {route}"))

    def _chat(self, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self._send_json(400, _error_body(400, "request body must be a JSON object"))
            return
        mock = self.server.mock
        headers = {name.lower(): value for name, value in self.headers.items()}
        number, answer, reply = mock._record_and_choose(body, headers)
        if mock.verbose:
            sys.stderr.write(
                f"mock-llm: request {len(mock.requests)} answered by "
                f"{'no rule' if number is None else f'rule {number}'}\n"
            )
        if reply.get("delay"):
            # Waiting on the stop event (not time.sleep) lets stop() end a long delay at once.
            if mock._stopping.wait(float(reply["delay"])):
                return
        streaming = body.get("stream") is True
        try:
            if "status" in reply:
                message = reply.get("error", f"mock-llm scripted HTTP {reply['status']}")
                self._send_json(int(reply["status"]), _error_body(int(reply["status"]), message))
            elif "stream_error" in reply and not streaming:
                self._send_json(500, _error_body(500, reply["stream_error"]))
            elif reply.get("malformed"):
                self._malformed(streaming)
            elif streaming:
                options = body.get("stream_options")
                include_usage = isinstance(options, dict) and options.get("include_usage") is True
                self._stream(answer, include_usage, reply.get("stream_error"))
            else:
                self._send_json(200, answer.completion())
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout); there is no one left to answer.
            pass

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

    def _stream(self, answer: _Answer, include_usage: bool, stream_error: str | None) -> None:
        # HTTP/1.0 (the handler's default): no Content-Length, the body ends when we close.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in answer.content_chunks():
            self._event(chunk)
        if stream_error is not None:
            self._event(_error_body(500, stream_error))
            return
        for chunk in answer.closing_chunks(include_usage):
            self._event(chunk)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _event(self, payload: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n")
        # Flush every chunk so that clients see the pieces arrive one by one.
        self.wfile.flush()


# --------------------------------------------------------------------------------------------
# Command line


def serve_forever(script_path: str, host: str, port: int) -> None:
    """Serve ``script_path`` on ``host:port`` until interrupted (the ``agents mock-llm`` command).

    Prints one line ``mock-llm listening on <url> (<n> rules)`` on stderr once the socket is
    bound, then logs each request on stderr.

    Raises:
        ValueError: the script is invalid (see :func:`load_script`).
        OSError: the address cannot be bound.
    """
    script = load_script(script_path)
    server = MockLlmServer(script, host=host, port=port, verbose=True).start()
    print(f"mock-llm listening on {server.url} ({len(script['rules'])} rules)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m agentsite.mockllm --script FILE [--host H] [--port P]``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="mock-llm", description="Scripted OpenAI-compatible LLM server.")
    parser.add_argument("--script", required=True, help="the JSON script file (format: see the module docs)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args(argv)
    try:
        serve_forever(args.script, args.host, args.port)
    except (ValueError, OSError) as err:
        print(f"mock-llm: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
