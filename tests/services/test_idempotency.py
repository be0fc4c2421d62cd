"""Idempotency keys in process: the key's shape, claims taken over after their lease, and a change
that commits only with its claim (docs/api.md §1.7)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from foundation.errors import IdempotencyKeyInProgress, IdempotencyKeyReused, InvalidIdempotencyKey
from sessions_app.idempotent import parse_key
from sessions_app.models import IdempotencyKey, Session
from sessions_app.services import idempotency
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

ANSWER = idempotency.Answer(status=201, body={"session_id": "s"}, location="/v1/sessions/s")


@pytest.mark.parametrize(
    ("raw", "key"),
    [("8e1f6f52-2b8d-4c1e-9a4f-0d6f3f1b2c3d", None), ('"abc"', "abc"), ("a:b/c+d=", None), ("k" * 255, None)],
)
def test_a_key_is_visible_ascii_quoted_or_not(raw: str, key: str | None) -> None:
    assert parse_key(raw) == (key or raw)


@pytest.mark.parametrize("raw", ["", '""', "k" * 256, "a b", 'a"b', "a\\b", "\x7f", "caf\xe9"])
def test_other_keys_are_refused(raw: str) -> None:
    with pytest.raises(InvalidIdempotencyKey):
        parse_key(raw)


def _expire_lease(claim: idempotency.Claim) -> None:
    IdempotencyKey.objects.filter(pk=claim.row_id).update(lease_until=timezone.now() - timedelta(seconds=1))


def test_a_claim_past_its_lease_is_taken_over_and_the_first_can_no_longer_apply() -> None:
    first = idempotency.begin(scope="alice", key="k", fingerprint="f")
    assert isinstance(first, idempotency.Claim)
    _expire_lease(first)
    second = idempotency.begin(scope="alice", key="k", fingerprint="f")
    assert isinstance(second, idempotency.Claim) and second.claim != first.claim

    # the first request's change rolls back with its refused apply
    with pytest.raises(IdempotencyKeyInProgress), transaction.atomic():
        SessionFactory()
        idempotency.apply(first, ANSWER, final=True)
    assert Session.objects.count() == 0

    with transaction.atomic():
        idempotency.apply(second, ANSWER, final=True)
    assert idempotency.begin(scope="alice", key="k", fingerprint="f") == ANSWER
    with pytest.raises(IdempotencyKeyReused):
        idempotency.begin(scope="alice", key="k", fingerprint="other")


def test_an_applied_answer_is_replayed_once_its_wait_is_over(settings) -> None:
    settings.AGENTS = {**settings.AGENTS, "IDEMPOTENCY_WAIT_SECONDS": 0.1}
    claim = idempotency.begin(scope="", key="k", fingerprint="f")
    with transaction.atomic():
        idempotency.apply(claim, ANSWER, final=False, wait_seconds=60)
    with pytest.raises(IdempotencyKeyInProgress):
        idempotency.begin(scope="", key="k", fingerprint="f")
    _expire_lease(claim)
    assert idempotency.begin(scope="", key="k", fingerprint="f") == ANSWER
    final = idempotency.Answer(status=201, body={"session_id": "s", "status": "idle"}, location="/v1/sessions/s")
    idempotency.complete(claim, final)
    assert idempotency.begin(scope="", key="k", fingerprint="f") == final


def test_a_released_key_is_claimed_again_and_scopes_are_apart() -> None:
    claim = idempotency.begin(scope="alice", key="k", fingerprint="f")
    idempotency.release(claim)
    assert not IdempotencyKey.objects.exists()
    again = idempotency.begin(scope="alice", key="k", fingerprint="other")
    assert isinstance(again, idempotency.Claim)
    assert isinstance(idempotency.begin(scope="bob", key="k", fingerprint="f"), idempotency.Claim)


def test_a_session_token_is_stored_sealed_and_replayed(settings) -> None:
    claim = idempotency.begin(scope="alice", key="k-1", fingerprint="f")
    answer = idempotency.Answer(status=201, body={"session_id": "s", "session_token": "st_secret"})
    with transaction.atomic():
        idempotency.apply(claim, answer, final=True)
    row = IdempotencyKey.objects.get()
    assert "st_secret" not in (row.response_body or "") + (row.sealed_secret or "")
    assert "k-1" not in row.key_sha256
    assert idempotency.begin(scope="alice", key="k-1", fingerprint="f") == answer
    # under another secret key the token cannot be opened: the replay shows none
    settings.SECRET_KEY = "another-secret-key"
    assert idempotency.begin(scope="alice", key="k-1", fingerprint="f").body["session_token"] is None


def test_prune_deletes_the_keys_whose_time_is_over() -> None:
    kept = idempotency.begin(scope="", key="new", fingerprint="f")
    old = idempotency.begin(scope="", key="old", fingerprint="f")
    IdempotencyKey.objects.filter(pk=old.row_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert idempotency.prune() == 1
    assert list(IdempotencyKey.objects.values_list("pk", flat=True)) == [kept.row_id]
    # an expired key not yet pruned is unused: the next request claims it afresh
    IdempotencyKey.objects.filter(pk=kept.row_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert isinstance(idempotency.begin(scope="", key="new", fingerprint="other"), idempotency.Claim)
