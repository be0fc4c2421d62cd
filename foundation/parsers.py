"""Request bodies are JSON whatever the Content-Type says.

The README's walkthrough sends bodies with curl and no Content-Type, so they arrive labelled as
form data: :class:`AnyContentNegotiation` hands every body to :class:`AnyContentJSONParser`, while
the OpenAPI document says ``application/json``. Kept apart from the views: DRF imports these
classes while it builds its own view classes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import IO, Any

from django.conf import settings
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from foundation.errors import BadRequest, PayloadTooLarge


class AnyContentJSONParser(BaseParser):
    """Parse every request body as JSON; an empty body parses to ``None`` (defaults)."""

    media_type = "application/json"

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Any = None) -> Any:
        """Return the decoded JSON value, ``None`` for an empty body.

        Raises:
            ApiError: 400 ``bad_request`` for malformed JSON, 413 ``payload_too_large`` over the
                body limit (``AGENTS_MAX_BODY_BYTES``).
        """
        if stream is None:
            return None
        limit = settings.AGENTS["MAX_BODY_BYTES"]
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise PayloadTooLarge(limit)
        if not raw.strip():
            return None
        try:
            value = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise BadRequest(f"request body is not valid JSON: {error}") from error
        except (ValueError, RecursionError) as error:
            # integers beyond Python's digit limit, or nesting deeper than the parser goes
            raise BadRequest(f"request body is not acceptable JSON: {error}") from error
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise BadRequest(
                "request body contains a lone surrogate (\\ud800-\\udfff), which is not Unicode text"
            ) from error
        except RecursionError as error:
            raise BadRequest("request body is nested too deeply") from error
        return value


class AnyContentNegotiation(DefaultContentNegotiation):
    """Every body goes to the first parser (the JSON one), whatever its ``Content-Type``."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        """The first parser of the view."""
        return next(iter(parsers), None)
