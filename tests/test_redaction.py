"""A provider's error text is stored without the secrets it quotes (issue 11; docs/agents.md §7.5)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from foundation.redaction import redact
from tests.harness import Server, write_agent
from tests.owners import TOKENS, owner, write_tokens
from tests.streams import SseReader

KEY = "sk-test-9f8e7d6c5b4a"
OTHER_KEY = "sk-owner-1a2b3c4d5e6f"


def test_redact_replaces_keys_and_words_whose_digest_is_a_token() -> None:
    digest = hashlib.sha256(b"tok-abcdefgh").digest()
    text = f"bad key {KEY}, also {KEY}x and token 'tok-abcdefgh' (not tok-abcdefgi)"
    assert redact(text, [KEY, ""], [digest]) == (
        "bad key [redacted], also [redacted]x and token '[redacted]' (not tok-abcdefgi)"
    )
    assert redact("nothing here", [], []) == "nothing here"


def test_a_provider_error_quoting_a_key_or_a_token_is_stored_redacted(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    message = f"Incorrect API key provided: {KEY}; owner key {OTHER_KEY}; bearer {TOKENS['bob']}"
    llm = llm_server({"rules": [{"reply": {"status": 401, "error": message}}]})
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"test": KEY}))
    owner_keys = tmp_path / "owner-keys.json"
    owner_keys.write_text(json.dumps({"other": OTHER_KEY}))
    server = start_server(
        [write_agent(tmp_path, "leaky", llm.url)],
        extra_args=[
            "--api-keys",
            str(keys),
            "--auth-tokens",
            str(write_tokens(tmp_path)),
            "--owner-api-keys",
            f"alice={owner_keys}",
        ],
    )
    stream = SseReader(f"{server.url}/v1/events", headers=owner("root"))
    answer = server.client.post(
        "/v1/sessions?wait=true", content=json.dumps({"agent": "leaky", "prompt": "hi"}), headers=owner("root")
    )
    view = answer.json()
    assert view["status"] == "failed", answer.text
    expected = "Incorrect API key provided: [redacted]; owner key [redacted]; bearer [redacted]"
    assert view["status_detail"] == f"LLM provider answered HTTP 401: {expected}"
    # the key was sent, and nothing stored or sent to clients holds it
    assert llm.requests
    events = stream.wait_for(lambda e: any(x["event"] == "session.failed" for x in e))
    stream.close()
    text = json.dumps(events) + server.client.get(f"/v1/sessions/{view['session_id']}", headers=owner("root")).text
    for secret in (KEY, OTHER_KEY, TOKENS["bob"]):
        assert secret not in text
