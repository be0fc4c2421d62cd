"""agents_app.llm.complete against an in-process HTTP mock (respx): the exact requests the client
sends, how it reads streams, and which failures it retries (docs/agents.md §7; docs/decisions.md §5).

The openai SDK speaks httpx, so respx answers in place of the provider without a server: each
test states the answers and reads back the requests the client made.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from agents_app import llm
from agents_app.llm import LlmAnswer, LlmError, complete
from tests.llm import respx_httpx2  # noqa: F401 - registers respx.mock(using="httpx2")

from .helpers import make_spec, user, weather_tool

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"


def completion(content: Any = "hi there", **message: Any) -> dict[str, Any]:
    """A ``chat.completion`` body whose first choice says ``content``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "mock-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content, **message}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def sse(*chunks: dict[str, Any] | str) -> httpx.Response:
    """A streamed answer: each chunk as one server-sent event, then ``[DONE]``."""
    events = [f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n" for chunk in chunks]
    body = "".join(events) + "data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 2,
        "model": "mock-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        **extra,
    }


def ask(
    *, flavor: str = "OpenAIv1", api_key: str | None = None, stream: bool = False, **kwargs: Any
) -> tuple[LlmAnswer, list[str]]:
    """Call ``complete`` on the mocked provider; returns the answer and the text deltas it streamed."""
    deltas: list[str] = []
    answer = complete(
        spec=make_spec(BASE, flavor=flavor),
        api_key=api_key,
        messages=kwargs.pop("messages", user("hello")),
        tools=kwargs.pop("tools", []),
        timeout=kwargs.pop("timeout", 5.0),
        on_text_delta=deltas.append if stream else None,
    )
    return answer, deltas


@pytest.fixture
def provider() -> Iterator[respx.MockRouter]:
    """The mocked provider: every request outside it fails the test."""
    with respx.mock(using="httpx2", assert_all_called=False) as router:
        yield router


# --------------------------------------------------------------------------------------------
# Request shape


def test_a_plain_request_is_the_wire_format_with_the_agents_key_only(provider, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-of-the-server")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-of-the-server")
    route = provider.post(URL).respond(200, json=completion())
    answer, _ = ask(api_key="sk-agent", tools=[weather_tool()])
    assert answer.text == "hi there" and answer.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    [call] = route.calls
    assert json.loads(call.request.content) == {
        "model": "mock-model",
        "messages": user("hello"),
        "tools": [weather_tool()],
    }
    headers = call.request.headers
    assert headers["authorization"] == "Bearer sk-agent"
    assert headers["user-agent"].startswith("agents-server (openai-python/")
    assert "openai-organization" not in headers and "openai-project" not in headers


def test_without_a_key_no_authorization_is_sent_even_with_one_in_the_environment(provider, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-of-the-server")
    route = provider.post(URL).respond(200, json=completion())
    ask(api_key=None)
    ask(api_key=None, stream=False)
    assert [call.request.headers.get("authorization") for call in route.calls] == [None, None]


@pytest.mark.parametrize(("flavor", "options"), [("OpenAIv1", {"include_usage": True}), ("MistralV1", None)])
def test_a_streamed_request_asks_for_usage_only_from_openai_flavors(provider, flavor: str, options: Any) -> None:
    route = provider.post(URL).mock(return_value=sse(chunk({"content": "ok"}, "stop")))
    ask(flavor=flavor, stream=True)
    body = json.loads(route.calls.last.request.content)
    assert body["stream"] is True and body.get("stream_options") == options


# --------------------------------------------------------------------------------------------
# Streaming


def test_a_stream_is_folded_into_one_completion_with_its_tool_calls_assembled(provider) -> None:
    provider.post(URL).mock(
        return_value=sse(
            chunk({"role": "assistant", "reasoning_content": "think "}),
            chunk({"reasoning_content": "first", "content": "Let me "}),
            chunk({"content": "look."}),
            # Kimi repeats the id on every fragment; the name may also come in pieces
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_"}}]}),
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "weather", "arguments": '{"ci'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"name": "get_weather", "arguments": ""}}]}),
            chunk({}, "tool_calls"),
            {
                "id": "chatcmpl-s",
                "object": "chat.completion.chunk",
                "created": 2,
                "model": "mock-model",
                "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16},
            },
        )
    )
    answer, deltas = ask(stream=True)
    assert deltas == ["Let me ", "look."] and answer.text == "Let me look."
    assert answer.thinking == "think first"
    first, second = answer.tool_calls
    assert first == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    assert second["function"] == {"name": "get_weather", "arguments": "{}"} and second["id"].startswith("call_")
    assert answer.usage == {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}
    assert answer.raw_response["choices"][0]["finish_reason"] == "tool_calls"
    assert answer.raw_response["object"] == "chat.completion" and answer.raw_response["id"] == "chatcmpl-s"


