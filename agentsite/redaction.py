"""Configured secrets never reach what is stored of a failure (docs/agents.md §7.5).

A provider's error text is copied into a failed session's ``status_detail`` and its
``session.failed`` event; some providers quote the key they were sent ("Incorrect API key
provided: sk-..."). :func:`redact` replaces every configured secret found in such a text: the
values of the API keys files, and any word whose SHA-256 is the digest of a bearer token (tokens
are kept as digests only, docs/api.md §10.2).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

#: What a secret is replaced by.
REDACTED = "[redacted]"

#: Words that could be a bearer token: runs of the characters tokens are made of.
_WORD = re.compile(r"[A-Za-z0-9_\-.~+/=:]{8,}")


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
