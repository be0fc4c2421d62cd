"""Parameters down the helper tree: ``with``, narrowing a helper for one call, ``narrowable``,
``describe_agent`` and ``derive_agent`` (issue 14, acceptance 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness import Server, wait_until, write_agent, write_tool


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


REPO = {"tag": "Literal", "contents": "org/repo"}
SCRIPT = {
    "rules": [
        {"when": {"any_contains": "You are reviewer.", "last_role": "user"}, "reply": _call("bash_lookup", where="p")},
        {"when": {"any_contains": "You are reviewer.", "last_role": "tool"}, "reply": {"content": "{last_content}"}},
        {"when": {"any_contains": "You are locked.", "last_role": "user"}, "reply": {"content": "locked here"}},
        {"when": {"last_role": "user", "last_contains": "describe"}, "reply": _call("describe_agent", slug="reviewer")},
        {"when": {"last_role": "user", "last_contains": "narrow it"},
         "reply": _call("io_prompt_agent_reviewer", what="look narrowed", bindings=[{"arg": "repo", "value": REPO}])},
        {"when": {"last_role": "user", "last_contains": "plain"},
         "reply": _call("io_prompt_agent_reviewer", what="look plain")},
        {"when": {"last_role": "user", "last_contains": "lock it"},
         "reply": _call("io_prompt_agent_locked", what="x", bindings=[{"arg": "anything", "value": REPO}])},
        {"when": {"last_role": "user", "last_contains": "wrong arg"},
         "reply": _call("io_prompt_agent_reviewer", what="x", bindings=[{"arg": "tenant_id", "value": REPO}])},
        {"when": {"last_role": "user", "last_contains": "use the derived"},
         "reply": _call("io_prompt_agent_reviewer", what="look derived", **{"as": "on-repo"})},
        {"when": {"last_role": "user", "last_contains": "derive"},
         "reply": _call("derive_agent", **{"from": "reviewer", "slug": "on-repo", "bindings": [
             {"arg": "repo", "value": {"tag": "Literal", "contents": "derived/repo"}}]})},
        {"when": {"last_role": "tool"}, "reply": {"content": "lead got: {last_content}"}},
    ]
}


def _tree(tmp_path: Path, llm_url: str) -> Path:
    def arg(name: str, arity: str = "single") -> dict[str, Any]:
        return {"name": name, "description": f"the {name}", "type": "string", "backing_type": "string",
                "arity": arity, "mode": "env"}

    write_tool(tmp_path / "tools", "lookup", {"slug": "lookup", "description": "looks things up",
                                              "args": [arg("tenant_id"), arg("repo", "optional"), arg("where")]},
               'echo "tenant=$TENANT_ID repo=${REPO:-none} where=$WHERE"')
    write_agent(
        tmp_path,
        "reviewer",
        llm_url,
        parameters=[{"name": "tenant", "scope": "session"}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": "tenant_id", "value": {"tag": "Param", "contents": "tenant"}}]}}],
    )
    write_agent(tmp_path, "locked", llm_url)
    return write_agent(
        tmp_path,
        "lead",
        llm_url,
        parameters=[{"name": "tenant", "scope": "session"}],
        extraAgents=[
            {"slug": "reviewer", "path": "reviewer.json", "with": {"tenant": {"tag": "Param", "contents": "tenant"}}},
            {"slug": "locked", "path": "locked.json", "narrowable": False},
        ],
    )


def _ask(server: Server, sid: str, prompt: str) -> str:
    """Post a message and wait for the lead's answer (it waits on its helper's session meanwhile)."""
    posted = server.client.post(f"/v1/sessions/{sid}/messages", content=json.dumps({"prompt": prompt}))
    assert posted.status_code in (200, 202), posted.text
    view = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=5").json())["status"] == "idle" and v
    )
    return view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]


def _children(server: Server, sid: str) -> list[dict[str, Any]]:
    return server.client.get(f"/v1/sessions?parent={sid}").json()["sessions"]


def test_with_narrowing_narrowable_describe_and_derive(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([_tree(tmp_path, llm.url)])
    tools = server.client.get("/v1/agents/lead").json()["tools"]
    assert tools[:4] == ["io_prompt_agent_reviewer", "io_prompt_agent_locked", "describe_agent", "derive_agent"]
    sid = server.client.post("/v1/sessions", content=json.dumps(
        {"agent": "lead", "params": {"tenant": "acme"}})).json()["session_id"]

    # with: the helper's tool gets the lead's tenant; a plain call leaves repo to the model
    plain = _ask(server, sid, "plain")
    assert plain == "lead got: tenant=acme repo=none where=p\n"
    assert [c["params"] for c in _children(server, sid)] == [{"tenant": "acme"}]

    def reviewer_tool(request: dict[str, Any]) -> set[str]:
        [lookup] = [t for t in request["tools"] if t["function"]["name"] == "bash_lookup"]
        return set(lookup["function"]["parameters"]["properties"])

    reviewer_requests = [r for r in llm.requests if "You are reviewer." in json.dumps(r["messages"][0])]
    assert reviewer_tool(reviewer_requests[-1]) == {"repo", "where"}

    # narrowed for one call: repo is bound and leaves the helper's schema, for that call only
    assert _ask(server, sid, "narrow it") == "lead got: tenant=acme repo=org/repo where=p\n"
    narrowed = [r for r in llm.requests if "look narrowed" in json.dumps(r["messages"])]
    assert reviewer_tool(narrowed[0]) == {"where"}
    assert _ask(server, sid, "plain") == "lead got: tenant=acme repo=none where=p\n"
    assert reviewer_tool(llm.requests[-2]) == {"repo", "where"}

    # refused before any helper runs: a helper that is not narrowable, an argument that is not open
    count = len(_children(server, sid))
    assert _ask(server, sid, "lock it") == (
        "lead got: Error: helper locked cannot be narrowed: call it with 'what' only"
    )
    wrong = _ask(server, sid, "wrong arg")
    assert wrong.startswith("lead got: Error: bindings[0]: tenant_id is not an open argument (open: ")
    assert "bash_lookup.repo" in wrong and "bash_lookup.where" in wrong
    assert len(_children(server, sid)) == count

    # describe_agent: the open arguments as the lead sees them, never a value
    described = json.loads(_ask(server, sid, "describe").removeprefix("lead got: "))
    assert described["slug"] == "reviewer" and described["parameters"] == [
        {"name": "tenant", "description": None, "bound": True}
    ]
    [lookup] = [t for t in described["tools"] if t["name"] == "bash_lookup"]
    assert [a["arg"] for a in lookup["open"]] == ["repo", "where"]
    assert "acme" not in json.dumps(described)

    # derive_agent names a narrowing; "as" uses it
    assert "stored" in _ask(server, sid, "derive")
    assert _ask(server, sid, "use the derived") == "lead got: tenant=acme repo=derived/repo where=p\n"
