"""One input rule per kind of field, on every endpoint (issue 11, acceptance 7; docs/api.md §1.6).

Text for the model or a tool is stored as sent, NUL characters included; names and identifiers
refuse NUL; no body (empty, whitespace or JSON ``null``) means the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import owner, write_tokens

NUL = "\u0000"
ROOT = owner("root")


@pytest.fixture(params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> Server:
    llm = llm_server({"rules": [{"reply": {"tool_calls": [{"name": "ask", "arguments": {"q": "?"}}]}}]})
    agent = write_agent(
        tmp_path,
        "rules",
        llm.url,
        toolCallPolicyConfig={"default": {"tag": "defer"}},
        parameters=[{"name": "color", "scope": "session", "required": False}],
    )
    db = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    tokens = str(write_tokens(tmp_path))
    return start_server([agent], db=db, extra_args=["--auth-tokens", tokens, "--admin-owners", "root"])


def _send(server: Server, method: str, path: str, body: Any = None, raw: bytes | None = None):
    content = raw if raw is not None else (json.dumps(body) if body is not None else b"")
    return server.client.request(method, path, content=content, headers=ROOT)


def _ok(answer, status: int = 200) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    return answer.json()


def _bad(answer, code: str = "bad_request") -> str:
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == code, answer.text
    return answer.json()["message"]


def _waiting(server: Server, prompt: str = "go") -> dict[str, Any]:
    return _ok(_send(server, "POST", "/v1/sessions?wait=true", {"agent": "rules", "prompt": prompt}), 201)


def test_text_is_stored_as_sent_nul_characters_included(server: Server) -> None:
    text = f"a{NUL}b"
    created = _ok(_send(server, "POST", "/v1/sessions", {"agent": "rules", "prompt": text, "run": "none"}), 201)
    assert created["session"]["turns"][0]["contents"]["userQuery"] == text
    alias = {"agent": "rules", "message": {"text": text}, "run": "none"}
    aliased = _ok(_send(server, "POST", "/v1/sessions", alias), 201)
    assert aliased["session"]["turns"][0]["contents"]["userQuery"] == text
    sid = created["session_id"]
    posted = _ok(_send(server, "POST", f"/v1/sessions/{sid}/messages", {"prompt": text, "run": "none"}))
    assert posted["session"]["turns"][0]["contents"]["userQuery"] == text
    params = _ok(_send(server, "PUT", f"/v1/sessions/{sid}/params", {"color": text}))
    assert params["params"] == {"color": text}

    view = _waiting(server)
    mail = {"body": {"tag": "userMessage", "query": text}}
    assert _send(server, "POST", f"/v1/sessions/{view['session_id']}/mail", mail).status_code == 202
    agent_mail = {"body": {"tag": "agentMessage", "text": text}}
    assert _send(server, "POST", f"/v1/sessions/{view['session_id']}/mail", agent_mail).status_code == 202
    listed = _ok(_send(server, "GET", f"/v1/sessions/{view['session_id']}/mail"))["mail"]
    assert [m["body"].get("query", m["body"].get("text")) for m in listed] == [text, text]
    token = view["pending"][0]["continuation_token"]
    result = {"type": "mixed", "parts": [{"type": "text", "text": text}]}
    done = _ok(_send(server, "POST", f"/v1/continuations/{token}", {"result": result, "resume": False}))
    assert done["session"]["turns"][0]["contents"]["userToolResponses"][0][1] == result

    stored = {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "announce": f"an{NUL}nounce",
        "systemPrompt": [text],
        "files": {"notes.txt": text},
    }
    config = _ok(_send(server, "PUT", "/v1/agents/textual", stored), 201)["config"]
    assert (config["systemPrompt"], config["files"]) == ([text], {"notes.txt": text})
    assert config["announce"] == stored["announce"]


def test_names_and_identifiers_refuse_nul_characters(server: Server) -> None:
    create = {"agent": "rules", "prompt": "x", "run": "none"}
    assert "agent: Null characters" in _bad(_send(server, "POST", "/v1/sessions", {**create, "agent": f"ru{NUL}les"}))
    assert "parent: Null characters" in _bad(_send(server, "POST", "/v1/sessions", {**create, "parent": NUL}))
    png = {"mime": "image/png", "base64": "aGk="}
    for field in ("mime", "filename"):
        media = [{**png, field: f"x{NUL}"}]
        assert "Null characters" in _bad(_send(server, "POST", "/v1/sessions", {**create, "media": media}))
    sid = _ok(_send(server, "POST", "/v1/sessions", create), 201)["session_id"]
    message = {"prompt": "x", "media": [{**png, "filename": NUL}], "run": "none"}
    assert "filename: Null characters" in _bad(_send(server, "POST", f"/v1/sessions/{sid}/messages", message))
    assert "agent: Null characters" in _bad(_send(server, "POST", f"/v1/sessions/{sid}/fork", {"agent": NUL}))
    assert "params: Null characters" in _bad(_send(server, "PUT", f"/v1/sessions/{sid}/params", {f"co{NUL}lor": 1}))

    view = _waiting(server)
    mail = f"/v1/sessions/{view['session_id']}/mail"
    media = {"text": "x", "media": [{"mimeType": f"image/{NUL}", "base64Data": "aGk="}]}
    for body in (
        {"tag": "userMessage", "query": media},
        {"tag": "agentMessage", "text": "x", "inReplyTo": NUL},
        {"tag": "control", "message": {"tag": "cancelCalls", "toolCallIds": [NUL]}},
    ):
        assert "Null characters" in _bad(_send(server, "POST", mail, {"body": body}))
    token = view["pending"][0]["continuation_token"]
    for field in ("mimeType", "filename"):
        result = {"type": "media", "mimeType": "image/png", "base64Data": "aGk=", field: f"x{NUL}"}
        assert "Null characters" in _bad(_send(server, "POST", f"/v1/continuations/{token}", {"result": result}))
    assert "NUL characters" in _bad(_send(server, "GET", "/v1/sessions?agent=%00"))

    stored = {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "announce": "a",
        "systemPrompt": ["p"],
        "files": {f"to{NUL}ols/x": "text"},
    }
    _bad(_send(server, "PUT", "/v1/agents/named", stored), "agent_invalid_paths")
    assert "slug: Null characters" in _bad(_send(server, "PUT", "/v1/agents/na%00med", {**stored, "files": {}}))
    for dots in ("%2E", "%2E%2E", "..."):
        refused = _bad(_send(server, "PUT", f"/v1/agents/{dots}", {**stored, "files": {}}), "agent_failed_to_load")
        assert "must hold a character other than '.'" in refused
    # nothing was stored by any of these
    assert _ok(_send(server, "GET", f"/v1/sessions/{view['session_id']}/mail"))["mail"] == []
    assert server.client.get("/v1/agents/named", headers=ROOT).status_code == 404


@pytest.mark.parametrize("no_body", [b"", b"  \n", b"null"])
def test_no_body_means_the_same_on_every_route(server: Server, no_body: bytes) -> None:
    """Empty, whitespace and ``null`` are all "no body": defaults where the body is optional, the
    missing field's error where it is required."""
    view = _waiting(server)
    sid, token = view["session_id"], view["pending"][0]["continuation_token"]
    required = {
        ("POST", "/v1/sessions"): "agent: This field is required.",
        ("POST", f"/v1/sessions/{sid}/messages"): "a message needs a prompt or media",
        ("POST", f"/v1/sessions/{sid}/mail"): "body: This field is required.",
        ("POST", f"/v1/continuations/{token}"): "result: This field is required.",
    }
    for (method, path), message in required.items():
        assert _bad(_send(server, method, path, raw=no_body)) == message, (method, path)
    stored = _bad(_send(server, "PUT", "/v1/agents/nobody", raw=no_body), "agent_failed_to_load")
    assert stored.startswith("agent 'nobody': apiKeyId: field required")
    idle = _ok(_send(server, "POST", "/v1/sessions", {"agent": "rules", "prompt": "x", "run": "none"}), 201)
    fork = _ok(_send(server, "POST", f"/v1/sessions/{sid}/fork", raw=no_body), 201)
    assert fork["session"]["turns"][1:] == view["session"]["turns"][1:]
    before = _ok(_send(server, "GET", f"/v1/sessions/{idle['session_id']}"))
    params = _ok(_send(server, "PUT", f"/v1/sessions/{idle['session_id']}/params", raw=no_body))
    assert (params["params"], params["version"]) == (before["params"], before["version"])
    resumed = _send(server, "POST", f"/v1/sessions/{idle['session_id']}/resume", raw=no_body)
    assert resumed.status_code in (200, 202), resumed.text
    for action in ("pause", "cancel-attached"):
        assert _send(server, "POST", f"/v1/sessions/{fork['session_id']}/{action}", raw=no_body).status_code == 200
    for other in (b"[]", b'"text"', b"3"):
        refused = _send(server, "POST", f"/v1/sessions/{sid}/fork", raw=other)
        assert _bad(refused) == "request body must be a JSON object"
