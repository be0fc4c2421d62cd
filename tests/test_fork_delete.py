"""Fork and delete (issue: mailbox and control, acceptance 6)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.demo import demo_agents, demo_script
from tests.harness import Server
from tests.streams import SseReader, WsReader


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _weather_conversation(server: Server) -> dict:
    view = _post(server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Paris?"}).json()
    token = view["pending"][0]["continuation_token"]
    return _post(server, f"/v1/continuations/{token}?wait=true", {"result": "rainy"}).json()


def test_fork_at_a_middle_turn_and_continue_with_another_agent(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    source = _weather_conversation(server)
    sid = source["session_id"]
    assert [t["tag"] for t in source["session"]["turns"]] == ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]

    middle = _post(server, f"/v1/sessions/{sid}/fork", {"at_turn": 2})
    assert middle.status_code == 201, middle.text
    fork = middle.json()
    assert middle.headers["Location"] == f"/v1/sessions/{fork['session_id']}"
    assert fork["session_id"] != sid
    assert fork["session"]["forkedFromSessionId"] == sid and fork["session"]["sessionId"] == fork["session_id"]
    assert fork["session"]["turns"] == source["session"]["turns"][2:]
    assert fork["status"] == "ready"  # its head is the LLM's call, not run yet
    assert len(llm.requests) == 2  # a fork starts no run

    other = _post(server, f"/v1/sessions/{sid}/fork", {"agent": "shell-helper"}).json()
    assert other["agent"] == "shell-helper" and other["status"] == "idle"
    assert other["session"]["turns"] == source["session"]["turns"]
    continued = _post(server, f"/v1/sessions/{other['session_id']}/messages?wait=true", {"prompt": "now count"}).json()
    assert continued["status"] == "waiting_external"
    assert continued["pending"][0]["tool"] == "bash_ask_human"
    # the source is untouched
    assert server.client.get(f"/v1/sessions/{sid}").json()["session"] == source["session"]

    # a fork of a session waiting on a deferred call does not inherit the call
    waiting = _post(server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Rome?"}).json()
    copy = _post(server, f"/v1/sessions/{waiting['session_id']}/fork").json()
    assert copy["pending"] == [] and copy["status"] == "ready"
    assert copy["session"]["turns"][0]["contents"]["userToolResponses"][0][1] == "async tool call was cancelled"

    for body, status, code in (
        ({"at_turn": 4}, 404, "unknown_turn"),
        ({"at_turn": -1}, 404, "unknown_turn"),
        ({"at_turn": "2"}, 400, "bad_request"),
        ({"agent": "nobody"}, 404, "unknown_agent"),
    ):
        answer = _post(server, f"/v1/sessions/{sid}/fork", body)
        assert (answer.status_code, answer.json()["error"]) == (status, code), body
    assert _post(server, f"/v1/sessions/{uuid.uuid4()}/fork").status_code == 404


def test_delete_a_tree_with_and_without_dry_run(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(
        {"rules": [{"when": {"last_contains": "slow"}, "reply": {"delay": 3, "content": "z"}}, *demo_script()["rules"]]}
    )
    server = start_server(demo_agents(tmp_path, llm.url))
    root = _weather_conversation(server)["session_id"]
    child = _post(
        server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Oslo?", "parent": root}
    ).json()
    grandchild = _post(server, "/v1/sessions", {"agent": "weather", "parent": child["session_id"]}).json()
    events = SseReader(f"{server.url}/v1/events")

    plan = server.client.delete(f"/v1/sessions/{root}?dry_run=true")
    assert plan.status_code == 200
    assert plan.json() == {
        "sessions": [grandchild["session_id"], child["session_id"], root],
        "continuations": 2,
        "dry_run": True,
    }
    assert server.client.get(f"/v1/sessions/{root}").status_code == 200

    # a run anywhere in the tree blocks the delete, dry run included
    _post(server, f"/v1/sessions/{grandchild['session_id']}/messages", {"prompt": "slow please"})
    for path in (f"/v1/sessions/{root}?dry_run=true", f"/v1/sessions/{root}"):
        busy = server.client.delete(path)
        assert busy.status_code == 409 and busy.json()["error"] == "run_in_progress"
    assert server.client.get(f"/v1/sessions/{grandchild['session_id']}?wait=true").json()["status"] == "idle"

    done = server.client.delete(f"/v1/sessions/{root}")
    assert done.status_code == 200 and done.json()["dry_run"] is False
    for sid in (root, child["session_id"], grandchild["session_id"]):
        assert server.client.get(f"/v1/sessions/{sid}").status_code == 404
    deleted = events.wait_for(lambda e: sum(1 for x in e if x["event"] == "session.deleted") == 3)
    assert [e["data"]["session_id"] for e in deleted if e["event"] == "session.deleted"] == done.json()["sessions"]
    events.close()
    assert server.client.delete(f"/v1/sessions/{root}").status_code == 404


def test_the_event_stream_of_a_deleted_session_ends_after_session_deleted(
    tmp_path: Path, llm_server, start_server
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url), env={"AGENTS_SSE_KEEPALIVE_SECONDS": "0.5"})
    sid = _weather_conversation(server)["session_id"]
    live = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    replaying = SseReader(f"{server.url}/v1/sessions/{sid}/events?after=0")
    socket = WsReader(f"ws://127.0.0.1:{server.port}/v1/ws/sessions/{sid}")
    everything = SseReader(f"{server.url}/v1/events")
    socket.wait_for(lambda messages: messages and messages[-1]["event"] == "snapshot")
    assert server.client.delete(f"/v1/sessions/{sid}").status_code == 200
    for reader in (live, replaying):
        assert reader.closed.wait(10), reader.raw()
        assert reader.events()[-1]["event"] == "session.deleted"
    socket.thread.join(10)
    assert not socket.thread.is_alive() and socket.parsed()[-1]["event"] == "session.deleted"
    # the stream of every session goes on
    everything.wait_for(lambda events: any(e["event"] == "session.deleted" for e in events))
    assert not everything.closed.wait(1.5)
    everything.close()
