"""Configured secrets and credentials in URLs never reach what is stored or logged of a failure
(docs/agents.md §7.5, docs/api.md §14.3).

A provider's error text is copied into a failed session's ``status_detail`` and its
``session.failed`` event; some providers quote the key they were sent ("Incorrect API key
provided: sk-..."). :func:`redact` replaces every configured secret found in such a text: the
values of the API keys files, and any word whose SHA-256 is the digest of a bearer token (tokens
are kept as digests only, docs/api.md §10.2).

URLs carry credentials of their own: an MCP server's ``http://user:pass@host/mcp?api_key=...``,
a git source's ``https://token@host/repo.git``, a ``modelUrl`` with a key in its query.
:func:`redact_url` is the one rule for them (userinfo, query values and fragment replaced by
``***``), and :func:`redact_urls` applies it to every URL of a text: log lines (the JSON
formatter, ``foundation.logging``), events and error messages that name a URL.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

#: What a secret is replaced by.
REDACTED = "[redacted]"
#: What a URL's userinfo, each query value and its fragment are replaced by.
URL_MASK = "***"

#: Words that could be a bearer token: runs of the characters tokens are made of.
_WORD = re.compile(r"[A-Za-z0-9_\-.~+/=:]{8,}")
#: A URL inside a text: a scheme, ``://``, then anything up to a space, a quote or a bracket.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`\\]+")
#: One ``name=value`` (or bare ``name``) of a query string; ``&`` and ``;`` both separate them.
_QUERY_ITEM = re.compile(r"([^&;=]*)(=?)([^&;]*)")
#: The one route whose path holds a credential: a continuation token completes its call
#: (docs/api.md §8), so the segment after ``/continuations/`` is a secret wherever it is written,
#: whatever comes before it (``/v1//continuations/``, ``/v1/x/../continuations/``) and in any case.
_CONTINUATION_PATH = re.compile(r"(/continuations/+)[^/\s?#'\"]+", re.IGNORECASE)


def redact(text: str, secrets: Iterable[str], token_digests: Iterable[bytes] = ()) -> str:
    """``text`` with every secret in it replaced by :data:`REDACTED`.

    Args:
        text: a message from outside (a provider's error), to be stored or shown.
        secrets: secret values in clear (API keys); empty ones are ignored.
        token_digests: SHA-256 digests of bearer tokens; a word of ``text`` with one of these
            digests is replaced.
    Returns:
        The text without them.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    digests = set(token_digests)
    if not digests:
        return text

    def hide(match: re.Match[str]) -> str:
        word = match.group(0)
        return REDACTED if hashlib.sha256(word.encode("utf-8")).digest() in digests else word

    return _WORD.sub(hide, text)


def _mask_query(query: str) -> str:
    def mask(match: re.Match[str]) -> str:
        name, equals, value = match.groups()
        return f"{name}={URL_MASK}" if equals and value else match.group(0)

    return _QUERY_ITEM.sub(mask, query)


def redact_url(url: str) -> str:
    """``url`` without its credentials: what may be logged, stored or shown of it.

    The userinfo (``user:pass@``) becomes ``***@``, every query value ``***`` (the names are
    kept: they say which parameter was sent), a fragment ``***``; scheme, host, port and path
    are kept. ``http://user:pass@host/mcp?api_key=k&v=2`` becomes
    ``http://***@host/mcp?api_key=***&v=***``. The text is cut by hand rather than parsed: a URL
    too malformed for a parser (an unclosed ``[``) is redacted all the same.

    Args:
        url: an absolute URL (``scheme://...``); any other text is returned as it is.
    Returns:
        The redacted URL.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    rest, hash_sign, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority:
        authority = f"{URL_MASK}@{authority.rpartition('@')[2]}"
    redacted = f"{scheme}://{authority}{path}"
    if question:
        redacted += f"?{_mask_query(query)}"
    if hash_sign:
        redacted += f"#{URL_MASK}" if fragment else "#"
    return redacted


def redact_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (a git error, an HTTP
    client's exception, a log line's field). Text without ``://`` is returned as it is."""
    if "://" not in text:
        return text
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


def redact_for_log(text: str) -> str:
    """``text`` as a log line may hold it: its URLs redacted (:func:`redact_urls`) and any
    continuation token of a ``.../continuations/<token>`` path replaced by ``***`` (an access log
    line's path, Django's "Internal Server Error: <path>")."""
    text = redact_urls(text)
    if "/continuations/" not in text.lower():
        return text
    return _CONTINUATION_PATH.sub(rf"\g<1>{URL_MASK}", text)
