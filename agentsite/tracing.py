"""Turning traces and the metrics listener on in a process (docs/observability.md §1.1, §2.2).

Traces: when the standard ``OTEL_*`` variables ask for an exporter
(:func:`foundation.telemetry.wanted`), an SDK tracer provider exports batches over OTLP/HTTP
(the exporter reads ``OTEL_EXPORTER_OTLP_*`` itself; the resource reads ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES``), and the Django, Celery and httpx instrumentations carry the
W3C trace context across the HTTP request, the task and the outgoing requests. Otherwise nothing
is installed and the project's spans stay the API's no-op ones.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from foundation import telemetry
from foundation.redaction import redact_for_log

log = logging.getLogger("agentsite.tracing")

_configured = False


def configure(command: str) -> bool:
    """Install tracing for this process once, when the ``OTEL_*`` variables ask for it.

    Args:
        command: the CLI command (``serve``, ``worker``...), the default ``service.name`` suffix.
    Returns:
        Whether traces are exported from this process.
    """
    global _configured
    if _configured or not telemetry.wanted():
        return _configured
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME") or f"agents-{command}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    # the request's span is the parent of the run it starts
    DjangoInstrumentor().instrument(is_sql_commentor_enabled=False, response_hook=_redacted_hook)
    CeleryInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument(response_hook=_redacted_hook, async_response_hook=_redacted_async_hook)
    _configured = True
    log.info("traces exported", extra={"kind": "tracing.on", "service": service})
    return True



def _redact(span: Any) -> None:
    """Redact the texts an instrumentation put on ``span``: a path's continuation token (whoever
    holds it may complete the call) and a URL's credentials, as log lines have them
    (:func:`foundation.redaction.redact_for_log`)."""
    for key, value in dict(getattr(span, "attributes", None) or {}).items():
        if isinstance(value, str) and (redacted := redact_for_log(value)) != value:
            span.set_attribute(key, redacted)


def _redacted_hook(span: Any, request: Any, response: Any) -> None:
    _redact(span)


async def _redacted_async_hook(span: Any, request: Any, response: Any) -> None:
    _redact(span)
