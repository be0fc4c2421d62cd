"""The spans and metrics of a run in OpenTelemetry's GenAI conventions (docs/observability.md §1,
§2): ``invoke_agent`` per run, ``chat`` per model call, ``execute_tool`` per tool call.

Attributes name the agent, the session, the model, the tool and the outcome, and count tokens; a
prompt or a completion is recorded only with the conventions' opt-in
(:func:`foundation.telemetry.capture_content`), and never a key, a token, a parameter value or
a tool's arguments and result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from agentfiles.session_document import TrackedCall
from agents_app.runtime import RuntimeAgent
from foundation import metrics
from foundation.telemetry import capture_content, links_to, traceparent_of, tracer

#: ``gen_ai.provider.name``: every model is reached over the OpenAI-compatible API.
PROVIDER = "openai"


def tool_kind(tool: Any) -> str:
    """The kind of a tool as the metrics and spans name it: its toolbox's package (``bash``,
    ``mcp``, ``builtin``, ``openapi``, ``postgrest``, ``skills``, ``subagent``...), ``unknown``
    for a name no tool answers to."""
    if tool is None:
        return "unknown"
    parts = type(tool).__module__.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


@contextmanager
def run_span(agent_slug: str, session_id: str, *, links: tuple[str, ...] = ()) -> Iterator[Span]:
    """The ``invoke_agent`` span of one run, current while the body runs.

    Args:
        agent_slug: ``gen_ai.agent.name``.
        session_id: ``gen_ai.conversation.id``.
        links: ``traceparent`` values of the deferred calls whose completion resumed the run.
    Yields:
        The span (non-recording when tracing is off).
    """
    metrics.RUNS_STARTED.labels(agent=agent_slug).inc()
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_slug,
        "gen_ai.conversation.id": session_id,
        "gen_ai.provider.name": PROVIDER,
    }
    with tracer.start_as_current_span(
        f"invoke_agent {agent_slug}", kind=SpanKind.INTERNAL, attributes=attributes, links=links_to(*links)
    ) as span:
        yield span


def run_finished(span: Span, agent_slug: str, outcome: str, detail: str | None = None) -> None:
    """Count a run's end by ``outcome`` (the status it stored, or ``handed_back`` or ``lease_lost``)
    and say it on its span; a failure's ``detail`` (already redacted) becomes the span's status."""
    metrics.RUNS_FINISHED.labels(agent=agent_slug, outcome=outcome).inc()
    span.set_attribute("agents.run.outcome", outcome)
    if outcome == "failed":
        span.set_status(Status(StatusCode.ERROR, detail or "failed"))


class _Chat:
    """The ``chat`` span of one model call as the call goes: the first streamed piece's time and
    the answer's usage, model and finish reason."""

    def __init__(self, span: Span, agent_slug: str, on_text_delta: Callable[[str], None] | None) -> None:
        self.span = span
        self.agent_slug = agent_slug
        self.started = time.monotonic()
        self.first: float | None = None
        self._forward = on_text_delta
        self.on_text_delta = self._delta if on_text_delta is not None else None

    def _delta(self, text: str) -> None:
        if self.first is None:
            self.first = time.monotonic() - self.started
            self.span.set_attribute("gen_ai.server.time_to_first_token", self.first)
        if self._forward is not None:
            self._forward(text)

    def answered(self, answer: Any) -> None:
        """Record the answer's model, finish reasons and token counts (``answer`` is an
        ``agents_app.llm.LlmAnswer``); the completion's text only with the content opt-in."""
        raw = answer.raw_response if isinstance(answer.raw_response, dict) else {}
        if isinstance(raw.get("id"), str):
            self.span.set_attribute("gen_ai.response.id", raw["id"])
        if isinstance(raw.get("model"), str):
            self.span.set_attribute("gen_ai.response.model", raw["model"])
        choices = raw.get("choices")
        choices = choices if isinstance(choices, list) else []
        reasons = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
        reasons = [reason for reason in reasons if isinstance(reason, str)]
        if reasons:
            self.span.set_attribute("gen_ai.response.finish_reasons", reasons)
        usage = answer.usage or {}
        for key, attribute, direction in (
            ("prompt_tokens", "gen_ai.usage.input_tokens", "input"),
            ("completion_tokens", "gen_ai.usage.output_tokens", "output"),
        ):
            count = usage.get(key)
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                self.span.set_attribute(attribute, count)
                metrics.TOKENS.labels(agent=self.agent_slug, direction=direction).inc(count)
        if capture_content():
            completion = {"text": answer.text, "tool_calls": answer.tool_calls}
            self.span.set_attribute("gen_ai.output.messages", json.dumps(completion, default=str))