def test_an_error_event_in_a_stream_is_an_error(provider) -> None:
    provider.post(URL).mock(
        return_value=sse(chunk({"content": "partial"}), {"error": {"message": "model overloaded mid-answer"}})
    )
    with pytest.raises(LlmError) as caught:
        ask(stream=True)
    assert caught.value.detail == "LLM stream failed: model overloaded mid-answer"


def test_a_stream_without_chunks_is_malformed(provider) -> None:
    provider.post(URL).mock(return_value=sse())
    with pytest.raises(LlmError, match="the stream ended without any chunk"):
        ask(stream=True)


def raw_stream(body: bytes) -> httpx.Response:
    """A streamed answer of exactly these bytes."""
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def test_a_stream_needs_a_finish_reason_but_not_its_done_line(provider) -> None:
    no_finish = f"data: {json.dumps(chunk({'content': 'half an ans'}))}\n\ndata: [DONE]\n\n"
    finished = f"data: {json.dumps(chunk({'content': 'whole'}, 'stop'))}\n\n"
    route = provider.post(URL).mock(
        side_effect=[
            raw_stream(no_finish.encode()),
            raw_stream(finished.encode()),
            # a last [DONE] without its blank line still ends the stream whole
            raw_stream((finished + "data: [DONE]\n").encode()),
        ]
    )
    with pytest.raises(LlmError) as caught:
        ask(stream=True)
    assert caught.value.detail == "LLM stream was cut: it ended before a finish_reason"
    assert ask(stream=True)[0].text == "whole"
    assert ask(stream=True)[0].text == "whole"
    assert route.call_count == 3


@pytest.mark.parametrize(
    "tail",
    [
        'data: {"id": "chatcmpl-s", "choi',  # half a line
        f"data: {json.dumps(chunk({}, None, usage={'total_tokens': 3}))}\n",  # a whole line, no blank line
        "event: message\n",  # another field
    ],
    ids=["half-a-line", "no-blank-line", "other-field"],
)
def test_a_stream_that_ends_inside_an_event_is_cut_even_after_its_finish_reason(provider, tail: str) -> None:
    finished = f"data: {json.dumps(chunk({'content': 'all of it'}, 'stop'))}\n\n"
    provider.post(URL).mock(return_value=raw_stream((finished + tail).encode()))
    with pytest.raises(LlmError) as caught:
        ask(stream=True)
    assert caught.value.detail == "LLM stream was cut: it ended in the middle of an event"


def test_a_comment_after_the_last_event_is_no_cut(provider) -> None:
    finished = f"data: {json.dumps(chunk({'content': 'all of it'}, 'stop'))}\n\n: keepalive"
    provider.post(URL).mock(return_value=raw_stream(finished.encode()))
    assert ask(stream=True)[0].text == "all of it"


@pytest.mark.parametrize(
    ("arguments", "finish_reason"),
    [('{"city": "Os', "tool_calls"), ('{"city": "Oslo"', "length"), ("not json", "tool_calls")],
)
def test_streamed_tool_arguments_must_be_complete_json(provider, arguments: str, finish_reason: str) -> None:
    provider.post(URL).mock(
        return_value=sse(
            chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "get_weather", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "get_weather"}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": arguments}}]}),
            chunk({}, finish_reason),
        )
    )
    with pytest.raises(LlmError) as caught:
        ask(stream=True)
    assert caught.value.detail.startswith(
        "LLM answer was malformed: the arguments of streamed tool call 1 (get_weather) are not complete JSON ("
    )
    assert "\n" not in caught.value.detail


