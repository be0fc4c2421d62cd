"""The chat page's rules in-process: where ``/`` is served, and the attachment limit (issue 18)."""

from __future__ import annotations

import base64

import pytest
from django.conf import settings
from django.test import override_settings

from agentsite.chat import chat_enabled, is_loopback_bind
from foundation.errors import PayloadTooLarge
from sessions_app.serializers import MessageSerializer


@pytest.mark.parametrize(
    ("bind", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("agents.example.com", False),
    ],
)
def test_a_loopback_bind_is_one_only_this_machine_reaches(bind: str, loopback: bool) -> None:
    assert is_loopback_bind(bind) is loopback


@pytest.mark.parametrize(
    ("bind", "no_ui", "served"),
    [("127.0.0.1", False, True), ("127.0.0.1", True, False), ("0.0.0.0", False, False)],
)
def test_without_authentication_the_page_follows_the_bind_and_no_ui(bind: str, no_ui: bool, served: bool) -> None:
    with override_settings(AGENTS={**settings.AGENTS, "BIND": bind, "NO_UI": no_ui}):
        assert chat_enabled() is served


def _message(data: bytes, name: str = "f.bin") -> MessageSerializer:
    media = [{"mime": "application/octet-stream", "base64": base64.b64encode(data).decode(), "filename": name}]
    return MessageSerializer(data={"prompt": "look", "media": media})


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 6])
def test_an_attachment_at_the_limit_is_taken(size: int) -> None:
    with override_settings(AGENTS={**settings.AGENTS, "MAX_ATTACHMENT_BYTES": 6}):
        assert _message(b"x" * size).is_valid(), size


@pytest.mark.parametrize("size", [7, 8, 9, 100])
def test_an_attachment_over_the_limit_is_refused_with_its_size(size: int) -> None:
    with override_settings(AGENTS={**settings.AGENTS, "MAX_ATTACHMENT_BYTES": 6}):
        with pytest.raises(PayloadTooLarge) as refused:
            _message(b"x" * size, "notes.txt").is_valid()
    assert refused.value.status == 413
    assert refused.value.body() == {
        "error": "payload_too_large",
        "message": f"attachment 'notes.txt' is {size} bytes, over the limit of 6 bytes",
    }
