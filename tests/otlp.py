"""A small OTLP/HTTP trace receiver for the tests: the exporters' protobuf bodies decoded with
opentelemetry-proto's messages, the spans kept as plain dicts."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


class OtlpReceiver:
    """``POST /v1/traces`` on 127.0.0.1 (a port the kernel picks); :attr:`spans` grows as
    batches come. Each span: ``name``, ``trace_id``, ``span_id``, ``parent_span_id`` (hex, ``""``
    for a root), ``attributes``, ``links`` (``[{"trace_id", "span_id", "attributes"}]``),
    ``service`` and ``status`` (the status code's number)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, body: bytes) -> None:
        """Decode one export request and keep its spans."""
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append({
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "links": [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                             "attributes": {a.key: _value(a.value) for a in link.attributes}}
                            for link in span.links
                        ],
                        "service": resource.get("service.name"),
                        "status": span.status.code,
                    })
        with self.lock:
            self.bodies.append(body)
            self.spans.extend(found)

    def named(self, prefix: str) -> list[dict[str, Any]]:
        """The spans received so far whose name starts with ``prefix``."""
        with self.lock:
            return [span for span in self.spans if span["name"].startswith(prefix)]

    def stop(self) -> None:
        """Stop listening."""
        self.server.shutdown()
        self.server.server_close()
