"""Keeping an HTTP toolbox's requests on its endpoints (docs/tools.md §9.3, "Staying under BaseUrl").

Two independent rules, so that the toolbox's credentials go only where its entry says:

* a path parameter that is empty, or that is or holds a dot segment (``.``, ``..``) once
  percent-decoded and split on ``/`` and ``\\`` (``..``, ``%2e%2e``, ``%2E.``, ``a/../..``,
  ``%252e%252e``), is refused: percent-encoding keeps ``/`` inside the value, but a dot segment
  alone is removed by URL normalisation (httpx's, a proxy's, the server's) and climbs a level;
* the final URL must have the base URL's scheme, host and port, and a path under its path, with
  no dot segment left in any form a server may decode. It is checked on the very ``httpx.URL``
  that is sent.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

import httpx

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SEPARATORS = re.compile(r"[/\\]")


class RequestOutsideBase(ValueError):
    """The request URL would leave the toolbox's ``BaseUrl``; the message says how, never the URL
    (its query may hold a secret)."""


def _decoded(text: str) -> str:
    """``text`` percent-decoded until nothing changes (a server may decode more than once).
    Each round that changes the text shortens it, so the loop ends."""
    while True:
        decoded = unquote(text)
        if decoded == text:
            return text
        text = decoded


def holds_dot_segment(text: str) -> bool:
    """Whether ``text``, percent-decoded and split on ``/`` and ``\\``, has a ``.`` or ``..`` part.

    Args:
        text: a path parameter's value, or one raw segment of a URL path.
    """
    return any(part in (".", "..") for part in _SEPARATORS.split(_decoded(text)))


def path_parameter_problem(value: str) -> str | None:
    """Why ``value`` cannot go into a URL path as a parameter, or ``None`` when it can.

    Args:
        value: the parameter's text, before percent-encoding.
    Returns:
        ``"is empty"``, ``"is or holds a dot segment ('.' or '..')"``, or ``None``.
    """
    if value == "":
        return "is empty"
    if holds_dot_segment(value):
        return "is or holds a dot segment ('.' or '..')"
    return None


def _port(url: httpx.URL) -> int | None:
    return url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme)


def _path_of(url: httpx.URL) -> str:
    """The raw (still percent-encoded) path of ``url``, without its query."""
    return url.raw_path.decode("ascii").split("?", 1)[0]


def checked_url(base_url: str, text: str) -> httpx.URL:
    """``text`` as the ``httpx.URL`` to send, once it is known to stay under ``base_url``.

    Args:
        base_url: the toolbox's ``BaseUrl`` (no trailing ``/``).
        text: the request URL: ``base_url`` followed by the path and the query.
    Returns:
        the parsed URL (httpx has removed the dot segments it recognises).
    Raises:
        RequestOutsideBase: another scheme, host or port; a path outside the base's path; a raw
            segment that still decodes to a dot segment; a URL httpx cannot parse.
    """
    try:
        base = httpx.URL(base_url)
        url = httpx.URL(text)
    except httpx.InvalidURL:
        # httpx's message may quote a part of the URL, and the query holds the toolbox's secrets
        raise RequestOutsideBase("the request URL cannot be parsed") from None
    if (url.scheme, url.host, _port(url)) != (base.scheme, base.host, _port(base)):
        raise RequestOutsideBase("the request would go to another scheme, host or port than BaseUrl")
    path = _path_of(url)
    if any(holds_dot_segment(segment) for segment in path.split("/")):
        raise RequestOutsideBase("the request path holds a dot segment")
    prefix = _path_of(base).rstrip("/")
    if path != prefix and not path.startswith(prefix + "/"):
        raise RequestOutsideBase("the request path is not under BaseUrl's path")
    return url
