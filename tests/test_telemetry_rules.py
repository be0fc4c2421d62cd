"""The tracing rules in process, with the OpenTelemetry SDK's in-memory exporter
(docs/observability.md §1): when traces are on, what a deferred call's span hands on, the
content opt-in, the ids on log lines and the redaction of the instrumentations' texts."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentfiles.session_document import CallState, TrackedCall
from agentsite.tracing import _redact
from foundation import telemetry
from foundation.logging import JsonFormatter
from sessions_app import tracing

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # the global provider can be set once per process: every test of this file shares it
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "agents"}, False),
    ],
)
def test_traces_are_off_unless_an_exporter_is_asked_for(environ: dict[str, str], on: bool) -> None:
    assert telemetry.wanted(environ) is on


def _entry(name: str = "bash_ask") -> TrackedCall:
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": '{"question": "SECRET-ARG"}'}}
    return TrackedCall.new(call, CallState.DEFERRED, {"tag": "defer", "reason": "a human"}, continuation="tok")


def test_a_deferred_calls_span_ends_at_once_and_its_traceparent_links_and_parents(spans: InMemorySpanExporter) -> None:
    traceparent = tracing.tool_span_closed(None, _entry(), "deferred")
    [span] = spans.get_finished_spans()
    assert span.name == "execute_tool bash_ask"
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "bash_ask",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "agents.tool.kind": "unknown",
        "agents.tool.policy": "defer",
        "agents.tool.outcome": "deferred",
    }
    assert traceparent.startswith(f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-")
    [link] = telemetry.links_to(traceparent, "", "not-a-traceparent")
    assert link.context.span_id == span.context.span_id
    token = telemetry.attach_parent(traceparent)
    try:
        with telemetry.tracer.start_as_current_span("invoke_agent kid") as child:
            assert child.get_span_context().trace_id == span.context.trace_id
    finally:
        telemetry.detach(token)
    assert spans.get_finished_spans()[-1].parent.span_id == span.context.span_id
    assert telemetry.attach_parent("") is None


def _agent() -> Any:
    return SimpleNamespace(slug="boss", loaded=SimpleNamespace(spec=SimpleNamespace(modelName="gpt-test")))


def _answer() -> Any:
    raw = {"id": "chatcmpl-1", "model": "gpt-test-2", "choices": [{"finish_reason": "stop"}]}
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    return SimpleNamespace(raw_response=raw, usage=usage, text="COMPLETION-TEXT", tool_calls=[])


@pytest.mark.parametrize("opt_in", [False, True])
def test_chat_spans_carry_contents_only_with_the_opt_in(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, opt_in: bool
) -> None:
    if opt_in:
        monkeypatch.setenv(telemetry.CAPTURE_CONTENT_VARIABLE, "true")
    else:
        monkeypatch.delenv(telemetry.CAPTURE_CONTENT_VARIABLE, raising=False)
    pieces: list[str] = []
    messages = [{"role": "user", "content": "PROMPT-TEXT"}]
    with tracing.chat_span(_agent(), messages, pieces.append) as chat:
        assert chat.on_text_delta is not None
        chat.on_text_delta("COMPLETION-")
        chat.answered(_answer())
    [span] = spans.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert pieces == ["COMPLETION-"]
    assert span.name == "chat gpt-test" and span.kind is trace.SpanKind.CLIENT
    assert attributes["gen_ai.request.model"] == "gpt-test" and attributes["gen_ai.response.model"] == "gpt-test-2"
    assert attributes["gen_ai.usage.input_tokens"] == 11 and attributes["gen_ai.usage.output_tokens"] == 7
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["gen_ai.server.time_to_first_token"] >= 0
    text = json.dumps({key: str(value) for key, value in attributes.items()})
    assert ("PROMPT-TEXT" in text) is opt_in
    assert ("COMPLETION-TEXT" in text) is opt_in


def test_a_chat_without_streaming_has_no_time_to_first_token(spans: InMemorySpanExporter) -> None:
    with tracing.chat_span(_agent(), [], None) as chat:
        assert chat.on_text_delta is None
        chat.answered(SimpleNamespace(raw_response="not an object", usage=None, text="", tool_calls=[]))
    [span] = spans.get_finished_spans()
    assert "gen_ai.server.time_to_first_token" not in (span.attributes or {})
    assert "gen_ai.usage.input_tokens" not in (span.attributes or {})


def test_log_lines_carry_the_ids_of_the_current_span(spans: InMemorySpanExporter) -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("sessions.runner", logging.INFO, __file__, 1, "run started", None, None)
    assert "trace_id" not in json.loads(formatter.format(record))
    with telemetry.tracer.start_as_current_span("invoke_agent boss") as span:
        line = json.loads(formatter.format(record))
    context = span.get_span_context()
    assert line["trace_id"] == f"{context.trace_id:032x}" and line["span_id"] == f"{context.span_id:016x}"


def test_the_instrumentations_texts_lose_tokens_and_credentials(spans: InMemorySpanExporter) -> None:
    with telemetry.tracer.start_as_current_span("POST") as span:
        span.set_attribute("http.target", "/v1/continuations/0a973168-7611-423a-a401-f907bdd6fad5")
        span.set_attribute("url.full", "https://user:pass-123@mcp.example/mcp?key=query-key-456")
        span.set_attribute("http.status_code", 200)
        _redact(span)
    attributes = dict(spans.get_finished_spans()[0].attributes or {})
    assert attributes["http.target"] == "/v1/continuations/***"
    assert "pass-123" not in attributes["url.full"] and "query-key-456" not in attributes["url.full"]
    assert attributes["http.status_code"] == 200
