"""Traces of a scaled-out run exported to a real OTLP/HTTP receiver (issue 27, acceptance 1):
server, worker, the scripted model, a bash tool, a helper and a deferred call completed later
are one trace in the GenAI conventions, the completion links to the deferred call's span, and no
span holds the API key or the prompt (docs/observability.md §1)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import ROOT, Process, Server, base_env, free_port, wait_until, write_agent, write_tool
from tests.otlp import OtlpReceiver

SECRET = "sk-trace-test-secret-0123456789"
MCP_PASSWORD = "mcp-trace-pass-58e1c0"
MCP_QUERY_KEY = "mcp-trace-query-key-2d7b44"
PROMPT = "PROMPT-MARKER please do the three things"

SCRIPT = {"rules": [
    {"when": {"any_contains": "You are kid."}, "reply": {"content": "kid says done"}},
    {"when": {"any_contains": "You are boss.", "last_role": "user"},
     "reply": {"content": "", "tool_calls": [
         {"name": "bash_echo", "arguments": {"text": "hello"}},
         {"name": "mcp_demo_echo", "arguments": {"text": "over http"}},
         {"name": "io_prompt_agent_kid", "arguments": {"what": "KID-TASK count to three"}},
         {"name": "bash_ask", "arguments": {"question": "may I?"}},
     ]}},
    {"when": {"any_contains": "You are boss.", "last_role": "tool"}, "reply": {"content": "boss done: {last_content}"}},
]}


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    started = OtlpReceiver()
    yield started
    started.stop()


@pytest.fixture
def mcp_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The demo MCP server over streamable HTTP, writing the traceparent of each call it gets; a
    URL to it holding a password and a query key, and that file."""
    port = free_port()
    seen = tmp_path / "traceparents.txt"
    env = base_env(DEMO_MCP_TRACEPARENTS_FILE=str(seen))
    argv = [sys.executable, str(ROOT / "tests" / "mcp_demo_server.py"), "--http", str(port)]
    process = Process(argv, env, tmp_path / "mcp.log")

    def listening() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_until(listening, 60)
        yield f"http://trace-user:{MCP_PASSWORD}@127.0.0.1:{port}/mcp?api_key={MCP_QUERY_KEY}", seen
    finally:
        process.stop()


def _agents(tmp: Path, model_url: str, mcp_url: str) -> list[Path]:
    arg = {"name": "text", "description": "a text", "type": "string", "backing_type": "string",
           "arity": "single", "mode": "positional"}
    write_tool(tmp / "tools", "echo", {"slug": "echo", "description": "echoes", "args": [arg]}, 'echo "echo $1"')
    ask = {"slug": "ask", "description": "asks a human", "args": [{**arg, "name": "question"}]}
    write_tool(tmp / "tools", "ask", ask, "echo never")
    write_agent(tmp, "kid", model_url)
    boss = write_agent(
        tmp, "boss", model_url, toolDirectory="tools", extraAgents=[{"slug": "kid", "path": "kid.json"}],
        mcpServers=[{"tag": "McpStreamableHttp", "contents": {"name": "demo", "url": mcp_url}}],
        toolCallPolicyConfig={"default": {"tag": "runSync"},
                              "rules": [{"tool": "bash_ask", "disposition": {"tag": "defer", "reason": "a human"}}]},
    )
    return [boss]


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    chain = []
    while span["parent_span_id"] and span["parent_span_id"] in by_id:
        span = by_id[span["parent_span_id"]]
        chain.append(span)
    return chain


def _started_by(run: dict[str, Any], by_id: dict[str, dict[str, Any]], request: str) -> bool:
    return any(a["service"] == "agents-serve" and a["name"].startswith(request) for a in _ancestors(run, by_id))


def _one(spans: list[dict[str, Any]], **attributes: Any) -> dict[str, Any]:
    [found] = [s for s in spans if all(s["attributes"].get(k) == v for k, v in attributes.items())]
    return found


