"""Every answer the integration tests receive is checked against ``/openapi.json`` (openapi-core).

:func:`check_response` is installed as an httpx response hook on the clients of the test
harness: an answer whose status is not documented for its operation, or whose body does not match
the documented schema, fails the test that received it, at the call. Paths and methods the
document does not have (a test's deliberately unknown path) are not operations and are skipped;
event streams are checked by status and content type only, their bodies never end.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from functools import cache
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from openapi_core import OpenAPI
from openapi_core.datatypes import RequestParameters
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from werkzeug.datastructures import Headers, ImmutableMultiDict

#: Operations checked so far in this test process, ``"METHOD /template status"`` -> count.
CHECKED: Counter[str] = Counter()
_lock = threading.Lock()


@cache
def openapi() -> OpenAPI:
    """The server's document, as every server of the tests generates it."""
    from foundation.openapi import openapi_document

    return OpenAPI.from_dict(json.loads(json.dumps(openapi_document())))


class _Request:
    """An httpx request as openapi-core reads one."""

    def __init__(self, request: httpx.Request) -> None:
        url = urlsplit(str(request.url))
        self.host_url = f"{url.scheme}://{url.netloc}"
        self.path = url.path
        self.method = request.method.lower()
        try:
            self.body = request.content or None
        except httpx.RequestNotRead:
            # a streamed (chunked) request body: already sent, and only the answer is checked
            self.body = None
        self.content_type = request.headers.get("Content-Type", "application/json")
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(parse_qs(url.query)),
            header=Headers(dict(request.headers)),
            cookie=ImmutableMultiDict(),
        )


class _Response:
    """An httpx response as openapi-core reads one."""

    def __init__(self, response: httpx.Response, data: bytes) -> None:
        self.status_code = response.status_code
        self.content_type = response.headers.get("Content-Type", "")
        self.headers = Headers(dict(response.headers))
        self.data = data


class ContractError(AssertionError):
    """An answer that the OpenAPI document does not describe."""


def check_response(response: httpx.Response) -> None:
    """Check one answer against the document; raise :class:`ContractError` on a mismatch."""
    request = _Request(response.request)
    if not request.path.startswith("/v1/") and request.path not in ("/healthz", "/mcp"):
        return
    spec = openapi()
    try:
        found = spec.request_validator.path_finder.find(request.method, request.host_url + request.path)
    except (PathNotFound, OperationNotFound):
        return
    template = found.path.parts[-1]
    content_type = response.headers.get("Content-Type", "")
    if content_type.startswith("text/event-stream"):
        data = b""
        documented = found.operation / "responses" / str(response.status_code)
        if not documented.exists():
            raise ContractError(
                f"{request.method.upper()} {request.path}: status {response.status_code} not documented"
            )
    else:
        data = response.read()
        try:
            spec.validate_response(request, _Response(response, data))
        except Exception as error:  # openapi-core raises several families; any of them is a mismatch
            raise ContractError(
                f"{request.method.upper()} {request.path} answered {response.status_code} outside /openapi.json:"
                f" {str(getattr(error, '__cause__', None) or error)[:1500]}\n{data[:1500]!r}"
            ) from error
    with _lock:
        CHECKED[f"{request.method.upper()} {template} {response.status_code}"] += 1


def hooks() -> dict[str, list[Any]]:
    """The ``event_hooks`` of a checked httpx client."""
    return {"response": [check_response]}
