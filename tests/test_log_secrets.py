"""No secret in any log line (docs/api.md §14.3): URLs are written without their credentials, the
continuation token is never written, and neither are keys or bearer tokens.

The acceptance test runs the scaled-out topology (a server and a worker on PostgreSQL and Redis)
with a real MCP streamable-HTTP server reached through a URL holding a password and a query key,
a deferred call published to a Celery queue and completed over HTTP, providers that fail quoting
the key they were sent, and a ``modelUrl`` with credentials that nobody answers; then the embedded
default with a deferred call it cannot publish. Every log file of every process it started is
then searched for each secret.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from devtools.mockllm import MockLlmServer
from foundation.logging import JsonFormatter
from foundation.redaction import redact_for_log, redact_url, redact_urls
from tests.harness import ROOT, Process, Server, Worker, base_env, free_port, wait_until, write_agent
from tests.owners import TOKENS, owner, write_tokens
from tests.streams import SseReader, WsReader

DEMO = ROOT / "tests" / "mcp_demo_server.py"
EXAMPLE = ROOT / "examples" / "celery-worker"
MCP_PASSWORD = "mcp-pass-7f3a91c2"
MCP_QUERY_KEY = "mcp-query-key-5b2c8e"
LLM_KEY = "sk-logs-4d3c2b1a0f9e"
LLM_URL_PASSWORD = "llm-url-pass-93ab17"
SECRET_KEY = "logs-test-secret-key-0c1d2e3f4a5b"


def test_redact_url_removes_userinfo_query_values_and_fragment() -> None:
    assert redact_url("http://user:pass@host:8080/mcp?api_key=k1&v=2") == "http://***@host:8080/mcp?api_key=***&v=***"
    assert redact_url("https://ghp_token@github.com/org/repo.git") == "https://***@github.com/org/repo.git"
    assert redact_url("redis://:pw@127.0.0.1:6379/0") == "redis://***@127.0.0.1:6379/0"
    assert redact_url("http://h/p?flag&empty=#frag") == "http://h/p?flag&empty=#***"
    # a URL no parser accepts is cut by hand all the same
    assert redact_url("http://a:b@[::1/x?token=t") == "http://***@[::1/x?token=***"
    assert redact_url("http://example.com/a/b") == "http://example.com/a/b"
    assert redact_url("not a url") == "not a url"


def test_redact_urls_and_log_text() -> None:
    text = "git clone https://u:tok@git.example/r.git failed: 'https://u:tok@git.example/r.git' not found"
    assert redact_urls(text) == (
        "git clone https://***@git.example/r.git failed: 'https://***@git.example/r.git' not found"
    )
    token = "6f1c3a9e-2b7d-4c55-9e0a-1d2c3b4a5f60"
    assert redact_for_log(f"Internal Server Error: /v1/continuations/{token}") == (
        "Internal Server Error: /v1/continuations/***"
    )
    assert redact_for_log(f"/v1/continuations/{token}/x") == "/v1/continuations/***/x"
    # a client's doubled slash or a dot segment reaches the log as sent: the token is still hidden
    assert redact_for_log(f'"path": "/v1//continuations/{token}"') == '"path": "/v1//continuations/***"'
    assert redact_for_log(f"/v1/x/../Continuations//{token}") == "/v1/x/../Continuations//***"


def test_the_json_formatter_redacts_every_text_of_a_line() -> None:
    url = f"http://u:{MCP_PASSWORD}@h/mcp?api_key={MCP_QUERY_KEY}"
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "reaching %s", (url,), None)
    record.kind = "t.kind"
    record.url = url
    record.nested = {"urls": [url, ("x", url)], "path": "/v1/continuations/abc-def"}
    try:
        raise ConnectionError(f"cannot reach {url}")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert MCP_PASSWORD not in line and MCP_QUERY_KEY not in line and "abc-def" not in line
    decoded = json.loads(line)
    assert decoded["message"] == "reaching http://***@h/mcp?api_key=***"
    assert decoded["url"] == "http://***@h/mcp?api_key=***"
    assert decoded["nested"]["path"] == "/v1/continuations/***"
    assert "cannot reach http://***@h/mcp?api_key=***" in decoded["exception"]


def test_compose_requires_a_secret_key() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    value = compose["x-agents-env"]["DJANGO_SECRET_KEY"]
    # ${VAR:?message}: compose refuses to start without it, rather than using a published key
    assert value.startswith("${DJANGO_SECRET_KEY:?"), value


def _script() -> dict[str, Any]:
    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"tool_calls": [{"name": name, "arguments": arguments}]}

    return {
        "rules": [
            {"when": {"last_role": "user", "last_contains": "LEAK-401"},
             "reply": {"status": 401, "error": f"Incorrect API key provided: {LLM_KEY}"}},
            {"when": {"last_role": "user", "last_contains": "LEAK-500"},
             "reply": {"status": 500, "error": f"upstream refused key={LLM_KEY}"}},
            {"when": {"last_role": "user", "last_contains": "ECHO"}, "reply": call("mcp_demo_echo", {"text": "back"})},
            {"when": {"last_role": "user", "last_contains": "CRASH"}, "reply": call("mcp_demo_crash", {})},
            {"when": {"last_role": "user", "last_contains": "CHARGE"},
             "reply": call("bash_charge-card", {"customer": "alice", "amount": "3"})},
            {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
            {"reply": {"content": "ok"}},
        ]
    }


def _billing_agent(tmp: Path, llm: MockLlmServer) -> Path:
    """The example's billing agent (its charge is deferred to the ``billing`` queue)."""
    target = tmp / "billing"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    document = json.loads((target / "billing.json").read_text())
    document["contents"].update(modelUrl=llm.url, apiKeyId="test")
    (target / "billing.json").write_text(json.dumps(document))
    return target / "billing.json"


