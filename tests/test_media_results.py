"""Media tool results reach the model as content parts (issue 16, the media bullet): a bash tool
with ``output-media-type`` answered in the turn, and one whose result comes back as mail."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.harness import Server, wait_until, write_agent, write_tool

PNG = b"\x89PNG\r\n\x1a\n\x00\xff"
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
PDF = b"%PDF-1.4 tiny"

SCRIPT = {"rules": [
    {"when": {"last_role": "user", "last_contains": "call_snap"}, "reply": {"content": "saw it late"}},
    {"when": {"last_role": "user", "last_contains": "media returned"}, "reply": {"content": "saw it"}},
    {"when": {"last_role": "user", "last_contains": "snap"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_snap", "arguments": {}, "id": "call_snap"}]}},
    {"when": {"last_role": "user", "last_contains": "paper"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_paper", "arguments": {}, "id": "call_paper"}]}},
    {"when": {"last_role": "tool"}, "reply": {"content": "waiting for it"}},
]}


def _agent(tmp_path: Path, llm, disposition: dict) -> Path:
    tools = tmp_path / "tools"
    write_tool(tools, "snap", {"slug": "snap", "description": "a picture", "args": [],
                               "output-media-type": "image/png"}, r"printf '\x89PNG\r\n\x1a\n\x00\xff'")
    write_tool(tools, "paper", {"slug": "paper", "description": "a document", "args": [],
                                "output-media-type": "application/pdf"}, "printf '%s' '%PDF-1.4 tiny'")
    return write_agent(tmp_path, "snapper", llm.url, toolDirectory="tools", executionMode="asynchronous",
                       toolCallPolicyConfig={"default": disposition, "rules": []})


def _parts(message: dict) -> list[dict]:
    content = message["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


@pytest.fixture
def server_for(tmp_path, llm_server, start_server):
    def start(disposition: dict) -> tuple[Server, object]:
        llm = llm_server(SCRIPT)
        return start_server([_agent(tmp_path, llm, disposition)]), llm

    return start


def test_an_image_answered_in_the_turn_is_an_image_part(server_for) -> None:
    server, llm = server_for({"tag": "runSync"})
    view = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "snapper", "prompt": "snap"}))
    assert view.json()["status"] == "idle"
    messages = llm.requests[1]["messages"]
    tool_message = next(m for m in messages if m["role"] == "tool")
    assert tool_message["content"].startswith("[Media: image/png")
    after = messages[messages.index(tool_message) + 1]
    assert after["role"] == "user"
    assert _parts(after)[1] == {"type": "image_url", "image_url": {"url": DATA_URL}}


def test_a_pdf_is_a_file_part(server_for) -> None:
    server, llm = server_for({"tag": "runSync"})
    server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "snapper", "prompt": "paper"}))
    media = [p for m in llm.requests[1]["messages"] if m["role"] == "user" for p in _parts(m) if p["type"] == "file"]
    assert media == [{"type": "file", "file": {
        "filename": "document.pdf", "file_data": "data:application/pdf;base64," + base64.b64encode(PDF).decode()}}]


def test_an_image_that_comes_back_as_mail_is_an_image_part(server_for) -> None:
    server, llm = server_for({"tag": "runAsync", "attachSeconds": 0})
    sid = server.client.post("/v1/sessions", content=json.dumps({"agent": "snapper", "prompt": "snap"})).json()[
        "session_id"]
    wait_until(lambda: any("call_snap" in json.dumps(r["messages"][-1]) and r["messages"][-1]["role"] == "user"
                           for r in llm.requests), timeout=30)
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert view["status"] == "idle"
    folded = llm.requests[-1]["messages"][-1]
    parts = _parts(folded)
    assert parts[0]["type"] == "text" and "tool call call_snap (bash_snap) completed" in parts[0]["text"]
    assert "[Media: image/png" in parts[0]["text"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": DATA_URL}}
