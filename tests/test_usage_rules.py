"""The rules of usage counting, in-process (docs/sessions.md §1.11): user turns' ``byteUsage`` as
agents-exe counts it, checked against the numbers of a real agents-exe session file; token usage
read wherever agents-exe keeps it, hostile values counting as nothing; the statistics of
``session-print``; the scripted model's ``usage`` replies and their refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentfiles import document as doc
from agentfiles.usage import document_totals, response_bytes, turn_token_usage, user_byte_usage
from devtools.mockllm import validate_script
from sessions_app.markdown import statistics

SESSIONS = Path(os.environ.get("AGENTS_TEST_FIXTURES", "/work/shared/fixtures")) / "sessions"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SESSIONS / name).read_text())
    return loaded


def test_user_turns_count_tool_responses_and_queries_as_the_agents_exe_file_does() -> None:
    document = _load("activation-session.json")
    users = [turn for turn in document["turns"] if turn["tag"] == "UserTurn"]
    assert len(users) == 4
    ours = []
    for turn in users:
        contents = turn["contents"]
        counted = user_byte_usage(
            contents["userPrompt"], contents["userTools"], contents["userQuery"], contents["userToolResponses"]
        )
        assert set(counted) == set(turn["byteUsage"])
        assert counted["stepToolBytes"] == turn["byteUsage"]["stepToolBytes"], turn["byteUsage"]
        assert counted["stepOutputBytes"] == counted["stepReasoningBytes"] == 0
        assert counted["stepTotalBytes"] == counted["stepInputBytes"] + counted["stepToolBytes"]
        ours.append(counted)
    # the prompt and tools are the same on every turn: the query alone makes the input differ,
    # by exactly as much as in the file
    for mine, theirs in zip(ours[1:], users[1:], strict=True):
        assert (
            mine["stepInputBytes"] - ours[0]["stepInputBytes"]
            == theirs["byteUsage"]["stepInputBytes"] - users[0]["byteUsage"]["stepInputBytes"]
        )


def test_a_new_user_turn_carries_byte_usage_and_mail_folded_in_recounts_it() -> None:
    media = [{"mimeType": "image/png", "base64Data": "iVBORw0KGgo="}]
    turn = doc.user_turn("Be brief.", [{"name": "t"}], doc.make_query("héllo", media))
    assert turn["byteUsage"] == {
        "stepInputBytes": 4 * 9 + 4 * 5 + 12 + len('{"name":"t"}'),
        "stepOutputBytes": 0,
        "stepReasoningBytes": 0,
        "stepToolBytes": 0,
        "stepTotalBytes": 4 * 9 + 4 * 5 + 12 + 12,
    }
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    closed = doc.user_turn("Be brief.", [], None, [[call, "ok"], [call, {"type": "json", "content": {"a": 1}}]])
    assert closed["byteUsage"]["stepToolBytes"] == len('"ok"') + len('{"a":1}')
    closed["contents"]["userQuery"] = "more"
    doc.recount_user_turn(closed)
    assert closed["byteUsage"]["stepInputBytes"] == 4 * 9 + 16


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Toolgroup 'ask-user' activated", 32),
        ("é", 4),
        ({"_userToolResponse": "ab"}, 4),
        ({"type": "text", "content": "abc"}, 12),
        ({"type": "media", "mimeType": "image/png", "base64Data": "AAAA"}, 4),
        ({"type": "mixed", "parts": [{"type": "text", "text": "ab"}, {"type": "media", "base64Data": "AAAAAA"}]}, 14),
        ({"type": "mixed", "parts": ["not a part", None]}, 0),
        (None, 4),
    ],
)
def test_tool_response_bytes(response: Any, expected: int) -> None:
    assert response_bytes(response) == expected


def test_token_usage_is_read_wherever_agents_exe_kept_it() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
    step = {"tag": "LlmTurn", "contents": {}, "byteUsage": {"stepTokenUsage": usage}}
    response = {"tag": "LlmTurn", "contents": {"llmResponse": {"responseTokenUsage": usage}}}
    raw = {"tag": "LlmTurn", "contents": {"llmResponse": {"rawResponse": {"usage": usage}}}}
    for turn in (step, response, raw):
        found = turn_token_usage(turn)
        assert found is not None and (found.input_tokens, found.output_tokens, found.cached_tokens) == (10, 3, 4)
    top_cached = {
        "tag": "LlmTurn",
        "contents": {"llmResponse": {"rawResponse": {"usage": {"prompt_tokens": 1, "cached_tokens": 9}}}},
    }
    assert turn_token_usage(top_cached).cached_tokens == 9  # type: ignore[union-attr]
    hostile = [
        {"tag": "UserTurn", "byteUsage": {"stepTokenUsage": usage}},
        {"tag": "LlmTurn", "contents": {"llmResponse": "a bare string"}},
        {"tag": "LlmTurn", "contents": {"llmResponse": {"rawResponse": {"usage": {"total_tokens": 5}}}}},
        {"tag": "LlmTurn", "contents": []},
        "not a turn",
    ]
    assert [turn_token_usage(turn) for turn in hostile] == [None] * len(hostile)
    odd = {"tag": "LlmTurn", "byteUsage": {"stepTokenUsage": {"prompt_tokens": -5, "completion_tokens": True}}}
    found = turn_token_usage(odd)
    assert found is not None and (found.input_tokens, found.output_tokens, found.model_turns) == (0, 0, 1)


def test_document_totals_of_a_real_file_equal_its_answers_usage() -> None:
    document = _load("gh-155.session.json")
    raw = [t["contents"]["llmResponse"]["rawResponse"]["usage"] for t in document["turns"] if t["tag"] == "LlmTurn"]
    totals = document_totals(document)
    assert totals["inputTokens"] == sum(u["prompt_tokens"] for u in raw)
    assert totals["outputTokens"] == sum(u["completion_tokens"] for u in raw)
    assert totals["cachedTokens"] == sum(u.get("cached_tokens", 0) for u in raw) > 0
    assert totals["modelTurns"] == len(raw)
    activation = _load("activation-session.json")
    assert document_totals(activation)["totalBytes"] == sum(
        t["byteUsage"]["stepTotalBytes"] for t in activation["turns"]
    )


def test_session_print_statistics_show_the_tokens() -> None:
    document = _load("gh-155.session.json")
    totals = document_totals(document)
    text = statistics(document)
    line = (
        f"- Tokens: input {totals['inputTokens']}, output {totals['outputTokens']}, cached {totals['cachedTokens']}"
        f" ({totals['modelTurns']} of 5 model answers reported usage)"
    )
    assert line in text.splitlines(), text


def _script(usage: Any) -> dict[str, Any]:
    return {"rules": [{"reply": {"content": "ok", "usage": usage}}]}


def test_the_scripted_model_checks_its_usage_replies() -> None:
    validate_script(_script({"prompt_tokens": 3, "completion_tokens": 0, "cached_tokens": 1}))
    for bad, words in [
        ("many", "reply.usage must be an object"),
        ({"total_tokens": 3}, "reply.usage must be an object"),
        ({"prompt_tokens": -1}, "reply.usage.prompt_tokens must be an integer >= 0"),
        ({"completion_tokens": 1.5}, "reply.usage.completion_tokens must be an integer >= 0"),
        ({"cached_tokens": True}, "reply.usage.cached_tokens must be an integer >= 0"),
    ]:
        with pytest.raises(ValueError, match=words):
            validate_script(_script(bad))
