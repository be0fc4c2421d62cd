"""The session document object: every session file round-trips through it byte for byte, and the
turns it builds for the run loop are the JSON the loop wrote as free functions (docs/sessions.md §1)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from agentfiles import document as doc
from agentfiles.session_document import CallState, SessionDocument, TrackedCall
from foundation.common import dump_json_text
from sessions_app.models import DOCUMENTS, Session
from sessions_app.store import insert_session, store
from tests.harness import FIXTURES

# a missing fixtures folder must fail the tests below, not skip them
SESSION_FILES = sorted((FIXTURES / "sessions").glob("*.json")) or [FIXTURES / "sessions" / "(missing)"]
OLDER_PARTIAL = FIXTURES / "sessions" / "partial-turn-older.json"
OLDER_TOKEN = "9a4c1e2b-7f3d-4e5a-b6c7-d8e9f0a1b2c3"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _call(n: int, name: str) -> dict[str, object]:
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}


@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_a_session_file_round_trips_byte_for_byte(path: Path) -> None:
    stored = dump_json_text(json.loads(path.read_text()))
    document = SessionDocument.from_text(path.read_text())
    # the object serialises to the text the store keeps and exports for that file...
    assert document.text() == stored
    # ... and that text comes back through the object unchanged, byte for byte
    assert SessionDocument.from_text(stored).text() == stored
    # an edit that changes nothing is the same document, not a copy with a new turnId
    assert document.edit_calls(lambda tc: False) is document


@pytest.mark.django_db
@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_a_stored_session_file_reads_back_through_the_object_byte_for_byte(path: Path) -> None:
    original = json.loads(path.read_text())
    stored = dump_json_text(original)
    session = insert_session(
        SessionDocument.from_text(path.read_text()).data,
        id=uuid.UUID(original["sessionId"]),
        agent_slug="imported",
        status=doc.status_of(original),
    )
    # read back from the Turn rows (not the cache), then from the cache, then after a store
    DOCUMENTS.forget(session.pk)
    row = Session.objects.get(pk=session.pk)
    assert SessionDocument(row.document).text() == stored
    assert SessionDocument(Session.objects.get(pk=session.pk).parsed_document()).text() == stored
    store(row, SessionDocument(row.document).data)
    DOCUMENTS.forget(session.pk)
    assert Session.objects.get(pk=session.pk).document_text() == stored


@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_the_object_reads_a_session_file_as_the_free_functions_do(path: Path) -> None:
    data = json.loads(path.read_text())
    document = SessionDocument(data)
    assert document.head is doc.head(data)
    assert document.status() == doc.status_of(data)
    assert document.pending_calls() == doc.pending_calls(data)
    assert document.answered_calls() == doc.answered_calls(data)
    assert document.openai_messages("system") == doc.openai_messages(data, "system")
    # answered or waiting on a deferred call: none of these files leaves a step anything to do
    assert not document.wants_tools()
    assert not document.wants_model()


def test_an_older_partial_head_reads_as_typed_tracked_calls() -> None:
    document = SessionDocument.from_text(OLDER_PARTIAL.read_text())
    calls = document.tracked_calls()
    assert [(tc.provider_id, tc.name, tc.state) for tc in calls] == [
        ("call_now_1", "bash_now", CallState.COMPLETED),
        ("call_weather_1", "get_weather", CallState.DEFERRED),
    ]
    assert calls[1].continuation == OLDER_TOKEN
    assert not document.has_attached_background()
    assert document.status() == "waiting_external"


def test_an_edit_writes_an_older_partial_head_in_the_current_shape_and_keeps_the_older_turns() -> None:
    document = SessionDocument.from_text(OLDER_PARTIAL.read_text())

    def detach(tc: TrackedCall) -> bool:
        if tc.state is CallState.DEFERRED:
            tc.detach("why")
        return tc.state is CallState.RUNNING

    edited = document.edit_calls(detach)
    contents = edited.head["contents"] if edited.head else {}
    assert list(contents) == ["userPrompt", "userTools", "userQuery", "trackedCalls"]
    assert [tc["tcState"] for tc in contents["trackedCalls"]] == ["Completed", "Running"]
    assert contents["trackedCalls"][1]["tcDetached"] == "why"
    assert edited.turns[1:] == document.turns[1:] and edited.turns[1] is document.turns[1]
    assert edited.turn_id != document.turn_id
    # the document it came from is left as it was
    assert document.text() == dump_json_text(json.loads(OLDER_PARTIAL.read_text()))
    assert edited.wants_model()


def test_the_turns_pushed_for_a_round_of_calls_are_the_json_agents_exe_reads() -> None:
    document = SessionDocument.new("s").push(doc.user_turn("p", [], "go"))
    document = document.push_answer({"id": "r"}, "", None, [_call(1, "slow"), _call(2, "ask"), _call(3, "now")], None)
    assert document.wants_tools() and not document.wants_model()
    slow = TrackedCall.new(_call(1, "slow"), CallState.RUNNING, {"tag": "runAsync"})
    slow.run_in_background("detached at once (attachSeconds 0)")
    ask = TrackedCall.new(_call(2, "ask"), CallState.DEFERRED, {"tag": "defer"}, continuation="tok")
    now = TrackedCall.new(_call(3, "now"), CallState.READY, {"tag": "runSync"})
    now.finish(CallState.COMPLETED, "12:00")
    pushed = document.push_calls("p", [], [slow, ask, now])
    head = json.dumps(pushed.head)
    # keys in the order the loop always wrote them; the internal ids are fresh UUIDs
    assert UUID.sub("ID", head) == (
        '{"tag": "PartialUserTurn", "contents": {"userPrompt": "p", "userQuery": null, "userTools": [], '
        '"trackedCalls": ['
        '{"tcId": "ID", "tcState": "Running", "tcCall": {"id": "call_1", "type": "function", "function": '
        '{"name": "slow", "arguments": "{}"}}, "tcResult": null, "tcContinuation": null, "tcPolicy": '
        '{"tag": "runAsync"}, "tcBackground": true, "tcDetached": "detached at once (attachSeconds 0)"}, '
        '{"tcId": "ID", "tcState": "Deferred", "tcCall": {"id": "call_2", "type": "function", "function": '
        '{"name": "ask", "arguments": "{}"}}, "tcResult": null, "tcContinuation": "tok", "tcPolicy": '
        '{"tag": "defer"}}, '
        '{"tcId": "ID", "tcState": "Completed", "tcCall": {"id": "call_3", "type": "function", "function": '
        '{"name": "now", "arguments": "{}"}}, "tcResult": "12:00", "tcContinuation": null, "tcPolicy": '
        '{"tag": "runSync"}}]}}'
    )
    assert pushed.turns[1] is document.turns[0]
    assert pushed.has_attached_background() is False and pushed.wants_model() is False
    assert [c["continuation_token"] for c in pushed.pending_calls()] == ["tok"]
    # the deferred result in: the background call still runs, so the head stays partial
    answered = pushed.apply_result("tok", "yes")
    assert answered is not None and answered.head_tag == "PartialUserTurn"
    assert pushed.apply_result("unknown", "yes") is None

    def finish(tc: TrackedCall) -> bool:
        if tc.state is not CallState.RUNNING:
            return False
        tc.finish(CallState.FAILED, "Error: boom")
        return True

    closed = answered.edit_calls(finish)
    # every call final: a full UserTurn with the responses in the model's order
    assert closed.head == doc.user_turn(
        "p", [], None, [[_call(1, "slow"), "Error: boom"], [_call(2, "ask"), "yes"], [_call(3, "now"), "12:00"]]
    )
    assert closed.status() == "ready" and closed.wants_model()


def test_a_round_whose_calls_are_all_final_is_pushed_as_a_full_user_turn() -> None:
    document = SessionDocument.new("s").push(doc.user_turn("p", [], "go"))
    document = document.push_answer({}, "", None, [_call(1, "now")], None)
    entry = TrackedCall.new(_call(1, "now"), CallState.READY, {"tag": "runSync"})
    entry.finish(CallState.FAILED, "Error: no")
    pushed = document.push_calls("p", [{"name": "now"}], [entry])
    assert pushed.head == doc.user_turn("p", [{"name": "now"}], None, [[_call(1, "now"), "Error: no"]])


def test_an_empty_document_leaves_nothing_to_do() -> None:
    document = SessionDocument.new(str(uuid.uuid4()))
    assert document.head is None and document.head_tag is None
    assert document.head_tool_calls() == [] and document.tracked_calls() == []
    assert not document.wants_model() and not document.wants_tools()
    assert document.status() == "ready"
    assert document.text() == dump_json_text(document.data)
    with pytest.raises(json.JSONDecodeError):
        SessionDocument.from_text("{not json")
