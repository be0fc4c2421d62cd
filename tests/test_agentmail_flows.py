"""Agent-to-agent mail end to end (issue 16, acceptance 6): two agents driven by the scripted model
over HTTP exchange messages with ``send-message`` and ``wait``; a ``spawn-session`` child and a
``watch-session`` keep working across a restart, on the embedded default and scaled out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, Worker, wait_until, write_agent

SYS = "system_sys_system_info"
CAPABILITIES = ["send-message", "spawn-session", "watch-session", "unwatch-session", "wait"]


def _system(**extra: Any) -> list[dict[str, Any]]:
    return [{"tag": "SystemToolbox", "contents": {"Name": "sys", "Capabilities": CAPABILITIES, **extra}}]


def _call(**arguments: Any) -> dict[str, Any]:
    return {"name": SYS, "arguments": arguments}


def _agents(tmp: Path, llm: MockLlmServer) -> list[Path]:
    kid = write_agent(tmp, "kid", llm.url)
    alice = write_agent(
        tmp,
        "alice",
        llm.url,
        builtinToolboxes=_system(),
        extraAgents=[{"slug": "kid", "path": "kid.json"}],
        mailScope="all",
        maxWaitSeconds=60,
    )
    bob = write_agent(tmp, "bob", llm.url, builtinToolboxes=_system(), mailScope="all", wakeOn=["user", "peer"])
    carol = write_agent(tmp, "carol", llm.url, mailboxMaxUnread=1, wakeOn=[])
    return [alice, bob, kid, carol]


def _post(server: Server, path: str, body: dict[str, Any]) -> Any:
    answer = server.client.post(path, content=json.dumps(body))
    assert answer.status_code in (200, 201, 202), answer.text
    return answer.json()


def _settled(server: Server, sid: str, status: str = "idle") -> dict[str, Any]:
    return wait_until(lambda: (v := server.client.get(f"/v1/sessions/{sid}").json())["status"] == status and v, 60)


def _mail(server: Server, sid: str) -> list[dict[str, Any]]:
    return server.client.get(f"/v1/sessions/{sid}/mail").json()["mail"]


def _answers(llm: MockLlmServer, agent: str) -> list[str]:
    """The replies the scripted model was asked for by ``agent``: the last message of each request."""
    seen = []
    for body in llm.requests:
        if f"You are {agent}." in json.dumps(body["messages"][0]):
            last = body["messages"][-1]
            seen.append(last["content"] if isinstance(last["content"], str) else json.dumps(last["content"]))
    return seen


def test_two_agents_exchange_messages_and_wait_returns_on_mail(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "ready"}}]})
    server = start_server(_agents(tmp_path, llm))
    bob = _post(server, "/v1/sessions", {"agent": "bob", "prompt": "hello bob"})["session_id"]
    _settled(server, bob)
    rules: list[dict[str, Any]] = [
        {"when": {"last_role": "user", "last_contains": "PONG from bob"}, "reply": {"content": "alice got pong"}},
        {
            "when": {"last_role": "tool", "any_contains": "PING-BOB", "last_contains": "recipient_status"},
            "reply": {"tool_calls": [_call(capability="wait", timeout_seconds=60)]},
        },
        {
            "when": {"last_role": "user", "last_contains": "PING-BOB"},
            "reply": {
                "tool_calls": [_call(capability="send-message", to=bob, text="PING from alice", expects_reply=True)]
            },
        },
        {"when": {"last_role": "tool", "any_contains": "PING from alice"}, "reply": {"content": "bob replied"}},
    ]
    llm.script["rules"][:0] = rules
    alice = _post(server, "/v1/sessions", {"agent": "alice", "prompt": "PING-BOB"})["session_id"]
    llm.script["rules"].insert(
        3,
        {
            "when": {"last_role": "user", "last_contains": "PING from alice"},
            "reply": {
                "delay": 2,
                "tool_calls": [_call(capability="send-message", to=alice, text="PONG from bob")],
            },
        },
    )
    final = _settled(server, alice)
    assert final["status"] == "idle"
    _settled(server, bob)
    to_bob = [m for m in _mail(server, bob) if m["body"]["tag"] == "agentMessage"]
    to_alice = [m for m in _mail(server, alice) if m["body"]["tag"] == "agentMessage"]
    assert [(m["from"], m["hops"], m["body"]["expectsReply"]) for m in to_bob] == [
        ({"tag": "session", "sessionId": alice, "agent": "alice"}, 0, True)
    ]
    assert [(m["from"]["sessionId"], m["hops"], m["body"]["text"]) for m in to_alice] == [(bob, 1, "PONG from bob")]
    last_alice = [b for b in llm.requests if "You are alice." in json.dumps(b["messages"][0])][-1]["messages"]
    # wait blocked until bob's answer (bob's model takes two seconds) and the mail it woke for
    # reaches the model right after its result
    waited = json.loads(last_alice[-2]["content"])
    assert (waited["capability"], waited["data"]) == ("wait", {"woken_by": "mail", "unread": 1})
    assert waited["executionTime"] >= 1.5
    assert last_alice[-1] == {
        "role": "user",
        "content": f'[mail {to_alice[0]["id"]} from session {bob} (agent "bob")]\nPONG from bob',
    }
    bob_seen = _answers(llm, "bob")
    assert any("PING from alice" in s and "expects reply" in s for s in bob_seen)


def _start(
    files: list[Path],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    scaled: dict[str, Any] | None,
) -> tuple[Server, Worker | None]:
    """The embedded default, or scaled out: a server and a separate Celery worker sharing
    PostgreSQL and Redis."""
    if scaled is None:
        return start_server(files), None
    return start_server(files, **scaled), start_worker(files, **scaled)


@pytest.mark.parametrize("mode", ["embedded", "scaled"])
def test_spawned_sessions_and_watches_survive_a_restart(
    mode: str,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    request: pytest.FixtureRequest,
) -> None:
    scaled = None
    if mode == "scaled":
        scaled = {
            "db": request.getfixturevalue("postgres_url"),
            "env": {"REDIS_URL": request.getfixturevalue("redis_url")},
        }
    llm = llm_server({"rules": [{"reply": {"content": "ready"}}]})
    files = _agents(tmp_path, llm)
    server, worker = _start(files, start_server, start_worker, scaled)
    bob = _post(server, "/v1/sessions", {"agent": "bob", "prompt": "hello bob"})["session_id"]
    _settled(server, bob)
    llm.script["rules"][:0] = [
        {"when": {"last_role": "user", "last_contains": "KID-TASK"}, "reply": {"content": "kid says 42"}},
        {"when": {"last_role": "user", "last_contains": "KID-AGAIN"}, "reply": {"content": "kid says 43"}},
        {"when": {"last_role": "user", "last_contains": "kid says"}, "reply": {"content": "alice heard kid"}},
        {"when": {"last_role": "user", "last_contains": "watched session"}, "reply": {"content": "alice saw bob"}},
        {
            "when": {"last_role": "user", "last_contains": "SPAWN-KID"},
            "reply": {"tool_calls": [_call(capability="spawn-session", agent="kid", message="KID-TASK")]},
        },
        {
            "when": {"last_role": "user", "last_contains": "WATCH-BOB"},
            "reply": {"tool_calls": [_call(capability="watch-session", session=bob, events=["run.stopped"])]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
    ]
    alice = _post(server, "/v1/sessions", {"agent": "alice", "prompt": "SPAWN-KID"})["session_id"]
    kid = wait_until(lambda: server.client.get(f"/v1/sessions?parent={alice}").json()["sessions"], 30)[0]
    assert kid["agent"] == "kid"
    wait_until(lambda: any(m["body"].get("text") == "kid says 42" for m in _mail(server, alice)), 60)
    _settled(server, kid["session_id"])
    _settled(server, alice)
    assert "alice heard kid" in json.dumps(server.client.get(f"/v1/sessions/{alice}").json())
    watcher = _post(server, "/v1/sessions", {"agent": "alice", "prompt": "WATCH-BOB"})["session_id"]
    _settled(server, watcher)
    watched = json.loads(_answers(llm, "alice")[-1])
    assert (watched["data"]["session"], watched["data"]["events"]) == (bob, ["run.stopped"])

    server.stop()
    if worker is not None:
        worker.stop()
    if scaled is None:
        server = start_server(files, db=server.db)
    else:
        server, worker = _start(files, start_server, start_worker, scaled)

    # the child still answers its parent by mail
    _post(server, f"/v1/sessions/{kid['session_id']}/messages", {"prompt": "KID-AGAIN"})
    wait_until(lambda: any(m["body"].get("text") == "kid says 43" for m in _mail(server, alice)), 60)
    kid_mail = [m for m in _mail(server, alice) if m["body"]["tag"] == "agentMessage"]
    assert [m["from"] for m in kid_mail] == [{"tag": "session", "sessionId": kid["session_id"], "agent": "kid"}] * 2
    # the watch still forwards bob's events
    _post(server, f"/v1/sessions/{bob}/messages", {"prompt": "hello again"})
    forwarded = wait_until(lambda: [m for m in _mail(server, watcher) if m["body"]["tag"] == "watchedEvent"], 60)
    assert forwarded[0]["from"] == {"tag": "system", "source": "watch"}
    assert forwarded[0]["body"]["sessionId"] == bob
    assert forwarded[0]["body"]["event"] == "run.stopped"
    wait_until(lambda: "alice saw bob" in json.dumps(server.client.get(f"/v1/sessions/{watcher}").json()), 60)


def test_a_full_mailbox_answers_429_over_http_and_still_takes_controls(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server(_agents(tmp_path, llm_server({"rules": [{"reply": {"content": "ok"}}]})))
    carol = _post(server, "/v1/sessions", {"agent": "carol"})["session_id"]
    note = {"body": {"tag": "agentMessage", "text": "one"}}
    assert _post(server, f"/v1/sessions/{carol}/mail", note)["seq"] == 1
    refused = server.client.post(f"/v1/sessions/{carol}/mail", content=json.dumps(note))
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "mailbox_full",
        "message": f"session {carol} already holds 1 unread messages (mailboxMaxUnread)",
    }
    pause = {"body": {"tag": "control", "message": {"tag": "pause"}}}
    assert _post(server, f"/v1/sessions/{carol}/mail", pause)["seq"] == 2
    assert [m["seq"] for m in _mail(server, carol)] == [1, 2]