def _mcp_server(tmp: Path) -> tuple[Process, str]:
    """The demo MCP server over streamable HTTP, and a URL to it holding credentials."""
    port = free_port()
    process = Process([sys.executable, str(DEMO), "--http", str(port)], base_env(), tmp / "mcp-demo.log")

    def listening() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
        except httpx.TransportError:
            return False
        return True

    wait_until(listening, 60)
    return process, f"http://logs-user:{MCP_PASSWORD}@127.0.0.1:{port}/mcp?api_key={MCP_QUERY_KEY}"


def _ask(server: Server, agent: str, prompt: str, token: str = TOKENS["root"]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    reply = server.client.post(
        "/v1/sessions?wait=true", content=json.dumps({"agent": agent, "prompt": prompt}), headers=headers
    )
    assert reply.status_code == 201, reply.text
    return reply.json()


def _pending_token(server: Server, sid: str, headers: dict[str, str]) -> str:
    view = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{sid}", headers=headers).json())["status"] == "waiting_external"
        and v,
        90,
    )
    return view["pending"][0]["continuation_token"]


def _complete(server: Server, token: str, headers: dict[str, str]) -> None:
    answer = server.client.post(f"/v1/continuations/{token}", json={"result": "paid"}, headers=headers)
    assert answer.status_code in (200, 202), answer.text


