"""One HTTP attempt at a webhook URL, under the outbound rules (docs/webhooks.md §7).

Only ``http`` and ``https``; the host is resolved once and, with the SSRF rule on
(``AGENTS_WEBHOOK_BLOCK_PRIVATE``), every address it resolves to must be a public one; the
request then goes to the checked address itself (the name stays in ``Host`` and in TLS's server
name), so a second resolution cannot point it elsewhere. Redirects are never followed, every
phase has a timeout, and only the first bytes of an answer are read. Nothing here logs a header
or a body: the signature and the payload stay out of the logs.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

from foundation.errors import WebhookUrlRefused

#: Bytes of an answer kept in the delivery log; the rest is never read.
RESPONSE_HEAD_BYTES = 1024


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``) and what to call the host."""

    url: str
    host: str
    address: str


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: ``status`` (``None`` when no answer came), the latency in
    milliseconds, the first bytes of the answer, ``error`` when it failed before an answer, and
    ``refused`` when the outbound rules refused the URL (nothing was sent)."""

    status: int | None
    latency_ms: int
    head: str
    error: str | None
    refused: bool = False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def check_url(url: str, *, block_private: bool | None = None) -> Target:
    """Check ``url`` against the outbound rules and resolve it.

    Args:
        url: the subscription's URL.
        block_private: refuse loopback, private, link-local and other non-public addresses;
            ``None`` reads ``AGENTS_WEBHOOK_BLOCK_PRIVATE``.
    Returns:
        The target, with the first address the name resolved to.
    Raises:
        WebhookUrlRefused: not ``http``/``https``, no host, credentials in the URL, a name that
            does not resolve, or (rule on) any address that is not public.
    """
    if block_private is None:
        block_private = settings.AGENTS["WEBHOOK_BLOCK_PRIVATE"]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise WebhookUrlRefused(f"not a URL ({error})") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookUrlRefused("only http and https URLs are allowed")
    if not parts.hostname:
        raise WebhookUrlRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlRefused("the URL may not carry a user name or password")
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise WebhookUrlRefused(f"host {parts.hostname!r} does not resolve ({error})") from None
    addresses = [str(info[4][0]) for info in infos]
    if block_private:
        for address in addresses:
            if not _public(address):
                raise WebhookUrlRefused(f"host {parts.hostname!r} resolves to non-public address {address}")
    return Target(url=url, host=parts.hostname, address=addresses[0])


def _pinned_url(target: Target) -> str:
    parts = urlsplit(target.url)
    address = f"[{target.address}]" if ":" in target.address else target.address
    netloc = f"{address}:{parts.port}" if parts.port else address
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def send(url: str, body: str, headers: dict[str, str]) -> Outcome:
    """POST ``body`` to ``url`` once, under the outbound rules.

    Args:
        url: the subscription's URL (checked again: a name may resolve elsewhere now).
        body: the JSON payload, sent as UTF-8.
        headers: the signature headers.
    Returns:
        The outcome; a refused URL, a timeout or a connection error is an outcome with ``error``
        (never raised), a redirect an outcome with its 3xx status.
    """
    started = time.monotonic()
    try:
        target = check_url(url)
    except WebhookUrlRefused as refused:
        return Outcome(None, 0, "", refused.message, refused=True)
    parts = urlsplit(url)
    name = f"[{target.host}]" if ":" in target.host else target.host
    host_header = name if parts.port is None else f"{name}:{parts.port}"
    request_headers = {**headers, "Host": host_header, "Content-Type": "application/json"}
    extensions = {"sni_hostname": target.host} if parts.scheme == "https" else {}
    timeout = settings.AGENTS["WEBHOOK_TIMEOUT_SECONDS"]
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
            request = client.build_request(
                "POST", _pinned_url(target), content=body.encode(), headers=request_headers, extensions=extensions
            )
            response = client.send(request, stream=True)
            try:
                head = b""
                for chunk in response.iter_raw():
                    head += chunk
                    # a receiver that drips its answer is cut at the timeout, whole
                    if len(head) >= RESPONSE_HEAD_BYTES or time.monotonic() - started > timeout:
                        break
            finally:
                response.close()
            latency = int((time.monotonic() - started) * 1000)
            return Outcome(response.status_code, latency, head[:RESPONSE_HEAD_BYTES].decode(errors="replace"), None)
    except httpx.TimeoutException:
        return Outcome(None, int((time.monotonic() - started) * 1000), "", f"timed out after {timeout:g} s")
    except httpx.HTTPError as error:
        return Outcome(None, int((time.monotonic() - started) * 1000), "", f"connection failed: {type(error).__name__}")
