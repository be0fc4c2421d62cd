"""Idempotency keys: a retried request answers its first answer instead of running again
(docs/api.md §1.7, the semantics of the IETF draft draft-ietf-httpapi-idempotency-key-header).

A request with a key first claims it: a row inserted in its own transaction, which the unique
constraint on (scope, key digest) lets only one request insert. The request's change and the
stored answer then commit together (:func:`apply`, called inside the request's transaction), so
a key is either still unused by any change or holds the answer of the change it made. A claim
whose request died before changing anything can be taken over once its lease is over; the
request that lost its claim can no longer apply, so its change is rolled back.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from foundation.common import dump_json_text
from foundation.errors import IdempotencyKeyInProgress, IdempotencyKeyReused
from sessions_app.models import IdempotencyKey

#: Seconds a claim holds its key before the request changes anything: a request whose server
#: died in that time leaves its key to the next retry after this (docs/api.md §1.7).
CLAIM_LEASE_SECONDS = 60.0
#: Seconds between two looks at a key another request holds (for at most
#: ``AGENTS_IDEMPOTENCY_WAIT_SECONDS``, then 409 ``idempotency_key_in_progress``).
POLL_SECONDS = 0.05
#: Seconds beyond its ``wait`` timeout an applied request may take to store its final answer;
#: past them a retry answers the applied answer (the change is committed, so that is safe).
WAIT_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class Claim:
    """A key this request holds: ``row_id`` its row, ``claim`` the request's mark on it, ``key``
    the key as sent (it seals a session token in the stored answer), ``scope`` its owner."""

    row_id: int
    claim: uuid.UUID
    key: str
    scope: str


@dataclass(frozen=True)
class Answer:
    """An answer to store or replay: HTTP ``status``, JSON ``body``, ``location`` header (or
    ``None``)."""

    status: int
    body: Any
    location: str | None = None


def key_digest(key: str) -> str:
    """The SHA-256 (hex) of a key: what the database keeps of it."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def _ttl() -> timedelta:
    return timedelta(seconds=settings.AGENTS["IDEMPOTENCY_TTL_SECONDS"])


def begin(*, scope: str, key: str, fingerprint: str) -> Claim | Answer:
    """Claim ``key`` for a request, or give the answer a request with this key already stored.

    Args:
        scope: whose key it is (``sessions_app.idempotent.key_scope``).
        key: the ``Idempotency-Key`` as sent (already checked for its shape).
        fingerprint: SHA-256 (hex) of the request's method, path and canonical body.

    Returns:
        A :class:`Claim` when this request is to run; the stored :class:`Answer` (the first
        request's, or the answer it applied when its server died while waiting for the run).

    Raises:
        IdempotencyKeyReused: 422, the key was used with another fingerprint.
        IdempotencyKeyInProgress: 409, the first request is still running after
            ``AGENTS_IDEMPOTENCY_WAIT_SECONDS``.
    """
    digest = key_digest(key)
    deadline = time.monotonic() + settings.AGENTS["IDEMPOTENCY_WAIT_SECONDS"]
    while True:
        now = timezone.now()
        mark = uuid.uuid4()
        try:
            with transaction.atomic():
                created = IdempotencyKey.objects.create(
                    scope=scope,
                    key_sha256=digest,
                    fingerprint=fingerprint,
                    claim=mark,
                    lease_until=now + timedelta(seconds=CLAIM_LEASE_SECONDS),
                    created_at=now,
                    expires_at=now + _ttl(),
                )
            return Claim(row_id=created.pk, claim=mark, key=key, scope=scope)
        except IntegrityError:
            pass
        row = IdempotencyKey.objects.filter(scope=scope, key_sha256=digest).first()
        if row is None:
            continue
        if row.expires_at <= now:
            # an expired key is as good as unused: its row goes, and the loop inserts a new one
            IdempotencyKey.objects.filter(pk=row.pk, expires_at__lte=now).delete()
            continue
        if row.fingerprint != fingerprint:
            raise IdempotencyKeyReused()
        if row.state == IdempotencyKey.State.COMPLETED:
            return _answer_of(row, key)
        if row.lease_until <= now:
            if row.state == IdempotencyKey.State.APPLIED:
                return _answer_of(row, key)
            taken = IdempotencyKey.objects.filter(
                pk=row.pk, state=IdempotencyKey.State.IN_PROGRESS, claim=row.claim
            ).update(claim=mark, lease_until=now + timedelta(seconds=CLAIM_LEASE_SECONDS))
            if taken == 1:
                return Claim(row_id=row.pk, claim=mark, key=key, scope=scope)
            continue
        if time.monotonic() >= deadline:
            raise IdempotencyKeyInProgress()
        time.sleep(POLL_SECONDS)


