"""Session files of older agents-exe versions go on here, and documents this server cannot read
concern only their own session (issue 11, acceptance 2; docs/sessions.md §1.9)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from devtools.mockllm import MockLlmServer
from sessions_app import runner
from sessions_app.models import DOCUMENTS, Continuation, Event, Session
from sessions_app.services.recovery import recover_stale_runs
from sessions_app.services.sessions import session_import
from sessions_app.store import insert_session, run_fields
from tests.harness import FIXTURES, PROCESS_TIMEOUT, ROOT, Server, base_env, write_agent, write_tool

OLDER = FIXTURES / "sessions" / "partial-turn-older.json"
OLDER_TOKEN = "9a4c1e2b-7f3d-4e5a-b6c7-d8e9f0a1b2c3"


def _import(server: Server, path: Path, agent: str) -> subprocess.CompletedProcess[str]:
    """``agents manage import_session`` on the server's database, as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "manage", "import_session", str(path), "--agent", agent],
        cwd=ROOT,
        env=base_env(DATABASE_URL=f"sqlite:///{server.db}"),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


def test_an_older_session_file_imports_reads_over_the_api_and_continues_with_a_new_message(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "answered: {last_content}"}}]})
    write_tool(tmp_path / "tools", "now", {"slug": "now", "description": "the date", "args": []}, "date")
    agent = write_agent(
        tmp_path,
        "weather-older",
        llm.url,
        toolDirectory="tools",
        toolCallPolicyConfig={"rules": [{"tool": "get_weather", "disposition": {"tag": "defer"}}]},
    )
    server = start_server([agent])
    original = json.loads(OLDER.read_text())
    imported = _import(server, OLDER, "weather-older")
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.split() == [original["sessionId"], "waiting_external"]
    sid = original["sessionId"]

    view = server.client.get(f"/v1/sessions/{sid}").json()
    assert view["status"] == "waiting_external"
    assert view["session"] == original
    assert [(c["tool"], c["continuation_token"]) for c in view["pending"]] == [("get_weather", OLDER_TOKEN)]
    # a second import of the same file is refused, naming why
    again = _import(server, OLDER, "weather-older")
    assert again.returncode == 1 and f"session {sid} exists already" in again.stderr

    # a new message waits for the deferred call; the result completes it, and the run answers both
    queued = server.client.post(f"/v1/sessions/{sid}/messages", content=json.dumps({"prompt": "And tomorrow?"}))
    assert queued.status_code == 200 and queued.json()["status"] == "waiting_external", queued.text
    assert llm.requests == []
    done = server.client.post(f"/v1/continuations/{OLDER_TOKEN}?wait=true", content=json.dumps({"result": "sunny"}))
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text
    messages = llm.requests[-1]["messages"]
    tools = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert tools[-2:] == [("call_now_1", "2026-03-06T14:02:11Z"), ("call_weather_1", "sunny")]
    assert messages[-1]["role"] == "user" and "And tomorrow?" in messages[-1]["content"]
    turns = done.json()["session"]["turns"]
    assert turns[0]["contents"]["llmResponse"]["responseText"].startswith("answered: ")
    # the turns below the head are the file's, untouched
    assert turns[2:] == original["turns"][1:]
    mail = server.client.get(f"/v1/sessions/{sid}/mail?unread=true").json()
    assert mail["mail"] == []


BAD_TURN = {"tag": "ToolTurn", "contents": {}}


def _bad_document() -> dict:
    document = json.loads(OLDER.read_text())
    document["sessionId"] = str(uuid.uuid4())
    document["turns"].insert(1, BAD_TURN)
    return document


def _insert_unreadable(**fields: object) -> Session:
    """A session whose stored document this server cannot read, as another program wrote it (not
    through the import, which refuses it) and as any process that did not write it finds it."""
    session = insert_session(_bad_document(), id=uuid.uuid4(), agent_slug="any", **fields)
    DOCUMENTS.forget(session.pk)
    return session


@pytest.mark.django_db
def test_a_document_this_server_cannot_read_is_refused_on_import() -> None:
    with pytest.raises(Exception) as caught:
        session_import(document=_bad_document(), agent_slug="any")
    assert "turns[1]: unknown turn tag 'ToolTurn'" in str(caught.value)
    with pytest.raises(Exception, match="is not a UUID"):
        session_import(document={"sessionId": "x", "turns": []}, agent_slug="any")
    assert not Session.objects.exists()


@pytest.mark.django_db
def test_an_imported_deferred_call_gets_its_continuation() -> None:
    session = session_import(document=json.loads(OLDER.read_text()), agent_slug="any")
    row = Continuation.objects.get(pk=OLDER_TOKEN)
    assert (row.session_id, row.provider_call_id, row.completed_at) == (session.pk, "call_weather_1", None)
    done = APIClient().post(
        f"/v1/continuations/{OLDER_TOKEN}", {"result": "sunny", "resume": False}, format="json"
    )
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "ready"
    assert done.json()["session"]["turns"][0]["tag"] == "UserTurn"


@pytest.mark.django_db
def test_an_unreadable_stored_document_answers_a_clear_error_for_that_session_only() -> None:
    bad = _insert_unreadable(status="ready")
    good = session_import(document=json.loads(OLDER.read_text()), agent_slug="any")
    client = APIClient()
    for path in (f"/v1/sessions/{bad.pk}", f"/v1/sessions/{bad.pk}/pending"):
        answer = client.get(path)
        assert answer.status_code == 422, answer.content
        assert answer.json() == {
            "error": "unreadable_session",
            "message": f"session {bad.pk} cannot be read: turns[1]: unknown turn tag 'ToolTurn' "
            "(expected UserTurn, LlmTurn, PartialUserTurn)",
        }
    assert client.get(f"/v1/sessions/{good.pk}").status_code == 200
    assert {s["session_id"] for s in client.get("/v1/sessions").json()["sessions"]} == {str(bad.pk), str(good.pk)}


@pytest.mark.django_db(transaction=True)
def test_a_run_of_an_unreadable_session_fails_saying_why() -> None:
    bad = _insert_unreadable(**run_fields("until_blocked"))
    runner.run_session(str(bad.pk), str(bad.run_id))
    stored = Session.objects.get(pk=bad.pk)
    assert stored.status == "failed" and stored.run_owner is None
    assert stored.status_detail.startswith(f"session {bad.pk} cannot be read: turns[1]: unknown turn tag")
    kinds = list(Event.objects.filter(session_id=bad.pk).values_list("kind", flat=True))
    assert kinds[-3:] == ["session.failed", "session.updated", "run.stopped"]


@pytest.mark.django_db(transaction=True)
def test_recovery_fails_an_unreadable_session_and_goes_on_with_the_others() -> None:
    bad = _insert_unreadable(**{**run_fields("until_blocked"), "run_owner": "dead"})
    good = session_import(document=json.loads(OLDER.read_text()), agent_slug="any")
    Session.objects.filter(pk=good.pk).update(**{**run_fields("until_blocked"), "run_owner": "dead"})
    recovered, _ = recover_stale_runs(all_claimed=True)
    assert set(recovered) == {str(bad.pk), str(good.pk)}
    assert Session.objects.get(pk=bad.pk).status == "failed"
    assert Session.objects.get(pk=good.pk).status == "waiting_external"