def test_no_secret_reaches_a_log_line_scaled_out_or_embedded(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(_script())
    mcp, mcp_url = _mcp_server(tmp_path)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"test": LLM_KEY}))
    lost_url = f"http://llm-user:{LLM_URL_PASSWORD}@127.0.0.1:{free_port()}/v1"
    agents = [
        write_agent(tmp_path, "demo", llm.url, mcpServers=[{"tag": "McpStreamableHttp",
                                                            "contents": {"name": "demo", "url": mcp_url}}]),
        write_agent(tmp_path, "lost", lost_url),
        _billing_agent(tmp_path, llm),
    ]
    env = {"REDIS_URL": redis_url, "DJANGO_SECRET_KEY": SECRET_KEY, "AGENTS_API_KEYS": str(keys)}
    tokens = write_tokens(tmp_path)
    root = owner("root")
    continuation_tokens = []
    try:
        server = start_server(agents, db=postgres_url, env=env, extra_args=["--auth-tokens", str(tokens)])
        worker = start_worker(agents, db=postgres_url, env=env)
        # the streams, with their tokens in the query as browsers send them
        sse = SseReader(f"{server.url}/v1/events?access_token={TOKENS['root']}")
        ws = WsReader(f"ws://127.0.0.1:{server.port}/v1/ws/events?access_token={TOKENS['alice']}")
        ws.wait_for(lambda messages: any(m.get("event") == "replay" for m in messages))

        assert _ask(server, "demo", "ECHO")["status"] == "idle"
        # the MCP server exits during the call: the worker's connection is gone
        _ask(server, "demo", "CRASH", token=TOKENS["alice"])
        wait_until(lambda: "mcp.server_gone" in worker.process.output(), 60)

        for prompt in ("LEAK-401", "LEAK-500"):
            failed = _ask(server, "billing", prompt)
            assert failed["status"] == "failed" and "[redacted]" in failed["status_detail"], failed
        lost = _ask(server, "lost", "hello")
        assert lost["status"] == "failed", lost
        assert "http://***@127.0.0.1:" in lost["status_detail"] and LLM_URL_PASSWORD not in json.dumps(lost)

        sid = server.client.post("/v1/sessions", json={"agent": "billing", "prompt": "CHARGE"}, headers=root).json()[
            "session_id"
        ]
        continuation_tokens.append(_pending_token(server, sid, root))
        wait_until(lambda: "deferred.published" in server.process.output() + worker.process.output(), 60)
        _complete(server, continuation_tokens[-1], root)
        sse.close()
        ws.close()

        embedded = start_server([_billing_agent(tmp_path / "embedded", llm)], env={"AGENTS_API_KEYS": str(keys)})
        sid = embedded.client.post("/v1/sessions", json={"agent": "billing", "prompt": "CHARGE"}).json()["session_id"]
        continuation_tokens.append(_pending_token(embedded, sid, {}))
        wait_until(lambda: "deferred.not_published" in embedded.process.output(), 60)
        _complete(embedded, continuation_tokens[-1], {})
        for process in (server, worker, embedded):
            process.stop()
    finally:
        mcp.stop()

    logs = {path.name: path.read_text(errors="replace") for path in tmp_path.rglob("*.log")}
    assert {"mcp-demo.log"} < set(logs) and sum(name.startswith("worker-") for name in logs) == 1
    everything = "\n".join(logs.values())
    # the lines are there, with what may be said of their secrets
    redacted_mcp = redact_url(mcp_url)
    assert redacted_mcp == f"{mcp_url.split('//')[0]}//***@{mcp_url.split('@')[1].split('?')[0]}?api_key=***"
    for kind in ("mcp.server_starting", "mcp.server_started", "mcp.server_gone"):
        lines = [line for line in everything.splitlines() if f'"kind": "{kind}"' in line]
        assert lines and all(redacted_mcp in line for line in lines), kind
    assert '"path": "/v1/continuations/***"' in everything
    secrets = {
        "the MCP URL's password": MCP_PASSWORD,
        "the MCP URL's query key": MCP_QUERY_KEY,
        "the LLM key": LLM_KEY,
        "the modelUrl's password": LLM_URL_PASSWORD,
        "the server's secret key": SECRET_KEY,
        **{f"{name}'s bearer token": token for name, token in TOKENS.items()},
        **{f"continuation token {token}": token for token in continuation_tokens},
    }
    leaks = {
        name: [f"{file}: {line}" for file, text in logs.items() for line in text.splitlines() if secret in line]
        for name, secret in secrets.items()
    }
    assert not {name: lines for name, lines in leaks.items() if lines}


def test_a_git_source_error_is_told_without_the_url_credentials(tmp_path: Path, settings: Any) -> None:
    from tools_app.skills.sources import SkillSourceError, clone

    settings.AGENTS = {**settings.AGENTS, "SKILLS_CACHE": str(tmp_path / "cache")}
    url = f"http://git-user:{MCP_PASSWORD}@127.0.0.1:{free_port()}/skills.git?token={MCP_QUERY_KEY}"
    try:
        clone(url, None, "skillSources[0]", [])
    except SkillSourceError as error:
        message = str(error)
    else:
        raise AssertionError("the clone of an unreachable URL succeeded")
    assert MCP_PASSWORD not in message and MCP_QUERY_KEY not in message
    assert "git clone http://***@127.0.0.1:" in message
