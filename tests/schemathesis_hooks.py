"""Schemathesis hooks of ``tests/test_schemathesis.py``, loaded by ``st run`` through
``SCHEMATHESIS_HOOKS``.

The document asks for an ``Idempotency-Key`` unique to each logical request (docs/api.md §1.7);
generated data draws keys from a small space and would send one key with two bodies, which the
server rightly refuses with 422 ``idempotency_key_reused``. Each request gets a fresh key.
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis


@schemathesis.hook
def map_headers(context: Any, headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """A fresh ``Idempotency-Key`` for every generated request that sends one."""
    if headers is not None and "Idempotency-Key" in headers:
        headers["Idempotency-Key"] = str(uuid.uuid4())
    return headers
