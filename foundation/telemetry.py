"""Traces in OpenTelemetry's GenAI conventions: the tracer, the switches and the W3C hand-offs
(docs/observability.md §1).

Until :func:`agentsite.tracing.configure` installs an SDK provider (only when an ``OTEL_*``
variable asks for an exporter), :data:`tracer` is the API's proxy: its spans are non-recording
objects that cost a function call, and nothing is exported. The span names, attribute names and
the content opt-in are those of the conventions; no attribute ever holds a key, a token or a
parameter value (docs/observability.md §1.3).
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext

#: The project's tracer (a proxy until a provider is installed).
tracer = trace.get_tracer("agents-server")

#: The conventions' opt-in for prompt and completion contents on spans.
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def wanted(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (docs/observability.md §1.1).

    Traces are on when ``OTEL_TRACES_EXPORTER`` names ``otlp``, or an OTLP endpoint is set and
    ``OTEL_TRACES_EXPORTER`` is not ``none``; ``OTEL_SDK_DISABLED=true`` turns them off whatever
    else is set.

    Args:
        environ: the variables to read (the process's by default).
    Returns:
        ``True`` when an exporter is asked for.
    """
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()}
    if "otlp" in exporters:
        return True
    if "none" in exporters:
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def capture_content() -> bool:
    """Whether the operator opted in to prompt and completion contents on spans (the
    conventions' ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``); off by default."""
    return os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() == "true"


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the span current in this thread, in hex, or ``None`` when
    there is none that records (tracing off, or outside a run and a request)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def traceparent_of(span: Span) -> str:
    """The W3C ``traceparent`` of ``span`` (``""`` for a span without a valid context, as with
    tracing off): what a continuation row keeps so that its completion can link to it."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def current_traceparent() -> str:
    """The ``traceparent`` of the span current in this thread (``""`` when none records)."""
    return traceparent_of(trace.get_current_span())


def span_context_of(traceparent: str) -> SpanContext | None:
    """The span context a ``traceparent`` names, or ``None`` for an empty or malformed one."""
    if not traceparent:
        return None
    context = trace.get_current_span(propagate.extract({"traceparent": traceparent})).get_span_context()
    return context if context.is_valid else None


def links_to(*traceparents: str) -> list[Link]:
    """Span links to the spans the given ``traceparent`` values name (the empty ones skipped)."""
    return [Link(context) for value in traceparents if (context := span_context_of(value)) is not None]


def attach_parent(traceparent: str) -> Any:
    """Make the span ``traceparent`` names the current parent of this thread; returns the token
    :func:`detach` takes back, or ``None`` when there is nothing to attach."""
    context = span_context_of(traceparent)
    if context is None:
        return None
    return otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))


def detach(token: Any) -> None:
    """Undo :func:`attach_parent` (a ``None`` token is ignored)."""
    if token is not None:
        otel_context.detach(token)
