"""The LLM client: one chat-completions call for an agent (docs/agents.md §7; docs/decisions.md §5, §6).

Every flavor speaks OpenAI chat completions at ``<modelUrl>/chat/completions``, through the
``openai`` SDK. The flavors differ only in small ways:

- ``OpenAIv1`` (and its older spellings ``openai`` / ``OpenAI``) asks for
  ``stream_options.include_usage`` when streaming; other providers may refuse that option, so the
  other flavors never send it.
- ``KimiV1`` (and any provider that sends it) returns ``reasoning_content``, kept as ``thinking``.
- ``MistralV1``, ``OllamaV1`` and unknown flavors are plain OpenAI-compatible (an unknown flavor is
  logged once as a warning).

Credentials come from the agent's key only: ``api_key=None`` (the key id is missing from the keys
file, docs/decisions.md §5) sends no ``Authorization`` header at all, and the ``OPENAI_*``
environment variables the SDK would otherwise read are never used, so the server's own
credentials cannot leak to whatever ``modelUrl`` an agent file names.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentfiles.endpoints import model_url
from agentfiles.schema import AgentSpec

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

#: Flavors that get ``stream_options.include_usage`` when streaming (docs/agents.md §7.2).
OPENAI_FLAVORS = frozenset({"OpenAIv1", "openai", "OpenAI"})
#: Every flavor we know; others are treated as generic OpenAI-compatible, with a warning.
KNOWN_FLAVORS = OPENAI_FLAVORS | {"KimiV1", "MistralV1", "OllamaV1"}

#: HTTP statuses that mean "overloaded, try again" (docs/agents.md §7.5); 529 is Anthropic-style.
RETRY_STATUSES = frozenset({429, 502, 503, 529})
#: Retries after the first attempt, for those statuses and for failed connections.
MAX_RETRIES = 2
#: Seconds before the first retry; doubled for each further one. Tests lower it.
RETRY_BASE_DELAY = 0.5
#: Upper bound, in seconds, on one wait between attempts (a provider's Retry-After included).
RETRY_MAX_DELAY = 8.0

_warned_flavors: set[str] = set()
_T = TypeVar("_T")


@dataclass
class LlmAnswer:
    """One completion, whether it was streamed or not.

    Attributes:
        raw_response: the completion as a non-streamed ``chat.completion`` JSON object: the
            provider's body as received, or a stream folded back into that shape (stored as the
            LLM turn's ``rawResponse``).
        text: the message content; ``""`` when the provider sent null.
        thinking: ``reasoning_content`` when the provider sent some, else ``None``.
        tool_calls: OpenAI tool calls ``[{"id", "type": "function", "function": {"name",
            "arguments": <JSON string>}}]``, in the provider's order.
        usage: the provider's ``usage`` object (token counts), ``None`` when absent.
    """

    raw_response: dict[str, Any]
    text: str
    thinking: str | None
    tool_calls: list[dict[str, Any]]
    usage: dict[str, Any] | None


class LlmError(Exception):
    """The provider failed.

    ``detail`` is one line saying what happened: the HTTP status and the provider's message, a
    timeout, a refused connection (with the URL), or a malformed answer.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def complete(
    *,
    spec: AgentSpec,
    api_key: str | None,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    timeout: float,
    on_text_delta: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> LlmAnswer:
    """Ask the agent's LLM for the next assistant message.

    Args:
        spec: the agent; ``modelUrl``, ``modelName`` and ``flavor`` are used.
        api_key: the key's value, or ``None`` for no ``Authorization`` header (docs/agents.md §6).
        messages: OpenAI chat messages, oldest first (system message included).
        tools: OpenAI tool definitions ``[{"type": "function", "function": {...}}]``; not sent
            when empty.
        timeout: seconds. Without streaming it bounds the whole request; with streaming it bounds
            connecting and each wait for the next piece of the stream.
        on_text_delta: when given, the request is streamed and this is called with every
            non-empty piece of content, in order; the pieces concatenate to ``LlmAnswer.text``.
            An exception it raises ends the call and propagates unchanged.
        cancel: when given, setting it abandons the request in flight: its connection is closed,
            so the provider sees the request cancelled (the ``interruptCompletions`` option,
            docs/sessions.md §6.7), and :class:`LlmCancelled` is raised.

    Returns:
        The answer (see :class:`LlmAnswer`).

    Raises:
        LlmError: the provider answered an HTTP error (after up to ``MAX_RETRIES`` retries for
            429/502/503/529), the request timed out (never retried: ``timeout`` is the caller's
            budget), the connection failed (retried), or the answer was malformed.
        LlmCancelled: ``cancel`` was set before the answer came.
    """
    # Imported here, not with this module: the SDK takes about a third of a second to import,
    # which every `agents serve` and `agents worker` would pay before its first answer.
    import httpx
    import openai

    from agents_app.openai_client import AgentClient

    flavor = spec.flavor
    if flavor not in KNOWN_FLAVORS and flavor not in _warned_flavors:
        _warned_flavors.add(flavor)
        log.warning("unknown LLM flavor %r; treating it as a generic OpenAI-compatible API", flavor)

    request: dict[str, Any] = {"model": spec.modelName, "messages": messages}
    if tools:
        request["tools"] = tools
    if on_text_delta is not None:
        request["stream"] = True
        if flavor in OPENAI_FLAVORS:
            request["stream_options"] = {"include_usage": True}

    # an endpoint override (--model-url) applies here, where the model is called (docs/cli.md §2.3.2)
    base = model_url(spec.modelUrl)
    url = f"{base.rstrip('/')}/chat/completions"
    if cancel is not None:
        try:
            completion = _with_retries(
                lambda: _attempt_cancellable(api_key, base, timeout, request, on_text_delta, cancel)
            )
        except openai.APIError as err:
            raise LlmError(_describe(err, timeout, url)) from err
        return _answer_from_completion(completion)
    client = _client(AgentClient, api_key, base, timeout)
    try:
        if on_text_delta is None:
            # The SDK's own request method, without its per-message conversion of the parameters
            # (which takes longer than the rest of the step at a thousand messages): the request
            # is already in the wire format, and the answer is decoded below anyway.
            raw = _with_retries(lambda: client.post("/chat/completions", body=request, cast_to=httpx.Response))
            return _answer_from_completion(_decode_completion(raw.text))
        stream = _with_retries(lambda: client.chat.completions.create(**request))
        with stream:
            return _answer_from_completion(_fold_stream(stream, on_text_delta, timeout))
    except openai.APIError as err:
        raise LlmError(_describe(err, timeout, url)) from err


class LlmCancelled(Exception):
    """The request was cancelled while in flight; no answer is kept."""


#: Seconds between two looks at the cancel event while a cancellable request is in flight.
_CANCEL_POLL_SECONDS = 0.05


def _attempt_cancellable(
    api_key: str | None,
    base_url: str,
    timeout: float,
    request: dict[str, Any],
    on_text_delta: Callable[[str], None] | None,
    cancel: threading.Event,
) -> dict[str, Any]:
    """One attempt of a request that ``cancel`` may abandon, as a ``chat.completion`` dict.

    The request runs as an asyncio task on a client of its own (made and closed here): cancelling
    the task closes the connection, which a blocking call in another thread could not do.

    Raises:
        LlmCancelled: ``cancel`` was set first.
        openai.APIError: as the SDK raises it (retried by the caller where it may be).
    """
    import asyncio

    import httpx

    from agents_app.openai_client import AsyncAgentClient

    async def ask(client: Any) -> dict[str, Any]:
        if on_text_delta is None:
            raw = await client.post("/chat/completions", body=request, cast_to=httpx.Response)
            return _decode_completion(raw.text)
        fold = _StreamFold(on_text_delta)
        stream = await client.chat.completions.create(**request)
        async with stream:
            with _reading_stream(timeout):
                async for chunk in stream:
                    fold.add(chunk)
        return fold.completion()

    async def race() -> dict[str, Any]:
        async with AsyncAgentClient(agent_api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0) as client:
            task = asyncio.ensure_future(ask(client))
            while not task.done():
                if cancel.is_set():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    raise LlmCancelled()
                await asyncio.wait({task}, timeout=_CANCEL_POLL_SECONDS)
            return task.result()

    return asyncio.run(race())


_clients_lock = threading.Lock()
_clients: dict[tuple[str | None, str, float], Any] = {}


def _client(client_class: type, api_key: str | None, base_url: str, timeout: float) -> Any:
    """The SDK client for this key, endpoint and timeout, made once per process and kept.

    Reusing it keeps its connection pool (and TLS sessions) from one call to the next; the
    client is safe to share between threads. The SDK's own retries are off: it would also retry
    timeouts (tripling the caller's budget) and every 5xx; :func:`_with_retries` keeps to
    overload statuses and connection failures.
    """
    key = (api_key, base_url, timeout)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = client_class(agent_api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)
            _clients[key] = client
        return client


# --------------------------------------------------------------------------------------------
# Retries and errors


def _with_retries(call: Callable[[], _T]) -> _T:
    """Run ``call``, retrying overload statuses and connection failures (not timeouts)."""
    import openai

    for attempt in range(MAX_RETRIES + 1):
        try:
            return call()
        except openai.APITimeoutError:
            raise
        except (openai.APIStatusError, openai.APIConnectionError) as err:
            retryable = isinstance(err, openai.APIConnectionError) or err.status_code in RETRY_STATUSES
            if not retryable or attempt == MAX_RETRIES:
                raise
            delay = _retry_delay(err, attempt)
            what = f"HTTP {err.status_code}" if isinstance(err, openai.APIStatusError) else "no connection"
            log.info("LLM call failed (%s); retry %d of %d in %.2fs", what, attempt + 1, MAX_RETRIES, delay)
            time.sleep(delay)
    raise AssertionError("unreachable: the last attempt either returns or raises")


def _retry_delay(err: openai.APIError, attempt: int) -> float:
    """Seconds to wait before the next attempt: the provider's Retry-After, else exponential."""
    response = getattr(err, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    try:
        wanted = float(header) if header is not None else None
    except ValueError:
        wanted = None  # an HTTP date; rare from LLM providers, so fall back to our own backoff
    if wanted is None or wanted < 0:
        wanted = RETRY_BASE_DELAY * (2**attempt)
    return min(wanted, RETRY_MAX_DELAY)


def _describe(err: openai.APIError, timeout: float, url: str) -> str:
    """One line for :class:`LlmError` from an SDK error."""
    import openai

    if isinstance(err, openai.APITimeoutError):
        return f"LLM request timed out after {timeout:g}s"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__
        reason = f"{cause}" if cause is not None and str(cause) else type(cause or err).__name__
        return f"could not connect to the LLM at {url}: {reason}"
    if isinstance(err, openai.APIStatusError):
        return f"LLM provider answered HTTP {err.status_code}: {_provider_message(err)}"
    # An APIError with no status: an {"error": ...} event in the middle of a stream.
    return f"LLM stream failed: {err.message}"


def _provider_message(err: openai.APIStatusError) -> str:
    """The provider's error message: ``error.message`` of an OpenAI-style body, else the body."""
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    try:
        text = err.response.text.strip()
    except Exception:  # noqa: BLE001 - the body of a failed response is best effort
        text = ""
    return " ".join(text.split())[:300] or "(empty body)"


# --------------------------------------------------------------------------------------------
# Decoding


def _decode_completion(body: str) -> dict[str, Any]:
    """Parse a non-streamed answer body. Raises LlmError when it is not JSON."""
    try:
        completion = json.loads(body)
    except json.JSONDecodeError as err:
        snippet = " ".join(body.split())[:80]
        raise LlmError(f"LLM answer was malformed: not JSON ({err.msg}): {snippet!r}") from err
    return completion


def _answer_from_completion(completion: Any) -> LlmAnswer:
    """Read a ``chat.completion`` object. Raises LlmError when it lacks a usable message."""
    if not isinstance(completion, dict):
        raise LlmError("LLM answer was malformed: not a JSON object")
    if isinstance(completion.get("error"), dict):
        # Some providers answer 200 with an error object instead of an HTTP error status.
        message = completion["error"].get("message") or json.dumps(completion["error"])
        raise LlmError(f"LLM provider answered with an error: {message}")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LlmError("LLM answer was malformed: no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise LlmError("LLM answer was malformed: the first choice has no message")
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise LlmError("LLM answer was malformed: tool_calls is not a list")
    usage = completion.get("usage")
    return LlmAnswer(
        raw_response=completion,
        text=_content_text(message.get("content")),
        thinking=_thinking(message),
        tool_calls=[_normalize_tool_call(call, n) for n, call in enumerate(tool_calls)],
        usage=usage if isinstance(usage, dict) else None,
    )


def _content_text(content: Any) -> str:
    """Message content as text: null → "", a list of parts → their text joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise LlmError(f"LLM answer was malformed: content is a {type(content).__name__}")


def _thinking(message: dict[str, Any]) -> str | None:
    """``reasoning_content`` (Kimi, DeepSeek) or ``reasoning`` (Ollama, OpenRouter), if any."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _normalize_tool_call(call: Any, position: int) -> dict[str, Any]:
    """An OpenAI tool call with a string id and JSON-string arguments."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise LlmError(f"LLM answer was malformed: tool call {position} has no function")
    function = call["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise LlmError(f"LLM answer was malformed: tool call {position} has no function name")
    arguments = function.get("arguments")
    if arguments is None or arguments == "":
        arguments = "{}"
    elif not isinstance(arguments, str):
        # Some OpenAI-compatible servers send the arguments as an object.
        arguments = json.dumps(arguments)
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        # The tool message that answers this call must name it, so invent an id when missing.
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _fold_stream(stream: Any, on_text_delta: Callable[[str], None], timeout: float) -> dict[str, Any]:
    """Fold a chat-completion chunk stream into the non-streamed ``chat.completion`` shape
    (:class:`_StreamFold`); ``timeout`` is only quoted by the error of a stalled stream."""
    fold = _StreamFold(on_text_delta)
    with _reading_stream(timeout):
        for chunk_object in stream:
            fold.add(chunk_object)
    return fold.completion()


@contextmanager
def _reading_stream(timeout: float) -> Iterator[None]:
    """Turn what can go wrong while a stream is read into :class:`LlmError` (docs/agents.md §7.4).

    A stream cut once its answer has begun is not retried (the retries of docs/agents.md §7.5 are of
    requests the provider refused or never received): its text pieces are already sent as
    ``text.delta`` events, and a second answer would follow them with different ones.

    Raises:
        LlmError: an event is not JSON, the stream ended inside an event, the connection broke,
            or no piece came within ``timeout`` seconds. An ``{"error": ...}`` event
            (``openai.APIError`` without a status) passes through, for :func:`_describe`.
    """
    import openai

    from agents_app.openai_client import UnfinishedEvent

    try:
        yield
    except json.JSONDecodeError as err:
        raise LlmError(f"LLM answer was malformed: a stream event is not JSON ({err.msg})") from err
    except UnfinishedEvent as err:
        raise LlmError("LLM stream was cut: it ended in the middle of an event") from err
    except openai.APITimeoutError as err:
        raise LlmError(f"LLM request timed out after {timeout:g}s") from err
    except openai.APIConnectionError as err:
        cause = err.__cause__
        reason = f"{cause}" if cause is not None and str(cause) else type(cause or err).__name__
        raise LlmError(f"LLM stream was cut: {reason}") from err


class _StreamFold:
    """The chunks of a streamed answer folded as they come (docs/agents.md §7.4).

    Content and reasoning pieces are concatenated, tool calls assembled by ``index`` (the id, type
    and name from whichever fragment carries them, the ``arguments`` fragments appended), and the
    last ``finish_reason`` and ``usage`` kept.
    """

    def __init__(self, on_text_delta: Callable[[str], None]) -> None:
        self.on_text_delta = on_text_delta
        self.header: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.choices: dict[int, dict[str, Any]] = {}
        self.seen_chunk = False

    def add(self, chunk_object: Any) -> None:
        """Fold one chunk (an SDK ``ChatCompletionChunk``)."""
        chunk = chunk_object.model_dump(exclude_unset=True)
        self.seen_chunk = True
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) is not None:
                self.header.setdefault(key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            index = choice.get("index") or 0
            state = self.choices.setdefault(
                index, {"content": None, "reasoning": None, "calls": {}, "finish_reason": None}
            )
            _fold_delta(state, choice.get("delta") or {}, self.on_text_delta if index == 0 else None)
            if choice.get("finish_reason") is not None:
                state["finish_reason"] = choice["finish_reason"]

    def completion(self) -> dict[str, Any]:
        """The folded answer as a ``chat.completion`` dict, once the stream has ended.

        Only a finished answer is one (docs/agents.md §7.4): a stream that ends before its first
        choice's ``finish_reason`` was cut, and so were tool-call arguments that are not JSON,
        which a stream assembles from fragments.

        Raises:
            LlmError: no chunk came, none had a choice, the first choice has no
                ``finish_reason``, or a tool call's arguments are not JSON.
        """
        if not self.seen_chunk:
            raise LlmError("LLM answer was malformed: the stream ended without any chunk")
        if not self.choices:
            raise LlmError("LLM answer was malformed: no choices in the stream")
        first = self.choices[min(self.choices)]
        if first["finish_reason"] is None:
            raise LlmError("LLM stream was cut: it ended before a finish_reason")
        for position, (_, call) in enumerate(sorted(first["calls"].items())):
            _check_arguments(position, call)
        completion: dict[str, Any] = {
            "id": self.header.get("id", ""),
            "object": "chat.completion",
            "created": self.header.get("created", 0),
            "model": self.header.get("model", ""),
            "choices": [_folded_choice(index, self.choices[index]) for index in sorted(self.choices)],
            "usage": self.usage,
        }
        if "system_fingerprint" in self.header:
            completion["system_fingerprint"] = self.header["system_fingerprint"]
        return completion


def _fold_delta(
    state: dict[str, Any], delta: dict[str, Any], on_text_delta: Callable[[str], None] | None
) -> None:
    """Add one chunk's ``delta`` to a choice's folding state."""
    piece = delta.get("content")
    if isinstance(piece, str):
        state["content"] = (state["content"] or "") + piece
        if piece and on_text_delta is not None:
            on_text_delta(piece)
    for key in ("reasoning_content", "reasoning"):
        thought = delta.get(key)
        if isinstance(thought, str):
            state["reasoning"] = (state["reasoning"] or "") + thought
            break
    for position, fragment in enumerate(delta.get("tool_calls") or []):
        index = fragment.get("index")
        if not isinstance(index, int):
            index = position
        call = state["calls"].setdefault(index, {"id": None, "type": "function", "name": "", "arguments": ""})
        if fragment.get("id"):
            # Kimi repeats the id on every fragment; the first one is kept.
            call["id"] = call["id"] or fragment["id"]
        if fragment.get("type"):
            call["type"] = fragment["type"]
        function = fragment.get("function") or {}
        name = function.get("name")
        if name and name != call["name"]:
            # Usually the whole name arrives once; some providers repeat it (ignored above) or
            # stream it in pieces (appended here).
            call["name"] += name
        if isinstance(function.get("arguments"), str):
            call["arguments"] += function["arguments"]


def _check_arguments(position: int, call: dict[str, Any]) -> None:
    """Raise LlmError when an assembled tool call's arguments are not one JSON document.

    No arguments at all (``""``) are allowed: they are read as ``{}`` (docs/agents.md §7.3).
    """
    if call["arguments"] == "":
        return
    try:
        json.loads(call["arguments"])
    except json.JSONDecodeError as err:
        name = call["name"] or "without a name"
        raise LlmError(
            f"LLM answer was malformed: the arguments of streamed tool call {position} ({name}) "
            f"are not complete JSON ({err.msg})"
        ) from err


def _folded_choice(index: int, state: dict[str, Any]) -> dict[str, Any]:
    """One folded choice in the non-streamed shape."""
    message: dict[str, Any] = {"role": "assistant", "content": state["content"]}
    if state["reasoning"] is not None:
        message["reasoning_content"] = state["reasoning"]
    if state["calls"]:
        message["tool_calls"] = [
            {"id": c["id"], "type": c["type"], "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(state["calls"].items())
        ]
    return {"index": index, "message": message, "finish_reason": state["finish_reason"]}
