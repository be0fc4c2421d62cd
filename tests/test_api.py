"""The read side of the API, the OpenAPI document, listings and media, over real HTTP."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent, write_tool


@pytest.fixture
def setup(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> tuple[Server, MockLlmServer]:
    llm = llm_server({"rules": [{"reply": {"content": "ok"}}]})
    write_tool(
        tmp_path / "tools",
        "greet",
        {"slug": "greet", "description": "greets", "args": []},
        "echo hello",
    )
    first = write_agent(tmp_path, "alpha", llm.url, toolDirectory="tools")
    second = write_agent(tmp_path, "beta", llm.url)
    return start_server([first, second]), llm


def _create(server: Server, body: dict) -> dict:
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps(body))
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_agents_health_and_openapi(setup: tuple[Server, MockLlmServer]) -> None:
    server, llm = setup
    agents = server.client.get("/v1/agents").json()
    assert [a["slug"] for a in agents] == ["alpha", "beta"]
    alpha = server.client.get("/v1/agents/alpha").json()
    assert alpha["tools"] == ["bash_greet"]
    assert alpha["description"] == "the alpha test agent"
    assert alpha["model"] == {"name": "scripted", "url": llm.url, "flavor": "OpenAIv1"}
    assert alpha["source"] == "file" and alpha["prompt"] == "You are alpha."
    health = server.client.get("/healthz").json()
    recovery = health.pop("recovery")
    assert health == {"ok": True, "live_sessions": 0, "active_runs": 0}
    # the embedded server sweeps at its start (docs/sessions.md §4.9)
    assert recovery["stale"] is False and recovery["sweep_every_seconds"] == 10 and recovery["last_sweep_at"]
    schema = server.client.get("/openapi.json")
    assert schema.status_code == 200 and schema.headers["content-type"].startswith("application/")
    document = schema.json()
    assert document["openapi"].startswith("3.")
    for path in (
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/messages",
        "/v1/sessions/{session_id}/resume",
        "/v1/sessions/{session_id}/pending",
        "/v1/continuations/{token}",
        "/v1/agents",
        "/v1/agents/{slug}",
    ):
        assert path in document["paths"], path
    assert "post" in document["paths"]["/v1/sessions"] and "get" in document["paths"]["/v1/sessions"]


def test_listing_filters_and_pages(setup: tuple[Server, MockLlmServer]) -> None:
    server, _ = setup
    made = [_create(server, {"agent": "alpha" if i % 2 else "beta", "prompt": f"n{i}"}) for i in range(5)]
    child = _create(server, {"agent": "beta", "prompt": "child", "parent": made[0]["session_id"]})
    listing = server.client.get("/v1/sessions").json()
    ids = [s["session_id"] for s in listing["sessions"]]
    # newest first, top level only
    assert ids == [m["session_id"] for m in reversed(made)]
    assert listing["next_before"] is None
    assert [s["agent"] for s in server.client.get("/v1/sessions?agent=alpha").json()["sessions"]] == ["alpha", "alpha"]
    assert server.client.get("/v1/sessions?status=running,failed").json()["sessions"] == []
    assert len(server.client.get("/v1/sessions?status=idle").json()["sessions"]) == 5
    children = server.client.get(f"/v1/sessions?parent={made[0]['session_id']}").json()["sessions"]
    assert [c["session_id"] for c in children] == [child["session_id"]]
    assert children[0]["parent_session_id"] == made[0]["session_id"]
    # pages of two, following next_before
    seen, before = [], None
    while True:
        query = "/v1/sessions?limit=2" + (f"&before={before}" if before else "")
        page = server.client.get(query).json()
        seen += [s["session_id"] for s in page["sessions"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == ids


def test_media_reaches_the_model(setup: tuple[Server, MockLlmServer]) -> None:
    server, llm = setup
    png = base64.b64encode(b"\x89PNG fake").decode()
    text = base64.b64encode(b"a,b\n1,2\n").decode()
    view = _create(
        server,
        {
            "agent": "beta",
            "prompt": "look",
            "media": [{"mime": "image/png", "base64": png, "filename": "p.png"}, {"mime": "text/csv", "base64": text}],
        },
    )
    query = view["session"]["turns"][1]["contents"]["userQuery"]
    assert query == {
        "text": "look",
        "media": [
            {"mimeType": "image/png", "base64Data": png, "filename": "p.png"},
            {"mimeType": "text/csv", "base64Data": text},
        ],
    }
    content = llm.requests[-1]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "look"}
    assert content[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    assert content[2]["type"] == "text" and "a,b\n1,2" in content[2]["text"]
    # the message alias of prompt (docs/decisions.md §9)
    alias = _create(server, {"agent": "beta", "message": {"text": "via alias"}})
    assert alias["session"]["turns"][1]["contents"]["userQuery"] == "via alias"