@contextmanager
def chat_span(agent: RuntimeAgent, messages: list[Any], on_text_delta: Callable[[str], None] | None) -> Iterator[_Chat]:
    """The ``chat`` span of one model call; its duration is the model-latency histogram's
    observation. ``messages`` go on the span only with the content opt-in."""
    spec = agent.loaded.spec
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": spec.modelName,
        "gen_ai.agent.name": agent.slug,
    }
    if capture_content():
        attributes["gen_ai.input.messages"] = json.dumps(messages, default=str)
    started = time.monotonic()
    with tracer.start_as_current_span(f"chat {spec.modelName}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        try:
            yield _Chat(span, agent.slug, on_text_delta)
        finally:
            metrics.MODEL_SECONDS.labels(agent=agent.slug).observe(time.monotonic() - started)


def _tool_attributes(tool: Any, entry: TrackedCall) -> dict[str, Any]:
    disposition = entry.policy if isinstance(entry.policy, dict) else {}
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": entry.name,
        "gen_ai.tool.call.id": entry.provider_id,
        "gen_ai.tool.type": "function",
        "agents.tool.kind": tool_kind(tool),
        "agents.tool.policy": str(disposition.get("tag") or ""),
    }


class _ToolSpan:
    """The ``execute_tool`` span of an inline call; :meth:`ended` records its outcome."""

    def __init__(self, span: Span, kind: str) -> None:
        self.span = span
        self.kind = kind
        self.outcome = "failed"

    def ended(self, outcome: str) -> None:
        """The call's outcome: ``completed``, ``failed`` or ``detached``."""
        self.outcome = outcome
        self.span.set_attribute("agents.tool.outcome", outcome)
        if outcome == "failed":
            self.span.set_status(Status(StatusCode.ERROR, "the tool call failed"))


@contextmanager
def tool_span(tool: Any, entry: TrackedCall) -> Iterator[_ToolSpan]:
    """The ``execute_tool`` span of a call run in the step, counted by kind and outcome with its
    latency."""
    kind = tool_kind(tool)
    started = time.monotonic()
    with tracer.start_as_current_span(
        f"execute_tool {entry.name}", kind=SpanKind.INTERNAL, attributes=_tool_attributes(tool, entry)
    ) as span:
        holder = _ToolSpan(span, kind)
        try:
            yield holder
        finally:
            metrics.TOOL_CALLS.labels(kind=kind, outcome=holder.outcome).inc()
            metrics.TOOL_SECONDS.labels(kind=kind).observe(time.monotonic() - started)


def tool_span_closed(tool: Any, entry: TrackedCall, outcome: str) -> str:
    """An ``execute_tool`` span that ends as it starts: a call deferred (``deferred``), given to a
    helper (``child``) or started in the background (``background``).

    Returns:
        The span's ``traceparent`` (``""`` with tracing off), which the continuation keeps: its
        completion links to it, and a helper's runs are its children.
    """
    kind = tool_kind(tool)
    metrics.TOOL_CALLS.labels(kind=kind, outcome=outcome).inc()
    attributes = {**_tool_attributes(tool, entry), "agents.tool.outcome": outcome}
    name = f"execute_tool {entry.name}"
    with tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as span:
        return traceparent_of(span)
