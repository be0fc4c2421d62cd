"""agents_app.llm.complete against a real mock-llm server (docs/agents.md §7; docs/decisions.md §5, §6)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest

from agents_app import llm
from agents_app.llm import LlmAnswer, LlmError, complete

from .helpers import make_spec, user, weather_tool

WEATHER_SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "Paris"},
            "reply": {
                "content": "Let me check the weather for you.",
                "reasoning": "The user wants Paris weather.",
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Paris"}},
                    {"name": "get_weather", "arguments": '{"city": "Lyon"}'},
                ],
            },
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "Here is what I found: {last_content}"}},
        {"reply": {"content": "Hello! How can I help you today?"}},
    ]
}


def ask(
    server,
    text: str = "hello",
    *,
    flavor: str = "OpenAIv1",
    api_key: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    timeout: float = 5.0,
    stream: bool = False,
    messages: list[dict[str, Any]] | None = None,
) -> tuple[LlmAnswer, list[str]]:
    """Call ``complete``; returns the answer and the text deltas it streamed."""
    deltas: list[str] = []
    answer = complete(
        spec=make_spec(server.url if hasattr(server, "url") else server, flavor=flavor),
        api_key=api_key,
        messages=messages if messages is not None else user(text),
        tools=tools or [],
        timeout=timeout,
        on_text_delta=deltas.append if stream else None,
    )
    return answer, deltas


# --------------------------------------------------------------------------------------------
# Plain answers


def test_plain_answer(llm_server):
    server = llm_server(WEATHER_SCRIPT)
    answer, _ = ask(server, "hello")
    assert answer.text == "Hello! How can I help you today?"
    assert answer.thinking is None
    assert answer.tool_calls == []
    assert answer.usage and answer.usage["total_tokens"] > 0
    assert answer.raw_response["object"] == "chat.completion"
    assert answer.raw_response["choices"][0]["message"]["content"] == answer.text
    [request] = server.requests
    assert request["model"] == "mock-model"
    assert request["messages"] == user("hello")
    assert "tools" not in request and "stream" not in request


def test_tool_calls_and_reasoning(llm_server):
    server = llm_server(WEATHER_SCRIPT)
    answer, _ = ask(server, "weather in Paris?", tools=[weather_tool()])
    assert answer.text == "Let me check the weather for you."
    assert answer.thinking == "The user wants Paris weather."
    assert [c["function"]["name"] for c in answer.tool_calls] == ["get_weather", "get_weather"]
    for call in answer.tool_calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert isinstance(call["function"]["arguments"], str)
    assert [json.loads(c["function"]["arguments"]) for c in answer.tool_calls] == [{"city": "Paris"}, {"city": "Lyon"}]
    assert answer.raw_response["choices"][0]["finish_reason"] == "tool_calls"
    assert server.requests[0]["tools"] == [weather_tool()]


def test_tool_result_round_trip_substitutes_last_content(llm_server):
    server = llm_server(WEATHER_SCRIPT)
    first, _ = ask(server, "weather in Paris?")
    call = first.tool_calls[0]
    conversation = [
        *user("weather in Paris?"),
        {"role": "assistant", "content": first.text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21C"},
    ]
    second, _ = ask(server, messages=conversation)
    assert second.text == "Here is what I found: sunny, 21C"


def test_kimi_reasoning_is_thinking(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "42", "reasoning": "Let me think step by step."}}]})
    answer, _ = ask(server, flavor="KimiV1")
    assert answer.thinking == "Let me think step by step."
    assert answer.text == "42"


# --------------------------------------------------------------------------------------------
# Streaming


def test_stream_deltas_concatenate_to_text_and_fold_into_a_completion(llm_server):
    server = llm_server(WEATHER_SCRIPT)
    streamed, deltas = ask(server, "weather in Paris?", stream=True)
    plain, _ = ask(server, "weather in Paris?")
    assert len(deltas) > 1 and all(deltas)
    assert "".join(deltas) == streamed.text == "Let me check the weather for you."
    assert streamed.thinking == "The user wants Paris weather."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in streamed.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Lyon"}),
    ]
    assert all(c["id"].startswith("call_") for c in streamed.tool_calls)
    # The folded stream has the shape of the non-streamed answer (ids differ per request).
    raw = streamed.raw_response
    assert raw["object"] == "chat.completion" and raw["model"] == "mock-model" and raw["id"]
    assert raw["choices"][0]["finish_reason"] == "tool_calls"
    strip_ids = lambda message: {**message, "tool_calls": [{**c, "id": "-"} for c in message["tool_calls"]]}  # noqa: E731
    assert strip_ids(raw["choices"][0]["message"]) == strip_ids(plain.raw_response["choices"][0]["message"])
    assert streamed.usage == plain.usage


@pytest.mark.parametrize("flavor", ["OpenAIv1", "openai", "OpenAI"])
def test_openai_flavors_ask_for_usage_when_streaming(llm_server, flavor):
    server = llm_server(WEATHER_SCRIPT)
    answer, _ = ask(server, "hello", flavor=flavor, stream=True)
    [request] = server.requests
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert answer.usage and answer.usage["total_tokens"] > 0
    assert answer.raw_response["usage"] == answer.usage


@pytest.mark.parametrize("flavor", ["KimiV1", "MistralV1", "OllamaV1", "SomethingElse"])
def test_other_flavors_stream_without_stream_options(llm_server, flavor):
    server = llm_server(WEATHER_SCRIPT)
    answer, deltas = ask(server, "hello", flavor=flavor, stream=True)
    [request] = server.requests
    assert request["stream"] is True
    assert "stream_options" not in request
    assert answer.usage is None
    assert "".join(deltas) == answer.text == "Hello! How can I help you today?"


def test_stream_without_content_gives_null_content(llm_server):
    server = llm_server({"rules": [{"reply": {"tool_calls": [{"name": "get_weather", "arguments": {}}]}}]})
    answer, deltas = ask(server, stream=True)
    assert deltas == [] and answer.text == ""
    assert answer.raw_response["choices"][0]["message"]["content"] in ("", None)
    assert answer.tool_calls[0]["function"]["arguments"] == "{}"


def test_a_failing_delta_callback_propagates(llm_server):
    server = llm_server(WEATHER_SCRIPT)

    def explode(piece: str) -> None:
        raise RuntimeError("consumer failed")

    with pytest.raises(RuntimeError, match="consumer failed"):
        complete(
            spec=make_spec(server.url), api_key=None, messages=user("hi"), tools=[], timeout=5, on_text_delta=explode
        )


def test_error_event_mid_stream(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "partial answer", "stream_error": "overloaded"}}]})
    with pytest.raises(LlmError) as caught:
        ask(server, stream=True)
    assert caught.value.detail == "LLM stream failed: overloaded"


CUT_RULE = {
    "content": "Partial answer that never ends",
    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
}


@pytest.mark.parametrize("cancellable", [False, True], ids=["plain", "interruptible"])
@pytest.mark.parametrize("half_event", [False, True], ids=["at-an-event-end", "in-half-an-event"])
@pytest.mark.parametrize("cut", ["after_text", "mid_tool_call", "before_finish"])
def test_a_cut_stream_is_an_error_after_its_deltas(llm_server, cut: str, half_event: bool, cancellable: bool):
    server = llm_server({"rules": [{"reply": {**CUT_RULE, "cut": cut, "cut_half_event": half_event}}]})
    deltas: list[str] = []
    with pytest.raises(LlmError) as caught:
        complete(
            spec=make_spec(server.url),
            api_key=None,
            messages=user("hi"),
            tools=[weather_tool()],
            timeout=5,
            on_text_delta=deltas.append,
            cancel=threading.Event() if cancellable else None,
        )
    # a half event says so; otherwise the stream ended whole but without a finish_reason
    expected = "it ended in the middle of an event" if half_event else "it ended before a finish_reason"
    assert caught.value.detail == f"LLM stream was cut: {expected}"
    assert "".join(deltas) == ("Partial " if cut == "after_text" else CUT_RULE["content"])
    # a cut answer is not asked again: its pieces were already sent
    assert len(server.requests) == 1


def test_a_connection_broken_mid_stream_is_a_cut_and_is_not_retried():
    # a chunked answer whose connection closes inside a chunk, as a provider's dying proxy does
    listener = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []
    event = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "Partial "}}]}).encode() + b"\n\n"

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                requests.append(connection.recv(65536))
                head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                connection.sendall(head + b"%x\r\n%s\r\n" % (len(event), event) + b"400\r\ndata: {")

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    deltas: list[str] = []
    with pytest.raises(LlmError) as caught:
        complete(
            spec=make_spec(url), api_key=None, messages=user("hi"), tools=[], timeout=5, on_text_delta=deltas.append
        )
    assert caught.value.detail.startswith("LLM stream was cut: ") and "\n" not in caught.value.detail
    assert "could not connect" not in caught.value.detail
    assert deltas == ["Partial "] and len(requests) == 1


# --------------------------------------------------------------------------------------------
# Authorization (docs/agents.md §6)


def test_a_key_is_sent_as_bearer(llm_server):
    server = llm_server(WEATHER_SCRIPT)
    ask(server, api_key="sk-test-123")
    ask(server, api_key="sk-test-123", stream=True)
    assert [h.get("authorization") for h in server.request_headers] == ["Bearer sk-test-123"] * 2


def test_no_key_means_no_authorization_header(llm_server, monkeypatch):
    # The environment must not fill in for a missing key: it would leak the server's own
    # credentials to whatever modelUrl an agent names.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-env")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-env")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer sk-custom-env")
    server = llm_server(WEATHER_SCRIPT)
    ask(server, api_key=None)
    ask(server, api_key=None, stream=True)
    for headers in server.request_headers:
        assert "authorization" not in headers
        assert "openai-organization" not in headers and "openai-project" not in headers


# --------------------------------------------------------------------------------------------
# Failures


def test_http_500_is_an_error_with_the_provider_message_and_not_retried(llm_server):
    server = llm_server(
        {"rules": [{"when": {"any_contains": "crash"}, "reply": {"status": 500, "error": "scripted failure"}}]}
    )
    for stream in (False, True):
        with pytest.raises(LlmError) as caught:
            ask(server, "please crash", stream=stream)
        assert caught.value.detail == "LLM provider answered HTTP 500: scripted failure"
        assert str(caught.value) == caught.value.detail
    assert len(server.requests) == 2


def test_client_errors_are_reported(llm_server):
    server = llm_server({"rules": [{"reply": {"status": 401, "error": "Incorrect API key provided"}}]})
    with pytest.raises(LlmError, match="HTTP 401: Incorrect API key provided"):
        ask(server, api_key="wrong")
    assert len(server.requests) == 1


def test_overloaded_answers_are_retried(llm_server):
    server = llm_server(
        {
            "rules": [
                {"times": 2, "reply": {"status": 503, "error": "overloaded"}},
                {"reply": {"content": "finally"}},
            ]
        }
    )
    answer, _ = ask(server)
    assert answer.text == "finally"
    assert len(server.requests) == 3


def test_retries_are_capped(llm_server):
    server = llm_server({"rules": [{"reply": {"status": 429, "error": "rate limited"}}]})
    with pytest.raises(LlmError, match="HTTP 429: rate limited"):
        ask(server)
    assert len(server.requests) == 1 + llm.MAX_RETRIES


def test_malformed_body_is_an_error(llm_server):
    server = llm_server({"rules": [{"reply": {"malformed": True}}]})
    with pytest.raises(LlmError, match="^LLM answer was malformed: not JSON"):
        ask(server)
    with pytest.raises(LlmError, match="^LLM answer was malformed"):
        ask(server, stream=True)


def test_timeout_is_an_error_and_not_retried(llm_server):
    server = llm_server({"rules": [{"reply": {"delay": 2, "content": "too late"}}]})
    for stream in (False, True):
        started = time.monotonic()
        with pytest.raises(LlmError) as caught:
            ask(server, timeout=0.3, stream=stream)
        assert caught.value.detail == "LLM request timed out after 0.3s"
        assert time.monotonic() - started < 1.5
    assert len(server.requests) == 2


def test_connection_refused_names_the_url():
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(LlmError) as caught:
        ask(url)
    assert caught.value.detail.startswith(f"could not connect to the LLM at {url}/chat/completions")
    assert "refused" in caught.value.detail.lower()


# --------------------------------------------------------------------------------------------
# Decoding details that the mock does not produce


def test_answers_from_other_providers_are_normalized():
    completion = {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "reasoning": "ollama-style thinking",
                    "tool_calls": [{"function": {"name": "t", "arguments": {"k": 1}}}],
                },
            }
        ],
    }
    answer = llm._answer_from_completion(completion)
    assert answer.text == "ab"
    assert answer.thinking == "ollama-style thinking"
    [call] = answer.tool_calls
    assert call["id"].startswith("call_") and call["function"] == {"name": "t", "arguments": '{"k": 1}'}
    assert answer.usage is None


@pytest.mark.parametrize(
    ("completion", "message"),
    [
        ([], "not a JSON object"),
        ({"id": "x"}, "no choices"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"index": 0}]}, "has no message"),
        ({"choices": [{"message": {"content": 3}}]}, "content is a int"),
        ({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}, "no function name"),
        ({"error": {"message": "quota exceeded"}}, "answered with an error: quota exceeded"),
    ],
)
def test_unusable_completions_are_errors(completion, message):
    with pytest.raises(LlmError, match=message):
        llm._answer_from_completion(completion)
