"""Owners, bearer tokens and session tokens over real HTTP (issue: owners and operators, acceptance 1-2).

The server runs with ``--auth-tokens`` (alice with two tokens, bob by SHA-256, root) and
``--admin-owners root``. Every refusal is checked for its status, its code and an unchanged
database.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import ALICE_SECOND, TOKENS, bearer, owner, refused, write_tokens, ws_open
from tests.streams import SseReader

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "chat"}, "reply": {"content": "just chatting"}},
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}},
        {"reply": {"content": "answered"}},
    ]
}
PARAMETERS = [
    {"name": "region", "scope": "session", "required": False},
    {"name": "limit", "scope": "session", "required": False},
    {"name": "temperature", "scope": "process", "required": False},
    {"name": "hint", "scope": "message", "required": False},
    {"name": "password", "scope": "session", "secret": True, "required": False},
]


def _agent(tmp: Path, llm: MockLlmServer) -> Path:
    return write_agent(
        tmp,
        "deferring",
        llm.url,
        toolCallPolicyConfig={"default": {"tag": "defer", "reason": "external"}, "rules": []},
        parameters=PARAMETERS,
    )


@pytest.fixture
def server(tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]) -> Server:
    agent = _agent(tmp_path, llm_server(SCRIPT))
    tokens = write_tokens(tmp_path)
    return start_server([agent], extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"])


def _create(server: Server, who: str, prompt: str = "look it up", **extra: object) -> dict:
    body = {"agent": "deferring", "prompt": prompt, **extra}
    answer = server.client.post("/v1/sessions?wait=true", headers=owner(who), content=json.dumps(body))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _same_as_missing(server: Server, method: str, template: str, sid: str, headers: dict, body: object = None) -> None:
    """Bob's request on alice's session answers exactly what it answers on a missing session."""
    missing = str(uuid.uuid4())
    answer = server.client.request(method, template.format(sid), headers=headers, content=json.dumps(body))
    expected = server.client.request(method, template.format(missing), headers=headers, content=json.dumps(body))
    assert answer.status_code == expected.status_code, (method, template, answer.text, expected.text)
    assert answer.status_code in (404, 405), answer.text
    assert answer.json()["error"] == expected.json()["error"]
    assert answer.json()["message"].replace(sid, missing) == expected.json()["message"]
    # and nothing was changed by it
    refused(
        server, method, template.format(sid), answer.status_code, answer.json()["error"], headers=headers, body=body
    )


def test_two_owners_see_nothing_of_each_other_and_the_admin_sees_all(server: Server) -> None:
    alice_events = SseReader(f"{server.url}/v1/events?access_token={TOKENS['alice']}")
    bob_events = SseReader(f"{server.url}/v1/events", headers=owner("bob"))
    all_events = SseReader(f"{server.url}/v1/events?scope=all", headers=owner("root"))
    root_own = SseReader(f"{server.url}/v1/events?scope=owner", headers=owner("root"))
    assert {r.status for r in (alice_events, bob_events, all_events, root_own)} == {200}

    alice = _create(server, "alice")
    assert alice["owner"] == "alice" and alice["status"] == "waiting_external"
    sid = alice["session_id"]
    token = alice["pending"][0]["continuation_token"]
    child = server.client.post(
        "/v1/sessions",
        headers=owner("alice"),
        content=json.dumps({"agent": "deferring", "prompt": "x", "run": "none", "parent": sid}),
    ).json()
    # a sub-session belongs to the owner of its root
    assert child["owner"] == "alice"
    bob = _create(server, "bob")
    assert bob["owner"] == "bob"

    # listings: own top-level sessions only; children through ?parent=
    listed = server.client.get("/v1/sessions", headers=owner("alice")).json()["sessions"]
    assert [s["session_id"] for s in listed] == [sid]
    assert [s["session_id"] for s in server.client.get("/v1/sessions", headers=owner("bob")).json()["sessions"]] == [
        bob["session_id"]
    ]
    children = server.client.get(f"/v1/sessions?parent={sid}", headers=owner("alice")).json()["sessions"]
    assert [s["session_id"] for s in children] == [child["session_id"]]
    # alice's second token is alice too
    assert server.client.get(f"/v1/sessions/{sid}", headers=bearer(ALICE_SECOND)).status_code == 200

    # bob: every route of alice's sessions answers as for a missing session
    bobs = owner("bob")
    for target in (sid, child["session_id"]):
        _same_as_missing(server, "GET", "/v1/sessions/{}", target, bobs)
        _same_as_missing(server, "GET", "/v1/sessions/{}?wait=true&timeout=1", target, bobs)
        _same_as_missing(server, "GET", "/v1/sessions/{}/pending", target, bobs)
        _same_as_missing(server, "POST", "/v1/sessions/{}/messages", target, bobs, {"prompt": "chat"})
        _same_as_missing(server, "POST", "/v1/sessions/{}/resume", target, bobs, {})
        _same_as_missing(server, "PUT", "/v1/sessions/{}/params", target, bobs, {"region": "eu"})
        _same_as_missing(server, "DELETE", "/v1/sessions/{}/token", target, bobs)
        _same_as_missing(server, "GET", "/v1/sessions/{}/events", target, bobs)
        _same_as_missing(server, "DELETE", "/v1/sessions/{}/pending", target, bobs)
        ws = server.url.replace("http", "ws") + f"/v1/ws/sessions/{target}"
        assert ws_open(ws, headers=bobs) == ws_open(ws.replace(target, str(uuid.uuid4())), headers=bobs) == 403
    refused(server, "GET", f"/v1/sessions?parent={sid}", 404, "unknown_session", headers=bobs)
    refused(
        server,
        "POST",
        "/v1/sessions",
        404,
        "unknown_session",
        headers=bobs,
        body={"agent": "deferring", "prompt": "x", "parent": sid},
    )
    mine = refused(
        server, "POST", f"/v1/continuations/{token}", 404, "unknown_token", headers=bobs, body={"result": "x"}
    )
    other = str(uuid.uuid4())
    missing = refused(
        server, "POST", f"/v1/continuations/{other}", 404, "unknown_token", headers=bobs, body={"result": "x"}
    )
    assert mine["message"].replace(token, other) == missing["message"]

    # alice still can: the websocket, and the continuation that resumes her session
    ws = server.url.replace("http", "ws") + f"/v1/ws/sessions/{sid}"
    assert json.loads(ws_open(ws, headers=owner("alice"))) == {"event": "replay", "data": {"replay": "live"}}
    assert json.loads(ws_open(ws + f"?access_token={TOKENS['alice']}")) == {
        "event": "replay",
        "data": {"replay": "live"},
    }
    done = server.client.post(
        f"/v1/continuations/{token}?wait=true", headers=owner("alice"), content=json.dumps({"result": "found"})
    )
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text

    # streams: each owner sees their own sessions (children included), the admin's scope=all sees both
    def sessions_of(reader: SseReader) -> set[str]:
        return {e["data"]["session_id"] for e in reader.events()}

    all_events.wait_for(lambda e: any(x["event"] == "run.stopped" and x["data"]["session_id"] == sid for x in e))
    alice_events.wait_for(lambda e: any(x["event"] == "run.stopped" and x["data"]["session_id"] == sid for x in e))
    assert sessions_of(alice_events) == {sid, child["session_id"]}
    assert {e["data"]["owner"] for e in alice_events.events()} == {"alice"}
    assert sessions_of(bob_events) == {bob["session_id"]}
    assert sessions_of(all_events) == {sid, child["session_id"], bob["session_id"]}
    assert root_own.events() == []
    refused(server, "GET", "/v1/events?scope=all", 403, "forbidden", headers=owner("alice"))
    all_ws = server.url.replace("http", "ws") + "/v1/ws/events?scope=all"
    assert ws_open(all_ws, headers=owner("alice")) == 403
    assert json.loads(ws_open(all_ws, headers=owner("root")))["event"] == "replay"
    for reader in (alice_events, bob_events, all_events, root_own):
        reader.close()


def test_missing_or_unknown_tokens_answer_401_and_tokens_stay_out_of_the_logs(server: Server) -> None:
    sid = _create(server, "alice", "chat")["session_id"]
    for headers in ({}, bearer("not-a-token"), {"Authorization": f"Basic {TOKENS['alice']}"}, bearer("st_" + "0" * 64)):
        refused(server, "GET", "/v1/sessions", 401, "unauthorized", headers=headers)
        refused(server, "POST", "/v1/sessions", 401, "unauthorized", headers=headers, body={"agent": "deferring"})
        refused(server, "GET", f"/v1/sessions/{sid}", 401, "unauthorized", headers=headers)
        refused(server, "GET", f"/v1/sessions/{sid}/events", 401, "unauthorized", headers=headers)
        refused(server, "GET", "/v1/events", 401, "unauthorized", headers=headers)
        refused(server, "GET", "/v1/agents", 401, "unauthorized", headers=headers)
        refused(server, "PUT", "/v1/agents/x", 401, "unauthorized", headers=headers, body={})
        refused(server, "POST", f"/v1/continuations/{uuid.uuid4()}", 401, "unauthorized", headers=headers)
        refused(server, "GET", "/v1/no-such-path", 401, "unauthorized", headers=headers)
    # ?access_token= is read on the two event streams only (docs/decisions.md §8)
    refused(server, "GET", f"/v1/sessions?access_token={TOKENS['alice']}", 401, "unauthorized")
    refused(server, "GET", f"/v1/sessions/{sid}?access_token={TOKENS['alice']}", 401, "unauthorized")
    stream = SseReader(f"{server.url}/v1/sessions/{sid}/events?access_token={TOKENS['alice']}")
    assert stream.status == 200
    stream.wait_for(lambda e: e and e[0]["event"] == "snapshot")
    stream.close()
    assert ws_open(server.url.replace("http", "ws") + "/v1/ws/events") == 403
    assert ws_open(server.url.replace("http", "ws") + "/v1/ws/events", headers=bearer("nope")) == 403
    # open without a token
    assert server.client.get("/healthz").status_code == 200
    assert server.client.get("/openapi.json").status_code == 200
    assert server.client.get("/").status_code == 200
    assert server.client.get("/admin/login/").status_code == 200
    server.client.get(f"/v1/sessions/{sid}?access_token={TOKENS['bob']}", headers=owner("alice"))
    log = server.process.output()
    assert '"authentication": "bearer"' in log
    for token in (*TOKENS.values(), ALICE_SECOND):
        assert token not in log


def test_a_session_token_allows_exactly_its_routes_until_revoked(server: Server) -> None:
    created = _create(server, "alice", "chat with me", session_token=True, seal=True)
    sid, token = created["session_id"], created["session_token"]
    assert re.fullmatch(r"st_[0-9a-f]{64}", token)
    assert created["sealed"] is True and created["status"] == "idle"
    other = _create(server, "alice", "chat too")["session_id"]
    # only its digest is stored, and reads never show it
    with sqlite3.connect(server.db) as connection:
        [(digest,)] = connection.execute(
            "SELECT session_token_sha256 FROM sessions_app_session WHERE id = ?", (sid.replace("-", ""),)
        ).fetchall()
    assert digest == hashlib.sha256(token.encode()).hexdigest()
    view = server.client.get(f"/v1/sessions/{sid}", headers=owner("alice")).json()
    assert "session_token" not in view and token not in json.dumps(view) and view["sealed"] is True
    st = bearer(token)

    # its four routes
    assert server.client.get(f"/v1/sessions/{sid}", headers=st).status_code == 200
    assert server.client.get(f"/v1/sessions/{sid}?wait=true", headers=st).status_code == 200
    for reader in (
        SseReader(f"{server.url}/v1/sessions/{sid}/events?access_token={token}"),
        SseReader(f"{server.url}/v1/sessions/{sid}/events", headers=st),
    ):
        assert reader.status == 200
        reader.wait_for(lambda e: e and e[0]["event"] == "snapshot")
        reader.close()
    ws = server.url.replace("http", "ws") + f"/v1/ws/sessions/{sid}"
    assert json.loads(ws_open(f"{ws}?access_token={token}"))["event"] == "replay"
    message = server.client.post(f"/v1/sessions/{sid}/messages?wait=true", headers=st, content='{"prompt": "chat on"}')
    assert message.status_code == 200 and message.json()["status"] == "idle", message.text
    for body in ({"prompt": "chat", "params": {"region": "eu"}}, {"prompt": "chat", "params": {}}):
        refused(server, "POST", f"/v1/sessions/{sid}/messages", 403, "forbidden_params", headers=st, body=body)
    refused(server, "POST", f"/v1/sessions/{sid}/cancel", 403, "forbidden_params", headers=st, body={"params": {}})
    # cancel is one of its routes: whatever the server answers, it is not an authentication refusal
    assert server.client.post(f"/v1/sessions/{sid}/cancel", headers=st).status_code not in (401, 403)

    # the session's other paths: 403 forbidden
    for method, rest in (
        ("GET", "/pending"),
        ("POST", "/resume"),
        ("PUT", "/params"),
        ("DELETE", "/token"),
        ("DELETE", ""),
        ("PUT", ""),
        ("POST", "/fork"),
        ("POST", "/mail"),
        ("GET", "/mail"),
        ("POST", "/pause"),
        ("POST", "/cancel-attached"),
        ("GET", "/messages"),
    ):
        refused(server, method, f"/v1/sessions/{sid}{rest}", 403, "forbidden", headers=st, body={})
    # everything outside the session: 401, as for no token at all
    for method, path in (
        ("GET", "/v1/sessions"),
        ("POST", "/v1/sessions"),
        ("GET", f"/v1/sessions/{other}"),
        ("POST", f"/v1/sessions/{other}/messages"),
        ("GET", f"/v1/sessions/{other}/events"),
        ("GET", f"/v1/events?access_token={token}"),
        ("GET", "/v1/events"),
        ("GET", "/v1/agents"),
        ("GET", "/v1/agents/deferring"),
        ("POST", f"/v1/continuations/{uuid.uuid4()}"),
    ):
        refused(server, method, path, 401, "unauthorized", headers=st, body={"prompt": "chat"})
    refused(server, "GET", f"/v1/sessions/{other}/events?access_token={token}", 401, "unauthorized")
    assert ws_open(server.url.replace("http", "ws") + f"/v1/ws/events?access_token={token}") == 403
    assert ws_open(server.url.replace("http", "ws") + f"/v1/ws/sessions/{other}?access_token={token}") == 403

    # bob cannot revoke it; alice can, and then it is just an unknown token
    refused(server, "DELETE", f"/v1/sessions/{sid}/token", 404, "unknown_session", headers=owner("bob"))
    revoked = server.client.delete(f"/v1/sessions/{sid}/token", headers=owner("alice"))
    assert revoked.status_code == 200 and revoked.json()["session_id"] == sid
    refused(server, "GET", f"/v1/sessions/{sid}", 401, "unauthorized", headers=st)
    refused(server, "GET", f"/v1/sessions/{sid}/events?access_token={token}", 401, "unauthorized")
    refused(server, "POST", f"/v1/sessions/{sid}/messages", 401, "unauthorized", headers=st, body={"prompt": "chat"})
    assert ws_open(f"{ws}?access_token={token}") == 403
    # revoking again is harmless
    assert server.client.delete(f"/v1/sessions/{sid}/token", headers=owner("alice")).status_code == 200
    log = server.process.output()
    assert token not in log


def test_put_params_sets_session_values_for_the_owner(server: Server) -> None:
    sid = _create(server, "alice", "chat", session_token=True, seal=True)["session_id"]
    alice = owner("alice")
    version = server.client.get(f"/v1/sessions/{sid}", headers=alice).json()["version"]
    first = server.client.put(f"/v1/sessions/{sid}/params", headers=alice, content='{"region": "eu"}')
    assert first.status_code == 200, first.text
    assert first.json()["params"] == {"region": "eu"} and first.json()["version"] == version + 1
    # the wrapped form, merged over the stored values; the owner keeps this right on a sealed session
    second = server.client.put(f"/v1/sessions/{sid}/params", headers=alice, content='{"params": {"limit": 5}}')
    assert second.json()["params"] == {"region": "eu", "limit": 5}
    cleared = server.client.put(f"/v1/sessions/{sid}/params", headers=alice, content='{"region": null}')
    assert cleared.json()["params"] == {"limit": 5}
    assert server.client.get(f"/v1/sessions/{sid}", headers=alice).json()["params"] == {"limit": 5}
    listed = server.client.get("/v1/sessions", headers=alice).json()["sessions"]
    assert [s["params"] for s in listed if s["session_id"] == sid] == [{"limit": 5}]

    path = f"/v1/sessions/{sid}/params"
    refused(server, "PUT", path, 422, "unknown_params", headers=alice, body={"regoin": "eu", "region": "us"})
    refused(server, "PUT", path, 403, "forbidden_params", headers=alice, body={"temperature": 0.2})
    refused(server, "PUT", path, 422, "invalid_params", headers=alice, body={"hint": "short"})
    refused(server, "PUT", path, 422, "invalid_params", headers=alice, body={"password": 42})
    # a secret is held outside the database: named in the view, never shown
    held = server.client.put(path, headers=alice, content='{"password": "hunter2"}')
    assert held.status_code == 200 and held.json()["secret_params"] == ["password"]
    assert held.json()["params"] == {"limit": 5} and "hunter2" not in held.text
    refused(server, "PUT", path, 400, "bad_request", headers=alice, body=["region"])
    refused(server, "PUT", f"/v1/sessions/{uuid.uuid4()}/params", 404, "unknown_session", headers=alice, body={})


def test_without_auth_tokens_there_are_no_owners_and_no_session_tokens(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_agent(tmp_path, llm_server(SCRIPT))])
    for flag in ("seal", "session_token"):
        refused(server, "POST", "/v1/sessions", 400, "bad_request", body={"agent": "deferring", flag: True})
    created = server.client.post("/v1/sessions?wait=true", content='{"agent": "deferring", "prompt": "chat"}').json()
    assert created["owner"] is None and created["sealed"] is False
    # any token, or none, is the same nobody
    assert server.client.get(f"/v1/sessions/{created['session_id']}", headers=bearer("whatever")).status_code == 200
    changed = server.client.put(f"/v1/sessions/{created['session_id']}/params", content='{"region": "eu"}')
    assert changed.status_code == 200 and changed.json()["params"] == {"region": "eu"}
    refused(server, "PUT", "/v1/agents/x", 403, "forbidden", body={})
    assert '"authentication": "none"' in server.process.output()
    paths = server.client.get("/openapi.json").json()["paths"]
    assert "put" in paths["/v1/sessions/{session_id}/params"]
    assert "delete" in paths["/v1/sessions/{session_id}/token"]
    assert {"get", "put", "delete"} <= set(paths["/v1/agents/{slug}"])


def test_mailbox_fork_and_delete_routes_keep_owners_apart(server: Server) -> None:
    mine = _create(server, "alice", prompt="chat")
    sid = mine["session_id"]
    for method, template, body in (
        ("POST", "/v1/sessions/{}/mail", {"body": {"tag": "userMessage", "query": "hi"}}),
        ("GET", "/v1/sessions/{}/mail", None),
        ("POST", "/v1/sessions/{}/pause", None),
        ("POST", "/v1/sessions/{}/cancel", None),
        ("POST", "/v1/sessions/{}/cancel-attached", None),
        ("POST", "/v1/sessions/{}/fork", {}),
        ("DELETE", "/v1/sessions/{}", None),
    ):
        _same_as_missing(server, method, template, sid, owner("bob"), body)
    # alice's own mail records her as the sender
    sent = server.client.post(
        f"/v1/sessions/{sid}/mail",
        headers=owner("alice"),
        content=json.dumps({"body": {"tag": "control", "message": {"tag": "pause"}}}),
    )
    assert sent.status_code == 202
    mail = server.client.get(f"/v1/sessions/{sid}/mail", headers=owner("alice")).json()["mail"]
    assert mail[-1]["from"] == {"tag": "user", "owner": "alice"}
    fork = server.client.post(f"/v1/sessions/{sid}/fork", headers=owner("alice"), content=b"")
    assert fork.status_code == 201 and fork.json()["owner"] == "alice"
    listed = server.client.get("/v1/sessions", headers=owner("bob")).json()["sessions"]
    assert fork.json()["session_id"] not in [s["session_id"] for s in listed]
