"""Whatever size the outside sends fits, and large results are stored once (issue 11, acceptance 11).

Provider call ids and tool names are TEXT columns on both databases; events carry a large
result as a summary with its size, and the whole result lives in the session only
(docs/api.md §9.6).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent, write_tool

BIG = 5_000_000
LONG_ID = "call_" + "x" * 295
ASYNC_ID = "call_" + "y" * 295
DEFERRED_ID = "call_" + "z" * 295
SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user"},
            "reply": {
                "tool_calls": [
                    {"name": "bash_big", "arguments": {}, "id": LONG_ID},
                    {"name": "bash_small", "arguments": {}, "id": ASYNC_ID},
                    {"name": "ask", "arguments": {"q": "?"}, "id": DEFERRED_ID},
                ]
            },
        },
        {"reply": {"content": "done"}},
    ]
}


def _rows(server: Server, query: str, sid: str) -> list[tuple[Any, ...]]:
    if server.db.startswith("postgres"):
        with psycopg.connect(server.db) as connection:
            return connection.execute(query.replace("?", "%s"), [sid]).fetchall()
    with sqlite3.connect(server.db) as connection:
        return connection.execute(query, [sid.replace("-", "")]).fetchall()


@pytest.mark.parametrize("database", ["postgres", "sqlite"])
def test_long_provider_ids_and_a_5_mb_result_stored_once(
    database: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> None:
    llm = llm_server(SCRIPT)
    tools = tmp_path / "tools"
    flood = f"head -c {BIG} /dev/zero | tr '\\0' x"
    write_tool(tools, "big", {"slug": "big", "description": "a lot", "args": []}, flood)
    write_tool(tools, "small", {"slug": "small", "description": "a little", "args": []}, "echo small")
    agent = write_agent(
        tmp_path,
        "large",
        llm.url,
        toolDirectory="tools",
        toolCallPolicyConfig={
            "default": {"tag": "runSync"},
            "rules": [
                {"tool": "bash_small", "disposition": {"tag": "runAsync"}},
                {"tool": "ask", "disposition": {"tag": "defer"}},
            ],
        },
    )
    db = request.getfixturevalue("postgres_url") if database == "postgres" else None
    server = start_server([agent], db=db, env={"AGENTS_TOOL_OUTPUT_MAX_BYTES": str(8 * 1024 * 1024)})
    created = server.client.post(
        "/v1/sessions?wait=true&timeout=120", content=json.dumps({"agent": "large", "prompt": "go"})
    )
    assert created.status_code == 201 and created.json()["status"] == "waiting_external", created.text
    view = created.json()
    [pending] = view["pending"]
    assert pending["call"]["id"] == DEFERRED_ID
    done = server.client.post(
        f"/v1/continuations/{pending['continuation_token']}?wait=true&timeout=120", content=json.dumps({"result": "ok"})
    )
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text
    responses = {call["id"]: response for call, response in done.json()["session"]["turns"][1]["contents"][
        "userToolResponses"
    ]}
    assert responses[LONG_ID] == "x" * BIG
    assert responses[ASYNC_ID] == "small\n"
    assert responses[DEFERRED_ID] == "ok"

    sid = view["session_id"]
    turns = _rows(server, "SELECT turn_json FROM sessions_app_turn WHERE session_id = ?", sid)
    events = _rows(server, "SELECT kind, payload_json FROM sessions_app_event WHERE session_id = ?", sid)
    # the result is in the session once (its user turn), and in no event
    assert sum(text.count("x" * 1000) for (text,) in turns) == BIG // 1000
    assert sum(len(payload) for _, payload in events) < 200_000
    completed = [json.loads(payload) for kind, payload in events if kind == "tool.completed"]
    big = [payload for payload in completed if payload["tool"] == "bash_big"]
    assert big[0]["tool_call_id"] == LONG_ID
    assert big[0]["result"] == {"omitted": True, "bytes": BIG, "preview": "x" * 512}
    updated = [json.loads(payload)["head_turn"] for kind, payload in events if kind == "session.updated"]
    summarised = [
        response
        for turn in updated
        if turn and turn["tag"] == "UserTurn"
        for _, response in turn["contents"]["userToolResponses"]
    ]
    assert {"omitted": True, "bytes": BIG, "preview": "x" * 512} in summarised