# --------------------------------------------------------------------------------------------
# Errors and retries


def test_an_overloaded_answer_is_retried_after_the_providers_retry_after(provider, caplog) -> None:
    route = provider.post(URL).mock(
        side_effect=[
            httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow down"}}),
            httpx.Response(503, json={"error": {"message": "busy"}}),
            httpx.Response(200, json=completion("at last")),
        ]
    )
    with caplog.at_level(logging.INFO, logger="agents_app.llm"):
        answer, _ = ask()
    assert answer.text == "at last" and route.call_count == 3
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    # the first wait is the provider's Retry-After (0 s), the second our own backoff (base x 2)
    assert retries == [
        "LLM call failed (HTTP 429); retry 1 of 2 in 0.00s",
        f"LLM call failed (HTTP 503); retry 2 of 2 in {llm.RETRY_BASE_DELAY * 2:.2f}s",
    ]


def test_retries_stop_after_the_last_attempt_with_the_providers_message(provider) -> None:
    route = provider.post(URL).respond(529, json={"error": {"message": "overloaded_error"}})
    with pytest.raises(LlmError) as caught:
        ask()
    assert route.call_count == llm.MAX_RETRIES + 1
    assert caught.value.detail == "LLM provider answered HTTP 529: overloaded_error"


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, {"error": {"message": "internal failure"}}, "internal failure"),
        # not OpenAI's error shape: the body itself, on one line
        (401, {"detail": "bad key"}, '{"detail":"bad key"}'),
        (400, "plain text\n  complaint", "plain text complaint"),
    ],
)
def test_other_statuses_are_not_retried(provider, status: int, body: Any, message: str) -> None:
    kwargs = {"json": body} if not isinstance(body, str) else {"text": body}
    route = provider.post(URL).respond(status, **kwargs)
    with pytest.raises(LlmError) as caught:
        ask()
    assert route.call_count == 1
    assert caught.value.detail == f"LLM provider answered HTTP {status}: {message}"


def test_a_failed_connection_is_retried_then_named(provider) -> None:
    route = provider.post(URL).mock(side_effect=httpx.ConnectError("connection refused"))
    with pytest.raises(LlmError) as caught:
        ask()
    assert route.call_count == llm.MAX_RETRIES + 1
    assert caught.value.detail.startswith(f"could not connect to the LLM at {URL}: ")


def test_a_connection_failure_then_an_answer_succeeds(provider) -> None:
    route = provider.post(URL).mock(side_effect=[httpx.ConnectError("reset"), httpx.Response(200, json=completion())])
    answer, _ = ask()
    assert answer.text == "hi there" and route.call_count == 2


def test_a_timeout_is_not_retried(provider) -> None:
    route = provider.post(URL).mock(side_effect=httpx.ReadTimeout("too slow"))
    with pytest.raises(LlmError) as caught:
        ask(timeout=2.5)
    assert route.call_count == 1
    assert caught.value.detail == "LLM request timed out after 2.5s"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<html>gateway</html>", "not JSON"),
        (json.dumps({"error": {"message": "quota exceeded"}}), "LLM provider answered with an error: quota exceeded"),
        (json.dumps({"choices": []}), "no choices"),
        (json.dumps(completion(tool_calls=[{"id": "c", "function": {}}])), "tool call 0 has no function name"),
    ],
)
def test_a_200_that_is_not_a_usable_completion_is_an_error(provider, body: str, message: str) -> None:
    provider.post(URL).respond(200, text=body, headers={"content-type": "application/json"})
    with pytest.raises(LlmError, match=message):
        ask()


def test_object_arguments_and_list_content_are_normalized(provider) -> None:
    body = completion(
        [{"type": "text", "text": "two "}, {"type": "image_url"}, {"type": "text", "text": "parts"}],
        tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
        ],
        reasoning="via ollama",
    )
    provider.post(URL).respond(200, json=body)
    answer, _ = ask(flavor="OllamaV1")
    assert answer.text == "two parts" and answer.thinking == "via ollama"
    assert answer.tool_calls[0]["function"]["arguments"] == '{"city": "Rome"}'
