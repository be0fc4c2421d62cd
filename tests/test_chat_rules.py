"""The chat page's rules in-process: where ``/`` is served, and the attachment limit (issue 18), which
holds for every way a file reaches a session: a message, mail, a tool result."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from agentsite.chat import chat_enabled, is_loopback_bind
from foundation.errors import PayloadTooLarge
from sessions_app.serializers import MailSerializer, MessageSerializer
from sessions_app.values import MailBody, ToolResult


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


def _encoded(size: int) -> str:
    return base64.b64encode(b"x" * size).decode()


@pytest.mark.parametrize(
    ("value", "model"),
    [
        (
            {"tag": "userMessage", "query": {"text": "look", "media": [{"mimeType": "a/b", "filename": "notes.txt"}]}},
            MailBody,
        ),
        ({"type": "media", "mimeType": "a/b", "filename": "notes.txt"}, ToolResult),
        ({"type": "mixed", "parts": [{"type": "media", "mimeType": "a/b", "filename": "notes.txt"}]}, ToolResult),
    ],
    ids=["mail", "continuation media", "continuation mixed"],
)
def test_the_attachment_limit_holds_for_mail_and_tool_results_too(value: dict, model: type) -> None:
    def with_data(size: int) -> dict:
        encoded = json.loads(json.dumps(value))
        target = encoded
        if "query" in target:
            target = target["query"]["media"][0]
        elif target["type"] == "mixed":
            target = target["parts"][0]
        target["base64Data"] = _encoded(size)
        return encoded

    with override_settings(AGENTS={**settings.AGENTS, "MAX_ATTACHMENT_BYTES": 6}):
        model.model_validate(with_data(6))
        with pytest.raises(PayloadTooLarge) as refused:
            model.model_validate(with_data(7))
    assert refused.value.body() == {
        "error": "payload_too_large",
        "message": "attachment 'notes.txt' is 7 bytes, over the limit of 6 bytes",
    }


@pytest.mark.parametrize("mail_id", [12345, 1.5, True, ["5f0c"]])
def test_a_mail_id_is_a_uuid_string_only(mail_id: object) -> None:
    mail = MailSerializer(data={"body": {"tag": "control", "message": "pause"}, "id": mail_id})
    assert not mail.is_valid()
    assert "id" in mail.errors
    assert MailSerializer(data={"body": {"tag": "control", "message": "pause"}, "id": str(uuid.uuid4())}).is_valid()
