"""The scripted mock LLM server (devtools/mockllm), spoken to over real HTTP."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools import mockllm
from devtools.mockllm import NO_MATCH_CONTENT, MockLlmServer, load_script, validate_script
from tests.harness import Processes, wait_until

from .helpers import user, weather_tool


def chat(server: MockLlmServer, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"model": "mock-model", "messages": messages, **extra}
    return httpx.post(f"{server.url}/chat/completions", json=body)


def answer_text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def sse_events(response: httpx.Response) -> list[Any]:
    """The decoded ``data:`` payloads of an event stream, ``"[DONE]"`` kept as a string."""
    events = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


# --------------------------------------------------------------------------------------------
# Matching


def test_rules_first_match_wins_and_default(llm_server):
    server = llm_server(
        {
            "rules": [
                {"when": {"last_contains": "Paris"}, "reply": {"content": "first"}},
                {"when": {"last_contains": "Paris"}, "reply": {"content": "second"}},
                {"reply": {"content": "default answer"}},
            ]
        }
    )
    assert answer_text(chat(server, user("weather in Paris?"))) == "first"
    assert answer_text(chat(server, user("hello"))) == "default answer"


def test_no_rule_matched(llm_server):
    server = llm_server({"rules": [{"when": {"last_contains": "never"}, "reply": {"content": "x"}}]})
    assert answer_text(chat(server, user("hello"))) == NO_MATCH_CONTENT


def test_last_role_and_tool_results(llm_server):
    server = llm_server(
        {
            "rules": [
                {"when": {"last_role": "tool", "tool_results": 2}, "reply": {"content": "two results"}},
                {"when": {"last_role": "tool"}, "reply": {"content": "some results"}},
                {"when": {"last_role": "user", "tool_results": 0}, "reply": {"content": "user spoke"}},
            ]
        }
    )
    call = {"role": "assistant", "content": None, "tool_calls": []}
    one = [*user("go"), call, {"role": "tool", "tool_call_id": "a", "content": "r1"}]
    two = [*one, {"role": "tool", "tool_call_id": "b", "content": "r2"}]
    assert answer_text(chat(server, user("go"))) == "user spoke"
    assert answer_text(chat(server, one)) == "some results"
    assert answer_text(chat(server, two)) == "two results"
    # Tool messages before the last user message do not count.
    assert (
        answer_text(
            chat(
                server,
                [*two, {"role": "tool", "tool_call_id": "c", "content": "r3"}, {"role": "user", "content": "again"}],
            )
        )
        == "user spoke"
    )


def test_any_contains_model_and_has_tool(llm_server):
    server = llm_server(
        {
            "rules": [
                {"when": {"model": "big-model"}, "reply": {"content": "big"}},
                {"when": {"has_tool": "get_weather"}, "reply": {"content": "has weather"}},
                {"when": {"any_contains": "test agent"}, "reply": {"content": "saw the system prompt"}},
            ]
        }
    )
    assert answer_text(chat(server, user("hi"), model="big-model")) == "big"
    assert answer_text(chat(server, user("hi"), tools=[weather_tool()])) == "has weather"
    assert answer_text(chat(server, user("hi"))) == "saw the system prompt"


def test_last_contains_reads_text_parts_of_list_content(llm_server):
    rule = {"when": {"last_contains": "Paris"}, "reply": {"content": "{last_content}!"}}
    server = llm_server({"rules": [rule]})
    parts = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "Paris"},
    ]
    assert answer_text(chat(server, [{"role": "user", "content": parts}])) == "Paris!"


def test_last_content_substitution_keeps_other_braces(llm_server):
    server = llm_server({"rules": [{"reply": {"content": 'You said "{last_content}" {"json": 1}'}}]})
    assert answer_text(chat(server, user("bonjour"))) == 'You said "bonjour" {"json": 1}'


def test_times_limits_a_rule_and_reset_restores_it(llm_server):
    server = llm_server(
        {
            "rules": [
                {"times": 2, "reply": {"content": "limited"}},
                {"reply": {"content": "after"}},
            ]
        }
    )
    texts = [answer_text(chat(server, user("x"))) for _ in range(3)]
    assert texts == ["limited", "limited", "after"]
    assert httpx.post(f"http://127.0.0.1:{server.port}/_mock/reset").json() == {"ok": True}
    assert answer_text(chat(server, user("x"))) == "limited"


def test_times_holds_under_concurrency(llm_server):
    server = llm_server({"rules": [{"times": 3, "reply": {"content": "limited"}}, {"reply": {"content": "other"}}]})
    results: list[str] = []
    lock = threading.Lock()

    def ask() -> None:
        text = answer_text(chat(server, user("x")))
        with lock:
            results.append(text)

    threads = [threading.Thread(target=ask) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results).count("limited") == 3
    assert len(results) == 12


# --------------------------------------------------------------------------------------------
# Answers


def test_tool_calls_answer_shape(llm_server):
    server = llm_server(
        {
            "rules": [
                {
                    "reply": {
                        "reasoning": "think",
                        "tool_calls": [
                            {"name": "get_weather", "arguments": {"city": "Paris"}},
                            {"name": "get_time", "arguments": '{"tz": "UTC"}', "id": "fixed-id"},
                        ],
                    }
                }
            ]
        }
    )
    body = chat(server, user("x")).json()
    choice = body["choices"][0]
    assert body["object"] == "chat.completion"
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == "think"
    first, second = message["tool_calls"]
    assert first["id"].startswith("call_") and first["type"] == "function"
    assert json.loads(first["function"]["arguments"]) == {"city": "Paris"}
    assert second == {
        "id": "fixed-id",
        "type": "function",
        "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'},
    }
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    # Ids are unique per server, across requests too.
    again = chat(server, user("x")).json()["choices"][0]["message"]["tool_calls"][0]["id"]
    assert again != first["id"]


def test_plain_answer_finishes_with_stop(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "hi"}}]})
    body = chat(server, user("x")).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in body["choices"][0]["message"]
    assert body["model"] == "mock-model"


def test_error_status_and_malformed(llm_server):
    server = llm_server(
        {
            "rules": [
                {"when": {"any_contains": "crash"}, "reply": {"status": 500, "error": "scripted failure"}},
                {"when": {"last_contains": "garbage"}, "reply": {"malformed": True}},
            ]
        }
    )
    failed = chat(server, user("crash now"))
    assert failed.status_code == 500
    assert failed.json()["error"]["message"] == "scripted failure"
    garbage = chat(server, user("garbage"))
    assert garbage.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(garbage.text)


def test_delay_waits_and_stop_cuts_it_short(llm_server):
    server = llm_server({"rules": [{"reply": {"delay": 0.3, "content": "done"}}]})
    started = time.monotonic()
    assert answer_text(chat(server, user("x"))) == "done"
    assert time.monotonic() - started >= 0.3

    slow = MockLlmServer({"rules": [{"reply": {"delay": 30, "content": "never"}}]}).start()
    thread = threading.Thread(target=lambda: _ignore_errors(lambda: chat(slow, user("x"))), daemon=True)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    slow.stop()
    assert time.monotonic() - started < 2


def test_a_hang_up_is_recorded_by_the_number_of_the_request_that_hung_up(llm_server):
    server = llm_server({"rules": [{"reply": {"delay": 30, "content": "never"}}]})
    body = json.dumps({"model": "mock-model", "messages": user("x")}).encode()
    head = (
        f"POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    first = socket.create_connection(("127.0.0.1", server.port))
    first.sendall(head + body)
    wait_until(lambda: len(server.requests) == 1, timeout=10)
    second = socket.create_connection(("127.0.0.1", server.port))
    second.sendall(head + body)
    wait_until(lambda: len(server.requests) == 2, timeout=10)
    # the first client hangs up after the second request came in: it is request 1 that was cancelled
    first.close()
    wait_until(lambda: server.cancelled, timeout=10)
    assert server.cancelled == [1]
    second.close()


def _ignore_errors(call) -> None:
    try:
        call()
    except httpx.HTTPError:
        pass


# --------------------------------------------------------------------------------------------
# Streaming


def test_stream_chunks(llm_server):
    server = llm_server(
        {
            "rules": [
                {
                    "reply": {
                        "content": "Let me check the weather.",
                        "reasoning": "The user wants weather.",
                        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                    }
                }
            ]
        }
    )
    response = chat(server, user("x"), stream=True, stream_options={"include_usage": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = [d["content"] for d in deltas if d.get("content")]
    reasoning = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
    assert len(content) > 1 and "".join(content) == "Let me check the weather."
    assert len(reasoning) > 1 and "".join(reasoning) == "The user wants weather."
    fragments = [t for d in deltas for t in d.get("tool_calls", [])]
    assert fragments[0]["function"]["name"] == "get_weather" and fragments[0]["id"].startswith("call_")
    arguments = [f["function"]["arguments"] for f in fragments if f["function"].get("arguments")]
    assert len(arguments) >= 2 and json.loads("".join(arguments)) == {"city": "Paris"}
    assert {f["index"] for f in fragments} == {0}
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finishing] == ["tool_calls"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


def test_stream_sends_usage_only_when_asked(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "hello there"}}]})
    chunks = sse_events(chat(server, user("x"), stream=True))[:-1]
    assert all(c["choices"] for c in chunks)
    assert not any("usage" in c for c in chunks)


def test_stream_error_mid_stream(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "partial answer", "stream_error": "overloaded"}}]})
    events = sse_events(chat(server, user("x"), stream=True))
    assert events[-1]["error"]["message"] == "overloaded"
    assert "[DONE]" not in events
    assert chat(server, user("x")).status_code == 500


CUT_REPLY = {
    "content": "Partial answer that never ends",
    "reasoning": "thinking first",
    "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
}


def _deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in events if e["choices"]]


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_cut_stream_stops_where_its_rule_says_without_finishing(llm_server, include_usage: bool):
    rules = [
        {"when": {"last_contains": cut}, "reply": {**CUT_REPLY, "cut": cut}}
        for cut in ("after_text", "mid_tool_call", "before_finish")
    ]
    server = llm_server({"rules": rules})
    options = {"stream_options": {"include_usage": True}} if include_usage else {}

    def cut_at(cut: str) -> list[dict[str, Any]]:
        response = chat(server, user(cut), stream=True, **options)
        assert response.status_code == 200 and response.text.endswith("\n\n")
        events = sse_events(response)
        assert "[DONE]" not in events and not any("usage" in e for e in events)
        assert all(e["choices"][0]["finish_reason"] is None for e in events)
        return _deltas(events)

    after_text = cut_at("after_text")
    assert [d.get("content") for d in after_text if d.get("content")] == ["Partial "]
    assert "".join(d.get("reasoning_content", "") for d in after_text) == "thinking first"
    assert not any("tool_calls" in d for d in after_text)
    mid_call = cut_at("mid_tool_call")
    assert "".join(d.get("content") or "" for d in mid_call) == CUT_REPLY["content"]
    fragments = [f for d in mid_call for f in d.get("tool_calls", [])]
    assert fragments[0]["function"]["name"] == "get_weather" and len(fragments) == 2
    arguments = "".join(f["function"]["arguments"] for f in fragments)
    assert arguments and json.dumps({"city": "Paris"}).startswith(arguments) and arguments != '{"city": "Paris"}'
    before_finish = cut_at("before_finish")
    whole = "".join(f["function"]["arguments"] for d in before_finish for f in d.get("tool_calls", []))
    assert json.loads(whole) == {"city": "Paris"}


def test_a_cut_stream_can_end_in_half_an_event_and_a_cut_body_is_half_sent(llm_server):
    server = llm_server(
        {"rules": [{"reply": {"content": "one two three", "cut": "after_text", "cut_half_event": True}}]}
    )
    response = chat(server, user("x"), stream=True)
    whole, half = response.text.rsplit("\n\n", 1)
    assert half.startswith("data: {") and "\n" not in half
    with pytest.raises(json.JSONDecodeError):
        json.loads(half[len("data: ") :])
    assert [d.get("content") for d in _deltas(sse_events(httpx.Response(200, text=whole)))] == ["", "one "]
    # without streaming: the whole length announced, half of the body sent, then the close
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete|complete message body"):
        chat(server, user("x"))


# --------------------------------------------------------------------------------------------
# Endpoints


def test_recorded_requests_over_http_and_reset(llm_server):
    server = llm_server({"rules": [{"reply": {"content": "ok"}}]})
    chat(server, user("one"))
    chat(server, user("two"), stream=True)
    base = f"http://127.0.0.1:{server.port}"
    recorded = httpx.get(f"{base}/_mock/requests").json()
    assert [r["messages"][-1]["content"] for r in recorded] == ["one", "two"]
    assert recorded[1]["stream"] is True
    assert server.requests == recorded
    assert len(server.request_headers) == 2
    httpx.post(f"{base}/_mock/reset")
    assert httpx.get(f"{base}/_mock/requests").json() == []
    assert server.requests == [] and server.request_headers == []


def test_paths_models_and_unknown_routes(llm_server):
    server = llm_server(
        {"rules": [{"when": {"model": "special"}, "reply": {"content": "s"}}, {"reply": {"content": "ok"}}]}
    )
    base = f"http://127.0.0.1:{server.port}"
    unversioned = httpx.post(f"{base}/chat/completions", json={"model": "m", "messages": user("x")})
    assert answer_text(unversioned) == "ok"
    models = httpx.get(f"{server.url}/models").json()
    assert {m["id"] for m in models["data"]} == {"mock-model", "special"}
    assert httpx.get(f"{base}/nothing").status_code == 404
    assert httpx.post(f"{server.url}/chat/completions", content=b"not json").status_code == 400


# --------------------------------------------------------------------------------------------
# Script validation and the command line


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ([], "JSON object"),
        ({"rules": {}}, "rules"),
        ({"rules": [{"when": {"last_contain": "x"}, "reply": {}}]}, "when.last_contain"),
        ({"rules": [{"when": {"tool_results": "2"}, "reply": {}}]}, "tool_results must be an integer"),
        ({"rules": [{"when": {}}]}, "missing 'reply'"),
        ({"rules": [{"reply": {"contnet": "x"}}]}, "contnet"),
        ({"rules": [{"reply": {"status": 200}}]}, "400-599"),
        ({"rules": [{"reply": {"delay": -1}}]}, "delay"),
        ({"rules": [{"times": 0, "reply": {}}]}, "times"),
        ({"rules": [{"reply": {"tool_calls": [{"arguments": {}}]}}]}, "'name'"),
        ({"rules": [{"reply": {}}, {"reply": {"tool_calls": [{"name": "t", "arguments": 3}]}}]}, "rule 1"),
        ({"rules": [{"reply": {"cut": "halfway"}}]}, "reply.cut must be one of after_text"),
        ({"rules": [{"reply": {"cut_half_event": True}}]}, "cut_half_event needs reply.cut"),
        ({"rules": [{"reply": {"cut": "after_text", "cut_half_event": 1}}]}, "cut_half_event must be true"),
        ({"rules": [{"reply": {"cut": "after_text", "malformed": True}}]}, "cannot be combined with reply.malformed"),
        ({"rules": [{"reply": {"content": "x", "cut": "mid_tool_call"}}]}, "mid_tool_call needs reply.tool_calls"),
    ],
)
def test_invalid_scripts_are_refused(script, message):
    with pytest.raises(ValueError, match=message):
        validate_script(script)


def test_load_script(tmp_path: Path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"rules": [{"reply": {"content": "hi"}}]}))
    assert load_script(good) == {"rules": [{"reply": {"content": "hi"}}]}
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    with pytest.raises(ValueError, match="broken.json is not valid JSON"):
        load_script(broken)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"rules": [{"reply": {"bogus": 1}}]}))
    with pytest.raises(ValueError, match=r"invalid.json: rule 0: unknown reply key\(s\) bogus"):
        load_script(invalid)
    with pytest.raises(ValueError, match="cannot read"):
        load_script(tmp_path / "missing.json")


def test_main_reports_a_bad_script(tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert mockllm.main(["--script", str(bad), "--port", "0"]) == 2
    assert "mock-llm script" in capsys.readouterr().err


def test_example_script_from_the_docs_is_valid():
    docstring = mockllm.__doc__ or ""
    start = docstring.index('{"rules": [')
    end = docstring.rindex("]}", start, docstring.index("For each request")) + 2
    validate_script(json.loads(docstring[start:end]))


def test_command_line_serves_a_script(tmp_path: Path, processes: Processes):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"reply": {"content": "from the command line"}}]}))
    process = processes.popen(
        [sys.executable, "-m", "devtools.mockllm", "--script", str(script), "--port", "0"],
        cwd=Path(__file__).resolve().parents[2],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"listening on (http://\S+/v1)", line)
        assert match, line
        body = {"model": "m", "messages": user("x")}
        response = httpx.post(f"{match.group(1)}/chat/completions", json=body)
        assert answer_text(response) == "from the command line"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_demo_script_is_valid():
    demo = Path(__file__).resolve().parents[2] / "examples" / "mock-llm.json"
    if not demo.exists():
        pytest.skip("no examples/mock-llm.json in this tree")
    assert load_script(demo)["rules"]
