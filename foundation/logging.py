"""JSON log lines on stderr: one object per line with ``ts``, ``kind`` and ``session_id``, and
``trace_id`` and ``span_id`` when a traced span is current (docs/observability.md §3).

Prompts, LLM payloads, headers, query strings and keys are never passed to the logger, so
they never reach this formatter (docs/api.md §14.3). URLs do (an MCP server's, a git source's,
one quoted by a library's exception), and so do paths holding a continuation token: every text
of a line, its message, its fields and its traceback, goes through
:func:`foundation.redaction.redact_for_log` here, whoever logged it, so that no credential a URL
or a path carries is written.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from foundation.redaction import redact_for_log
from foundation.telemetry import current_ids

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _without_urls(value: Any) -> Any:
    """``value`` (a log line's field) with the credentials of its texts redacted, at any depth."""
    if isinstance(value, str):
        return redact_for_log(value)
    if isinstance(value, dict):
        return {key: _without_urls(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_without_urls(item) for item in value]
    return value


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object: ``ts``, ``level``, ``kind``, ``message`` and extras."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the JSON line for ``record``; extra fields given with ``extra=`` are kept."""
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "kind": getattr(record, "kind", record.name),
            "message": record.getMessage(),
        }
        ids = current_ids()
        if ids is not None:
            # the line is formatted in the thread that logged it, where its span is current
            line["trace_id"], line["span_id"] = ids
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if "request" in line:
            # Django adds the request to its error records; its text would carry the query string,
            # where access tokens travel (docs/api.md §10.2): keep the method and path only
            request = line["request"]
            line["request"] = f"{getattr(request, 'method', '')} {getattr(request, 'path', '')}".strip()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(_without_urls(line), default=lambda value: redact_for_log(str(value)))


class WithoutTraceback(logging.Filter):
    """Keeps a record but drops its traceback and makes it a warning.

    For refusals any client can provoke at will, such as a request whose ``Host`` is not allowed
    (answered 400): one line says what happened, and a flood of such requests cannot fill the
    log with stack traces.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Strip ``record`` of its traceback; always keep it (returns ``True``)."""
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.WARNING
        record.levelname = "WARNING"
        return True
