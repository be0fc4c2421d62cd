"""Parameters and bindings over the API, with a real server, real bash tools and the scripted model
(issue 14, acceptance 1, 2, 4 and 5)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, wait_until, write_agent, write_tool
from tests.owners import owner, refused, write_tokens

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "overdue"},
            "reply": {"tool_calls": [{"name": "bash_query", "arguments": {"since": "2024", "tenant_id": "evil"}}]},
        },
        {"when": {"last_role": "user", "last_contains": "wait for a human"},
         "reply": {"tool_calls": [{"name": "ask_human", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
        {"reply": {"content": "hello"}},
    ]
}

TENANT = {"tag": "Param", "contents": "tenant"}


def arg(name: str, arity: str = "single") -> dict[str, Any]:
    return {"name": name, "description": name, "type": "string", "backing_type": "string", "arity": arity,
            "mode": "env"}


def billing_agent(tmp_path: Path, llm_url: str, **extra: Any) -> Path:
    """The reference's walk-through: ``tenant`` (session, required) bound to ``tenant_id``; the tool
    writes what it received to ``seen.json``."""
    seen = tmp_path / "seen.json"
    write_tool(
        tmp_path / "tools",
        "query",
        {"slug": "query", "description": "counts invoices", "args": [arg("tenant_id"), arg("since", "optional"),
                                                                      arg("region", "optional"),
                                                                      arg("note", "optional")]},
        f"printf '{{\"tenant\": \"%s\", \"region\": \"%s\", \"note\": \"%s\"}}' \"$TENANT_ID\" \"${{REGION:-}}\""
        f" \"${{NOTE:-}}\" > {seen}\necho \"3 invoices for $TENANT_ID\"",
    )
    parameters = [
        {"name": "tenant", "scope": "session"},
        {"name": "token", "scope": "session", "secret": True, "required": False},
        {"name": "otp", "scope": "message", "required": False},
        {"name": "region", "default": {"tag": "Given", "contents": "eu-west-1"}},
        {"name": "locked", "scope": "session", "required": False},
        {"name": "note", "scope": "session", "required": False},
    ]
    return write_agent(
        tmp_path,
        "billing",
        llm_url,
        parameters=extra.pop("parameters", parameters),
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": "tenant_id", "value": TENANT},
            {"arg": "region", "value": {"tag": "Param", "contents": "region"}},
            {"arg": "note", "value": {"tag": "Param", "contents": "note"}, "whenUnbound": "expose"},
        ]}}],
        toolCallPolicyConfig={"default": {"tag": "runSync"},
                              "rules": [{"tool": "ask_human", "disposition": {"tag": "defer"}}]},
        **extra,
    )


def post(server: Server, path: str, body: Any = None, headers: dict[str, str] | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"", headers=headers or {})


def test_the_walkthrough_a_required_tenant_bound_to_a_bash_argument(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([billing_agent(tmp_path, llm.url)])
    error = refused(server, "POST", "/v1/sessions", 422, "params_required",
                    body={"agent": "billing", "prompt": "how many invoices are overdue?"})
    assert error["message"] == "parameters required: tenant"
    assert llm.requests == []

    created = post(server, "/v1/sessions?wait=true",
                   {"agent": "billing", "prompt": "how many invoices are overdue?", "params": {"tenant": "acme-corp"}})
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["status"] == "idle" and view["params"] == {"tenant": "acme-corp"}
    # the tool process got the bound value, not the one the model made up
    assert json.loads((tmp_path / "seen.json").read_text()) == {"tenant": "acme-corp", "region": "eu-west-1",
                                                                "note": ""}
    # the model's schema has no tenant_id
    [declared] = [t for t in llm.requests[0]["tools"] if t["function"]["name"] == "bash_query"]
    assert set(declared["function"]["parameters"]["properties"]) == {"since", "note"}
    # the stored call is the model's
    call = view["session"]["turns"][2]["contents"]["llmToolCalls"][0]
    assert json.loads(call["function"]["arguments"]) == {"since": "2024", "tenant_id": "evil"}
    assert "acme-corp" not in json.dumps(call) and "acme-corp" not in json.dumps(llm.requests[0])
    assert '"kind": "tools.bound_argument_dropped"' in server.process.output()


@pytest.fixture
def table_server(tmp_path, llm_server, start_server) -> Server:
    """A server with authentication, alice's sealed session that waits on a deferred call, and
    ``locked`` pinned."""
    llm = llm_server(SCRIPT)
    path = billing_agent(tmp_path, llm.url)
    return start_server([path], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--pin", "locked=x"])


def test_every_row_of_the_validation_table_on_every_endpoint(table_server: Server) -> None:
    server, alice = table_server, owner("alice")
    created = post(server, "/v1/sessions?wait=true",
                   {"agent": "billing", "prompt": "wait for a human", "params": {"tenant": "t1"},
                    "seal": True, "session_token": True}, alice).json()
    sid, session_token = created["session_id"], created["session_token"]
    waiting = created["pending"][0]["continuation_token"]
    # a message to a session waiting on a human is queued and runs nothing: an idle one runs
    idle = post(server, "/v1/sessions?wait=true", {"agent": "billing", "prompt": "hi", "params": {"tenant": "t1"}},
                alice).json()["session_id"]
    endpoints = {
        "create": ("POST", "/v1/sessions", lambda p: {"agent": "billing", "prompt": "hi", "params": p}),
        "messages": ("POST", f"/v1/sessions/{idle}/messages", lambda p: {"prompt": "hi", "params": p}),
        "resume": ("POST", f"/v1/sessions/{sid}/resume", lambda p: {"params": p}),
        "continuation": ("POST", f"/v1/continuations/{waiting}", lambda p: {"result": "ok", "params": p}),
        "fork": ("POST", f"/v1/sessions/{sid}/fork", lambda p: {"params": p}),
        "put": ("PUT", f"/v1/sessions/{sid}/params", lambda p: p),
    }
    for name, (method, path, body) in endpoints.items():
        base = {"tenant": "t2"} if name == "create" else {}
        assert "tenantt" in refused(server, method, path, 422, "unknown_params", headers=alice,
                                    body=body({**base, "tenantt": "x"}))["message"], name
        for operator in ("region", "locked"):
            message = refused(server, method, path, 403, "forbidden_params", headers=alice,
                              body=body({**base, operator: "y"}))["message"]
            assert operator in message, name
        assert "token" in refused(server, method, path, 422, "invalid_params", headers=alice,
                                  body=body({**base, "token": 7}))["message"], name
    # message scope with a request after which nothing runs
    for method, path, body in (
        ("PUT", f"/v1/sessions/{sid}/params", {"otp": "1"}),
        ("POST", f"/v1/sessions/{sid}/fork", {"params": {"otp": "1"}}),
        ("POST", "/v1/sessions", {"agent": "billing", "prompt": "hi", "run": "none",
                                  "params": {"tenant": "a", "otp": "1"}}),
        ("POST", f"/v1/sessions/{sid}/messages", {"prompt": "queued", "params": {"otp": "1"}}),
        ("POST", "/v1/sessions", {"agent": "billing", "params": {"tenant": "a", "otp": "1"}}),
        ("POST", f"/v1/continuations/{waiting}", {"result": "ok", "resume": False, "params": {"otp": "1"}}),
    ):
        assert "otp" in refused(server, method, path, 422, "invalid_params", headers=alice, body=body)["message"]
    # a required session value missing at create, and after the merge (null removes it)
    refused(server, "POST", "/v1/sessions", 422, "params_required", headers=alice, body={"agent": "billing"})
    for name in ("messages", "resume", "continuation"):
        method, path, body = endpoints[name]
        refused(server, method, path, 422, "params_required", headers=alice, body=body({"tenant": None}))
    # a session token may not send params; the seal keeps them the owner's
    st = {"Authorization": f"Bearer {session_token}"}
    refused(server, "POST", f"/v1/sessions/{sid}/messages", 403, "forbidden_params", headers=st,
            body={"prompt": "hi", "params": {"note": "n"}})
    # and nothing was held: the view names no secret, the values are unchanged
    view = server.client.get(f"/v1/sessions/{sid}", headers=alice).json()
    assert view["params"] == {"tenant": "t1"} and view["secret_params"] == [] and view["sealed"] is True
    # the owner's values go through on the sealed session, with the continuation's run
    done = post(server, f"/v1/continuations/{waiting}?wait=true",
                {"result": "approved", "params": {"token": "s3cr3t", "otp": "123"}}, alice)
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text
    assert done.json()["secret_params"] == ["token"] and "s3cr3t" not in done.text


def test_required_message_values_come_with_every_request_that_runs(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    path = billing_agent(tmp_path, llm.url, parameters=[
        {"name": "tenant", "scope": "session", "default": {"tag": "Given", "contents": "t"}},
        {"name": "otp", "scope": "message"},
        {"name": "region", "required": False}, {"name": "note", "scope": "session", "required": False},
    ])
    server = start_server([path])
    refused(server, "POST", "/v1/sessions", 422, "params_required", body={"agent": "billing", "prompt": "hi"})
    # no run, no message-scope value needed
    sid = post(server, "/v1/sessions", {"agent": "billing", "prompt": "hi", "run": "none"}).json()["session_id"]
    refused(server, "POST", f"/v1/sessions/{sid}/resume", 422, "params_required", body={})
    refused(server, "POST", f"/v1/sessions/{sid}/messages", 422, "params_required", body={"prompt": "again"})
    first = post(server, f"/v1/sessions/{sid}/resume?wait=true", {"params": {"otp": "1"}})
    assert first.status_code == 200 and first.json()["status"] == "idle"
    # the run's value is gone with it
    refused(server, "POST", f"/v1/sessions/{sid}/messages", 422, "params_required", body={"prompt": "again"})
    assert post(server, f"/v1/sessions/{sid}/messages?wait=true",
                {"prompt": "again", "params": {"otp": "2"}}).json()["status"] == "idle"


def test_set_is_a_default_a_client_overrides_and_pin_is_not(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([billing_agent(tmp_path, llm.url)], extra_args=["--set", "tenant=from-set",
                                                                         "--pin", "locked=x"])
    described = {p["name"]: p for p in server.client.get("/v1/agents/billing").json()["parameters"]}
    assert (described["tenant"]["bound"], described["tenant"]["pinned"]) == (True, False)
    assert (described["locked"]["bound"], described["locked"]["pinned"]) == (True, True)
    assert (described["region"]["bound"], described["token"]["bound"]) == (True, False)
    assert "from-set" not in json.dumps(described) and "eu-west-1" not in json.dumps(described)
    # --set gives the value when the client gives none ...
    view = post(server, "/v1/sessions?wait=true", {"agent": "billing", "prompt": "overdue?"}).json()
    assert json.loads((tmp_path / "seen.json").read_text())["tenant"] == "from-set"
    # ... and a client's value wins over it
    post(server, "/v1/sessions?wait=true", {"agent": "billing", "prompt": "overdue?", "params": {"tenant": "mine"}})
    assert json.loads((tmp_path / "seen.json").read_text())["tenant"] == "mine"
    # a pinned one cannot be given by a client
    assert refused(server, "POST", f"/v1/sessions/{view['session_id']}/messages", 403, "forbidden_params",
                   body={"prompt": "x", "params": {"locked": "y"}})["message"].endswith("locked")


def test_expose_shows_an_argument_until_the_session_binds_it(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([billing_agent(tmp_path, llm.url)])

    def properties(request: dict[str, Any]) -> set[str]:
        [tool] = [t for t in request["tools"] if t["function"]["name"] == "bash_query"]
        return set(tool["function"]["parameters"]["properties"])

    sid = post(server, "/v1/sessions?wait=true",
               {"agent": "billing", "prompt": "hi", "params": {"tenant": "t"}}).json()["session_id"]
    assert properties(llm.requests[-1]) == {"since", "note"}
    changed = server.client.put(f"/v1/sessions/{sid}/params", content='{"note": "bound"}')
    assert changed.status_code == 200 and changed.json()["params"] == {"tenant": "t", "note": "bound"}
    post(server, f"/v1/sessions/{sid}/messages?wait=true", {"prompt": "overdue?"})
    asked = [r for r in llm.requests if "overdue" in json.dumps(r["messages"][-1])]
    assert properties(asked[0]) == {"since"}
    assert json.loads((tmp_path / "seen.json").read_text())["note"] == "bound"
    # the user turn stored with the message says the same
    turns = server.client.get(f"/v1/sessions/{sid}").json()["session"]["turns"]
    user_tools = [t for t in turns if t["tag"] == "UserTurn"][0]["contents"]["userTools"]
    [query] = [t for t in user_tools if t["contents"]["name"] == "bash_query"]
    assert {p["propertyKey"] for p in query["contents"]["properties"]} == {"since"}
    # cleared again: shown again
    server.client.put(f"/v1/sessions/{sid}/params", content='{"params": {"note": null}}')
    post(server, f"/v1/sessions/{sid}/messages?wait=true", {"prompt": "hello again"})
    assert properties(llm.requests[-1]) == {"since", "note"}


def test_defaults_from_every_source_and_omit(tmp_path, llm_server, start_server) -> None:
    llm = llm_server({"rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_show", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "{last_content}"}},
    ]})
    names = ["given", "env", "file", "command", "key", "absent"]
    write_tool(tmp_path / "tools", "show", {"slug": "show", "description": "shows", "args": [
        *(arg(n) for n in names[:-1]), arg("absent", "optional")]},
        'echo "$GIVEN|$ENV|$FILE|$COMMAND|$KEY|${ABSENT-unset}"')
    (tmp_path / "value.txt").write_text("from-file\n")
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"test": "", "svc": "from-key"}))
    path = write_agent(
        tmp_path,
        "defaults",
        llm.url,
        parameters=[
            {"name": "given", "default": {"tag": "Given", "contents": "from-given"}},
            {"name": "env", "default": {"tag": "EnvVar", "contents": "PARAMS_TEST_ENV"}},
            {"name": "file", "default": {"tag": "FileSystem", "contents": "value.txt"}},
            {"name": "command", "default": {"tag": "Command", "contents": ["printf", "from-command"]}},
            {"name": "key", "secret": True, "default": {"tag": "ApiKey", "contents": "svc"}},
            {"name": "absent", "scope": "session", "required": False},
        ],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            *({"arg": n, "value": {"tag": "Param", "contents": n}} for n in names[:-1]),
            {"arg": "absent", "value": {"tag": "Param", "contents": "absent"}, "whenUnbound": "omit"},
        ]}}],
    )
    server = start_server([path], env={"PARAMS_TEST_ENV": "from-env"}, extra_args=["--api-keys", str(keys)])
    view = post(server, "/v1/sessions?wait=true", {"agent": "defaults", "prompt": "show"}).json()
    answer = view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
    assert answer == "from-given|from-env|from-file|from-command|from-key|unset\n"
    assert llm.requests[0]["tools"][0]["function"]["parameters"]["properties"] == {}
    uuid.UUID(view["session_id"])
    wait_until(lambda: view["status"] == "idle")
