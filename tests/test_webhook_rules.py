"""The webhooks' rules in one process (docs/webhooks.md §4, §7): which addresses the SSRF rule
refuses, which outcomes are retried, and that the signature is the Standard Webhooks one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from foundation.errors import WebhookUrlRefused
from hooks_app.outbox import _retryable, signed_headers
from hooks_app.sender import Outcome, check_url
from hooks_app.services import new_secret


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.5.5.5",
        "10.0.0.1",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "100.64.0.1",
        "[::1]",
        "[fe80::1]",
        "[fc00::1]",
        "[::ffff:10.0.0.1]",
        "224.0.0.1",
        "240.0.0.1",
    ],
)
def test_the_ssrf_rule_refuses_every_non_public_address(address: str) -> None:
    with pytest.raises(WebhookUrlRefused, match="non-public address"):
        check_url(f"http://{address}:8080/hook", block_private=True)
    # with the rule off the same URL is allowed, and connected to as checked
    assert check_url(f"http://{address}:8080/hook", block_private=False).address == address.strip("[]")


def test_a_public_address_is_allowed_with_the_rule_on() -> None:
    target = check_url("https://93.184.215.14/hook?x=1", block_private=True)
    assert target.address == "93.184.215.14" and target.host == "93.184.215.14"


@pytest.mark.parametrize(
    ("outcome", "retried"),
    [
        (Outcome(500, 5, "", None), True),
        (Outcome(503, 5, "", None), True),
        (Outcome(429, 5, "", None), True),
        (Outcome(None, 10000, "", "timed out after 10 s"), True),
        (Outcome(None, 3, "", "connection failed: ConnectError"), True),
        (Outcome(400, 5, "", None), False),
        (Outcome(404, 5, "", None), False),
        (Outcome(410, 5, "", None), False),
        (Outcome(302, 5, "", None), False),
        (Outcome(None, 0, "", "webhook URL refused: ...", refused=True), False),
    ],
)
def test_only_timeouts_connection_errors_429_and_5xx_are_retried(outcome: Outcome, retried: bool) -> None:
    assert _retryable(outcome) is retried


def test_the_headers_verify_with_the_standard_webhooks_library_and_only_with_the_secret() -> None:
    secret, body = new_secret(), '{"type":"run.stopped","data":{}}'
    headers = signed_headers(secret, "msg_1", body, datetime.now(UTC))
    assert Webhook(secret).verify(body, headers) == {"type": "run.stopped", "data": {}}
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("stopped", "started"), headers)