def apply(claim: Claim, answer: Answer, *, final: bool, wait_seconds: float = 0.0) -> None:
    """Store the answer of the change the request made, in the request's own transaction.

    Args:
        claim: the request's claim.
        answer: the answer as the change left it.
        final: ``True`` when this is the answer sent (``completed``); ``False`` when the request
            still waits up to ``wait_seconds`` for the run (``applied``: a retry after its
            server died answers this one).

    Raises:
        IdempotencyKeyInProgress: 409, another request took the claim over; the caller's
            transaction must roll back (its change must not commit).
    """
    state = IdempotencyKey.State.COMPLETED if final else IdempotencyKey.State.APPLIED
    lease = timezone.now() + timedelta(seconds=wait_seconds + WAIT_GRACE_SECONDS)
    stored = IdempotencyKey.objects.filter(
        pk=claim.row_id, claim=claim.claim, state=IdempotencyKey.State.IN_PROGRESS
    ).update(state=state, lease_until=lease, **_stored_fields(claim, answer))
    if stored != 1:
        raise IdempotencyKeyInProgress()


def complete(claim: Claim, answer: Answer) -> None:
    """Store the answer a request sends after waiting for its run (its change is committed)."""
    IdempotencyKey.objects.filter(pk=claim.row_id, claim=claim.claim).update(
        state=IdempotencyKey.State.COMPLETED, **_stored_fields(claim, answer)
    )


def release(claim: Claim) -> None:
    """Forget a claim whose request failed before changing anything, so that a retry runs."""
    IdempotencyKey.objects.filter(pk=claim.row_id, claim=claim.claim, state=IdempotencyKey.State.IN_PROGRESS).delete()


def prune() -> int:
    """Delete the keys kept longer than ``AGENTS_IDEMPOTENCY_TTL_SECONDS``; return how many."""
    deleted, _ = IdempotencyKey.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted


def _stored_fields(claim: Claim, answer: Answer) -> dict[str, Any]:
    body = answer.body
    secret = None
    if isinstance(body, dict) and body.get("session_token"):
        # only the session token's digest is kept in clear (docs/api.md §10.5)
        body = {**body, "session_token": None}
        secret = _seal(claim.scope, claim.key, answer.body["session_token"])
    return {
        "response_status": answer.status,
        "response_body": dump_json_text(body),
        "location": answer.location,
        "sealed_secret": secret,
    }


def _answer_of(row: IdempotencyKey, key: str) -> Answer:
    body = json.loads(row.response_body or "null")
    if row.sealed_secret and isinstance(body, dict):
        body["session_token"] = _unseal(row.scope, key, row.sealed_secret)
    return Answer(status=row.response_status or 200, body=body, location=row.location)


def _cipher(scope: str, key: str) -> AESGCM:
    # the key exists only with the client and as a digest here: the database alone cannot open it
    material = f"idempotency-session-token\0{scope}\0{key}".encode()
    return AESGCM(hmac.new(settings.SECRET_KEY.encode(), material, hashlib.sha256).digest())


def _seal(scope: str, key: str, secret: str) -> str:
    nonce = os.urandom(12)
    return base64.b64encode(nonce + _cipher(scope, key).encrypt(nonce, secret.encode(), None)).decode()


def _unseal(scope: str, key: str, sealed: str) -> str | None:
    raw = base64.b64decode(sealed)
    try:
        return _cipher(scope, key).decrypt(raw[:12], raw[12:], None).decode()
    except InvalidTag:
        # sealed under another secret key (DJANGO_SECRET_KEY changed): the token cannot be shown again
        return None
