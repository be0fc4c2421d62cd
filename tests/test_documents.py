"""Session files written by agents-exe load and dump unchanged, and the engine can read them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from agentfiles import document as doc
from sessions_app.models import DOCUMENTS, Session
from sessions_app.store import insert_session, store
from tests.harness import FIXTURES

# a missing fixtures folder must fail the tests below, not skip them
SESSION_FILES = sorted((FIXTURES / "sessions").glob("*.json")) or [FIXTURES / "sessions" / "(missing)"]


def test_the_fixtures_are_there() -> None:
    assert len(SESSION_FILES) >= 5


@pytest.mark.django_db
@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_a_session_file_round_trips(path: Path) -> None:
    original = json.loads(path.read_text())
    session = insert_session(
        json.loads(path.read_text()),
        id=uuid.UUID(original["sessionId"]),
        agent_slug="imported",
        status=doc.status_of(original),
    )
    DOCUMENTS.forget(session.pk)
    loaded = Session.objects.get(pk=session.pk).document
    assert loaded == original
    # the text of the document is the file's JSON, key order included
    assert json.loads(Session.objects.get(pk=session.pk).document_text()) == original
    assert list(json.loads(Session.objects.get(pk=session.pk).document_text())) == list(original)
    # storing a new version of it keeps it equal too
    store(Session.objects.get(pk=session.pk), loaded)
    assert Session.objects.get(pk=session.pk).document == original
    # and the API hands it back unchanged
    answer = APIClient().get(f"/v1/sessions/{session.pk}")
    assert answer.status_code == 200
    assert answer.json()["session"] == original
    # the engine reads these documents: every tool call answered, head first
    messages = doc.openai_messages(loaded, "system")
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == answered
    if path.name == OLDER_PARTIAL.name:
        assert doc.status_of(loaded) == "waiting_external"
        assert [c["tool"] for c in doc.pending_calls(loaded)] == ["get_weather"]
    else:
        assert doc.status_of(loaded) == "idle"
        assert doc.pending_calls(loaded) == []


OLDER_PARTIAL = FIXTURES / "sessions" / "partial-turn-older.json"
OLDER_TOKEN = "9a4c1e2b-7f3d-4e5a-b6c7-d8e9f0a1b2c3"


def test_an_older_partial_turn_reads_as_tracked_calls() -> None:
    document = json.loads(OLDER_PARTIAL.read_text())
    head = doc.head(document)
    calls = doc.tracked_calls(head)
    assert [(c["tcCall"]["id"], c["tcState"]) for c in calls] == [
        ("call_now_1", "Completed"),
        ("call_weather_1", "Deferred"),
    ]
    assert calls[0]["tcResult"] == {"type": "text", "content": "2026-03-06T14:02:11Z"}
    assert calls[1]["tcContinuation"] == OLDER_TOKEN
    # the same ids at every read, so a result finds its call again
    assert [c["tcId"] for c in doc.tracked_calls(doc.head(json.loads(OLDER_PARTIAL.read_text())))] == [
        c["tcId"] for c in calls
    ]
    messages = doc.openai_messages(document, "system")
    tool_messages = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert tool_messages["call_now_1"] == "2026-03-06T14:02:11Z"
    assert json.loads(tool_messages["call_weather_1"])["status"] == "running"


def test_a_result_for_an_older_partial_turn_is_written_in_the_current_shape() -> None:
    document = json.loads(OLDER_PARTIAL.read_text())
    updated = doc.apply_result(document, OLDER_TOKEN, "sunny")
    assert updated is not None
    head = doc.head(updated)
    # every call is final now: the head is a full user turn, both answers in the model's order
    assert head["tag"] == "UserTurn"
    assert [(call["id"], response) for call, response in head["contents"]["userToolResponses"]] == [
        ("call_now_1", {"type": "text", "content": "2026-03-06T14:02:11Z"}),
        ("call_weather_1", "sunny"),
    ]
    assert doc.status_of(updated) == "ready"
    # the older turns below the head are kept as they were
    assert updated["turns"][1:] == document["turns"][1:]


def test_a_legacy_wrapped_tool_response_renders_as_its_value() -> None:
    assert doc.render_tool_response({"_userToolResponse": "42 files"}) == "42 files"


def test_media_a_tool_returned_follow_its_round_as_a_user_message() -> None:
    image = {"type": "media", "mimeType": "image/png", "base64Data": "aGk="}
    sound = {"type": "media", "mimeType": "audio/wav", "base64Data": "c25k"}
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in ((1, "mcp_demo_picture"), (2, "bash_plain"))
    ]
    mixed = {"type": "mixed", "parts": [{"type": "text", "text": "a dot"}, image, sound]}
    document = doc.new_document("s")
    document = doc.push_turn(document, doc.user_turn("p", [], "draw"))
    document = doc.push_turn(document, doc.llm_turn({}, "", None, calls, None))
    turn = {"tag": "UserTurn", "contents": {"userPrompt": "p", "userTools": [], "userQuery": None,
                                            "userToolResponses": [[calls[0], mixed], [calls[1], "plain"]]}}
    messages = doc.openai_messages(doc.push_turn(document, turn), "p")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[3]["content"] == "a dot\n[Media: image/png, unnamed, 3 bytes]\n[Media: audio/wav, unnamed, 3 bytes]"
    assert messages[5]["content"] == [
        {"type": "text", "text": "[media returned by tool call call_1 (mcp_demo_picture)]"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
        {"type": "input_audio", "input_audio": {"data": "c25k", "format": "wav"}},
    ]
    # text-only rounds get no such message
    plain = {**turn, "contents": {**turn["contents"], "userToolResponses": [[calls[0], "x"], [calls[1], "y"]]}}
    assert [m["role"] for m in doc.openai_messages(doc.push_turn(document, plain), "p")][-1] == "tool"


@pytest.mark.django_db
def test_an_older_session_lists_its_pending_call_over_the_api() -> None:
    original = json.loads(OLDER_PARTIAL.read_text())
    session = insert_session(
        original, id=uuid.UUID(original["sessionId"]), agent_slug="imported", status=doc.status_of(original)
    )
    answer = APIClient().get(f"/v1/sessions/{session.pk}/pending")
    assert answer.status_code == 200
    assert [(c["tool"], c["continuation_token"]) for c in answer.json()["calls"]] == [("get_weather", OLDER_TOKEN)]
