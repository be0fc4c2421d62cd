"""Calls of the HTTP toolboxes (docs/tools.md §9.3): one request, one complete answer.

Every request carries the toolbox's fixed ``Headers``, its ``Token`` as a bearer token and its
``Secrets``; a ``ParamSource`` secret is read from the call's parameters at each request, and a
call whose parameter has no value fails without a request. Nothing secret is logged: the log line
of a call names the tool, the method, the status and the time taken, not the URL (its query may
hold a secret) nor any header.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from foundation.redaction import redact_urls

from ..base import ToolContext, ToolResult
from .config import HttpToolboxConfig
from .paths import RequestOutsideBase, checked_url

log = logging.getLogger("tools.http")

#: Seconds a call may take when its context gives no limit.
DEFAULT_TIMEOUT = 600.0
#: Seconds to open the connection.
CONNECT_TIMEOUT = 10.0
_MEDIA_PREFIXES = ("image/", "audio/", "video/", "application/pdf", "application/octet-stream")


_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


def http_client() -> httpx.Client:
    """This process's client for the HTTP toolboxes: building one loads the TLS certificates
    (about 150 ms), and a shared one keeps connections open between calls. One per process id,
    since a forked worker must not share its parent's sockets."""
    pid = os.getpid()
    with _clients_lock:
        client = _clients.get(pid)
        if client is None:
            client = _clients[pid] = httpx.Client(follow_redirects=False)
        return client


class UnboundSecret(Exception):
    """A ``ParamSource`` secret's parameter has no value for this call."""


def load_time_auth(config: HttpToolboxConfig) -> tuple[dict[str, str], dict[str, str]]:
    """``(headers, query)`` for fetching the document: the fixed headers, the token, and the
    secrets resolved at load (a ``ParamSource`` secret has no value before a session exists)."""
    headers = dict(config.headers)
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    query: dict[str, str] = {}
    for secret in config.secrets:
        if secret.value is not None:
            (headers if secret.kind == "Header" else query)[secret.name] = secret.render(secret.value)
    return headers, query


def request_auth(config: HttpToolboxConfig, ctx: ToolContext) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``(headers, query)`` of one call: :func:`load_time_auth` plus the parameter secrets.

    Raises:
        UnboundSecret: naming the parameter, never a value.
    """
    headers, fixed_query = load_time_auth(config)
    query = list(fixed_query.items())
    for secret in config.secrets:
        if secret.param is None:
            continue
        given = ctx.params.get(secret.param)
        if given is None or given.value is None:
            raise UnboundSecret(secret.param)
        value = given.value if isinstance(given.value, str) else json.dumps(given.value)
        if secret.kind == "Header":
            headers[secret.name] = secret.render(value)
        else:
            query.append((secret.name, secret.render(value)))
    return headers, query


def send(
    config: HttpToolboxConfig,
    ctx: ToolContext,
    *,
    tool: str,
    method: str,
    path: str,
    query: Sequence[tuple[str, str]] = (),
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    has_body: bool = False,
) -> ToolResult:
    """Make one request and turn the answer into a tool result.

    Args:
        config: the toolbox.
        ctx: the call's context (its ``timeout`` and ``params``).
        tool: the tool's wire name, for messages and the log.
        method: the HTTP method.
        path: the path after ``BaseUrl``, its values already substituted and quoted.
        query: the query parameters, in order (repeated names allowed).
        headers: headers of the call itself (``Prefer``, header parameters).
        body: the JSON body, sent when ``has_body``.
    Returns:
        a JSON answer as a ``json`` result, an image, audio, video or PDF as a media result, any
        other answer as text (``"<status> <reason>"`` when empty, a redirect included: none is
        followed); an answer of 400 or more as an error whose text ends with the body exactly as
        received; a request that failed (connection, timeout) as an error saying so; a URL that
        would leave ``BaseUrl`` (:func:`~tools_app.openapi.paths.checked_url`) as an error and no
        request.
    """
    try:
        auth_headers, auth_query = request_auth(config, ctx)
    except UnboundSecret as missing:
        log.warning(
            "secret parameter without value",
            extra={"kind": "tools.param_unbound", "tool": tool, "param": str(missing)},
        )
        return ToolResult.error(f"Error: tool {tool} is unavailable")
    try:
        url = checked_url(config.base_url, config.base_url + path + query_string([*query, *auth_query]))
    except RequestOutsideBase as refused:
        log.warning(
            "http tool request refused",
            extra={"kind": "tools.http_refused", "tool": tool, "method": method, "reason": str(refused)},
        )
        return ToolResult.error(f"Error: {tool}: {refused}; nothing was sent")
    timeout = httpx.Timeout(ctx.timeout or DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT)
    started = time.monotonic()
    try:
        answer = http_client().request(
            method,
            url,
            headers={**(headers or {}), **auth_headers},
            json=body if has_body else None,
            timeout=timeout,
            # a redirect would carry the token and secrets elsewhere: the answer is the 3xx itself
            follow_redirects=False,
        )
    except httpx.HTTPError as error:
        log.warning(
            "http tool call failed",
            extra={"kind": "tools.http_failed", "tool": tool, "method": method, "reason": type(error).__name__},
        )
        # an HTTP client's error may quote the URL, whose query holds the toolbox's key
        return ToolResult.error(redact_urls(f"Error: {tool}: the request failed: {type(error).__name__}: {error}"))
    log.info(
        "http tool call",
        extra={
            "kind": "tools.http_call",
            "tool": tool,
            "method": method,
            "status": answer.status_code,
            "elapsed_ms": round((time.monotonic() - started) * 1000),
        },
    )
    return answer_result(tool, answer)


def query_string(pairs: Sequence[tuple[str, str]]) -> str:
    """``?a=1&b=2`` (empty without pairs), percent-encoded except for the characters PostgREST's
    grammar is written with (``, ( ) * : .``), so that a URL reads as its documentation shows it."""
    if not pairs:
        return ""
    return "?" + urlencode(list(pairs), safe=",()*:.", quote_via=quote)


def answer_result(tool: str, answer: httpx.Response) -> ToolResult:
    """The tool result of an HTTP answer (see :func:`send`)."""
    if answer.status_code >= 400:
        return ToolResult.error(f"Error: {tool}: HTTP {answer.status_code} {answer.reason_phrase}\n{answer.text}")
    content_type = answer.headers.get("content-type", "").split(";")[0].strip().lower()
    if not answer.content:
        return ToolResult(f"{answer.status_code} {answer.reason_phrase}")
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return ToolResult({"type": "json", "content": answer.json()})
        except ValueError:
            return ToolResult(answer.text)
    if content_type.startswith(_MEDIA_PREFIXES):
        return ToolResult(
            {"type": "media", "mimeType": content_type, "base64Data": base64.b64encode(answer.content).decode()}
        )
    return ToolResult(answer.text)