def test_a_scaled_out_run_is_one_trace_in_the_genai_conventions(
    tmp_path: Path,
    receiver: OtlpReceiver,
    mcp_server: tuple[str, Path],
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Any],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(SCRIPT)
    mcp_url, traceparents = mcp_server
    agents = _agents(tmp_path, llm.url, mcp_url)
    env = {
        "REDIS_URL": redis_url,
        "AGENTS_API_KEY": SECRET,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    server = start_server(agents, db=postgres_url, env=env)
    worker = start_worker(agents, db=postgres_url, env=env)
    body = json.dumps({"agent": "boss", "prompt": PROMPT})
    created = server.client.post("/v1/sessions?wait=true&timeout=60", content=body)
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    # the helper answers on its own; then only the human's call is left
    view = wait_until(lambda: (v := server.client.get(f"/v1/sessions/{sid}").json())["status"] == "waiting_external"
                      and len(v["pending"]) == 1 and v, 60)
    [pending] = view["pending"]
    assert pending["tool"] == "bash_ask"
    done = server.client.post(f"/v1/continuations/{pending['continuation_token']}?wait=true&timeout=60",
                              content=json.dumps({"result": "yes"}))
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text

    wait_until(lambda: len(receiver.named("invoke_agent")) >= 3 and len(receiver.named("chat")) >= 3
               and receiver.named("POST ^v1/continuations/"), 30)
    spans = receiver.spans
    by_id = {s["span_id"]: s for s in spans}
    runs = receiver.named("invoke_agent boss")
    assert len(runs) == 2, [s["name"] for s in spans]
    for run in runs:
        assert run["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert run["attributes"]["gen_ai.agent.name"] == "boss"
        assert run["attributes"]["gen_ai.conversation.id"] == sid
        assert run["service"] == "agents-worker"
    # each run is a child of the HTTP request that started it, through the Celery task
    [the_first] = [r for r in runs if _started_by(r, by_id, "POST ^v1/sessions$")]
    [resumed] = [r for r in runs if _started_by(r, by_id, "POST ^v1/continuations/")]
    trace_id = the_first["trace_id"]
    assert any(a["name"].startswith("run/sessions.run_session") for a in _ancestors(the_first, by_id))

    chats = [s for s in receiver.named("chat") if s["trace_id"] == trace_id]
    boss_chat = [c for c in chats if c["parent_span_id"] == the_first["span_id"]]
    assert len(boss_chat) == 1
    chat = boss_chat[0]["attributes"]
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.request.model"] == "scripted"
    assert chat["gen_ai.provider.name"] == "openai" and chat["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0

    tools = [s for s in receiver.named("execute_tool") if s["parent_span_id"] == the_first["span_id"]]
    echo = _one(tools, **{"gen_ai.tool.name": "bash_echo"})["attributes"]
    assert echo["agents.tool.kind"] == "bash" and echo["agents.tool.outcome"] == "completed"
    assert echo["agents.tool.policy"] == "runSync" and echo["gen_ai.operation.name"] == "execute_tool"
    mcp = _one(tools, **{"gen_ai.tool.name": "mcp_demo_echo"})
    assert mcp["attributes"]["agents.tool.kind"] == "mcp" and mcp["attributes"]["agents.tool.outcome"] == "completed"
    # the MCP call over HTTP carried the trace: its request is a child of the execute_tool span
    [sent] = traceparents.read_text().split()
    _, sent_trace, sent_parent, _ = sent.split("-")
    assert sent_trace == trace_id
    assert mcp in [by_id[sent_parent], *_ancestors(by_id[sent_parent], by_id)]
    helper = _one(tools, **{"gen_ai.tool.name": "io_prompt_agent_kid"})
    assert helper["attributes"]["agents.tool.outcome"] == "child"
    ask = _one(tools, **{"gen_ai.tool.name": "bash_ask"})
    assert ask["attributes"]["agents.tool.outcome"] == "deferred"

    # the helper's run: a child invoke_agent under the helper call's span, in the same trace
    [kid] = receiver.named("invoke_agent kid")
    assert kid["trace_id"] == trace_id
    assert helper in _ancestors(kid, by_id)
    assert kid["attributes"]["gen_ai.conversation.id"] == helper_child(view)

    # the continuation: its request's span, the parent of the run it resumes, links to the
    # deferred call's span; the helper's run, which answered its call, links to that call's span
    [completion] = [s for s in _ancestors(resumed, by_id) if s["name"].startswith("POST ^v1/continuations/")]
    assert [link["span_id"] for link in completion["links"]] == [ask["span_id"]]
    assert [link["trace_id"] for link in completion["links"]] == [trace_id] != [resumed["trace_id"]]
    assert [link["span_id"] for link in kid["links"]] == [helper["span_id"]]
    assert [c for c in receiver.named("chat") if c["parent_span_id"] == resumed["span_id"]]

    # nothing exported holds the key or, without the opt-in, the prompt
    exported = b"".join(receiver.bodies)
    for secret in (SECRET, MCP_PASSWORD, MCP_QUERY_KEY):
        assert secret.encode() not in exported, secret
    assert b"PROMPT-MARKER" not in exported and b"KID-TASK" not in exported
    # nor the continuation token, which the completion's request path holds
    assert pending["continuation_token"].encode() not in exported
    assert completion["attributes"]["http.target"] == "/v1/continuations/***"

    # the worker's log lines of the run carry its trace and span ids
    started = [json.loads(line) for line in worker.process.output().splitlines()
               if '"run.started"' in line and sid in line]
    assert started and started[0]["trace_id"] == trace_id and started[0]["span_id"] == the_first["span_id"]


def helper_child(view: dict[str, Any]) -> str:
    """The id of the helper session that answered the boss's helper call."""
    [tracked] = [t for t in view["session"]["turns"][0]["contents"]["trackedCalls"]
                 if t["tcCall"]["function"]["name"] == "io_prompt_agent_kid"]
    return str(tracked["tcChild"])
