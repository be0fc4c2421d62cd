"""Schemathesis hooks of ``tests/test_schemathesis.py``, loaded by ``st run`` through
``SCHEMATHESIS_HOOKS``.

The document asks for an ``Idempotency-Key`` unique to each logical request (docs/api.md §1.7);
generated data draws keys from a small space and would send one key with two bodies, which the
server rightly refuses with 422 ``idempotency_key_reused``. Each request gets a fresh key.

A webhook's URL must name a host that resolves and a port (docs/webhooks.md §7), which no schema
can say: generated hosts are random names, so a subscription's URL is sent with the host
``127.0.0.1`` (its scheme and path as generated).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis


@schemathesis.hook
def map_headers(context: Any, headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """A fresh ``Idempotency-Key`` for every generated request that sends one."""
    if headers is not None and "Idempotency-Key" in headers:
        headers["Idempotency-Key"] = str(uuid.uuid4())
    return headers


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    """A subscription's generated URL, with a host that resolves."""
    url = body.get("url") if isinstance(body, dict) else None
    if context.operation.path.startswith("/v1/webhooks") and isinstance(url, str):
        body["url"] = re.sub(r"^([A-Za-z]+://)[^/?#]+", r"\g<1>127.0.0.1", body["url"])
    return body
