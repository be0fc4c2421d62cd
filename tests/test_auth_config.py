"""Authentication flags: startup refusals, environment variables, per-owner LLM keys.

Servers and workers run as real processes; the LLM is the scripted server, which records the
``Authorization`` header of every request it gets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from foundation.auth import AuthConfigError, build_auth_config, is_loopback_origin, load_tokens_file, normalize_origin
from tests.harness import PROCESS_TIMEOUT, ROOT, Server, base_env, free_port, write_agent
from tests.owners import TOKENS, owner, write_tokens
from tests.streams import SseReader


def serve(
    *argv: str, env: dict[str, str] | None = None, timeout: float = PROCESS_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "serve", "--port", str(free_port()), *argv],
        cwd=ROOT,
        env=base_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _keys(path: Path, value: object) -> Path:
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    return {
        "agent": str(agent),
        "db": str(tmp_path / "db.sqlite3"),
        "tokens": str(write_tokens(tmp_path)),
        "keys": str(_keys(tmp_path / "alice-keys.json", {"test": "alice-key"})),
        "broken_keys": str(_keys(tmp_path / "broken-keys.json", "{not json")),
        "broken_tokens": str(_keys(tmp_path / "broken-tokens.json", {"tokens": [{"owner": "x"}]})),
    }


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--admin-owners", "root"], "--admin-owners needs --auth-tokens"),
        (["--owner-api-keys", "alice={keys}"], "--owner-api-keys needs --auth-tokens"),
        (["--auth-tokens", "{tokens}", "--cors-origin", "*"], "--cors-origin '*' cannot be used with --auth-tokens"),
        (["--cors-origin", "app.example.com"], "is not an origin"),
        (["--auth-tokens", "{db}.missing"], "auth tokens file not found"),
        (["--auth-tokens", "{broken_keys}"], "invalid JSON"),
        (["--auth-tokens", "{broken_tokens}"], "give exactly one of 'sha256' and 'token'"),
        (["--auth-tokens", "{tokens}", "--owner-api-keys", "alice={db}.missing"], "API keys file not found"),
        (["--auth-tokens", "{tokens}", "--owner-api-keys", "alice={broken_keys}"], "invalid JSON"),
        (["--auth-tokens", "{tokens}", "--owner-api-keys", "alice"], "expected OWNER=FILE"),
        (
            ["--auth-tokens", "{tokens}", "--owner-api-keys", "alice={keys}", "--owner-api-keys", "alice={keys}"],
            "owner 'alice' is given twice",
        ),
    ],
)
def test_serve_refuses_inconsistent_auth_flags(files: dict[str, str], args: list[str], message: str) -> None:
    argv = [arg.format(**files) for arg in args]
    result = serve("--agent-file", files["agent"], "--db", files["db"], *argv)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "server started" not in result.stderr


@pytest.mark.integration
def test_the_same_refusals_from_environment_variables(files: dict[str, str]) -> None:
    result = serve("--agent-file", files["agent"], "--db", files["db"], env={"AGENTS_ADMIN_OWNERS": "root"})
    assert result.returncode == 2 and "--admin-owners needs --auth-tokens" in result.stderr
    result = serve(
        "--agent-file",
        files["agent"],
        "--db",
        files["db"],
        env={"AGENTS_AUTH_TOKENS": files["tokens"], "AGENTS_CORS_ORIGINS": "https://a.example,*"},
    )
    assert result.returncode == 2 and "--cors-origin '*'" in result.stderr


def test_a_worker_refuses_a_missing_owner_keys_file(files: dict[str, str], redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "worker", "--agent-file", files["agent"], "--db", files["db"]]
        + ["--owner-api-keys", f"alice={files['db']}.missing"],
        cwd=ROOT,
        env=base_env(REDIS_URL=redis_url),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 2 and "API keys file not found" in result.stderr


def test_every_flag_can_be_an_environment_variable_and_owners_use_their_own_llm_keys(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "hello"}}]})
    agent = write_agent(tmp_path, "plain", llm.url)
    shared = _keys(tmp_path / "shared.json", {"test": "shared-key"})
    alice = _keys(tmp_path / "alice.json", {"keys": [{"id": "test", "value": "alice-key"}]})
    bob = _keys(tmp_path / "bob.json", {"other": "bob-key"})
    env = {
        "REDIS_URL": redis_url,
        "AGENTS_API_KEYS": str(shared),
        "AGENTS_OWNER_API_KEYS": f"alice={alice}:bob={bob}",
        "AGENTS_AUTH_TOKENS": str(write_tokens(tmp_path)),
        "AGENTS_ADMIN_OWNERS": "root",
        "AGENTS_CORS_ORIGINS": "https://app.example.com",
    }
    # scaled out: the worker makes the LLM calls, so it needs the owners' keys too
    server = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    assert server.client.get("/v1/sessions").status_code == 401
    allowed = server.client.get("/v1/agents", headers={"Origin": "https://app.example.com", **owner("alice")})
    assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"

    def run(who: str, **extra: object) -> dict:
        body = {"agent": "plain", "prompt": f"hello from {who}", **extra}
        answer = server.client.post("/v1/sessions?wait=true", headers=owner(who), content=json.dumps(body))
        assert answer.status_code == 201 and answer.json()["status"] == "idle", answer.text
        return answer.json()

    def key_of(prompt: str) -> str | None:
        for request, headers in zip(llm.requests, llm.request_headers, strict=True):
            if request["messages"][-1]["content"] == prompt:
                return headers.get("authorization")
        raise AssertionError(f"no LLM request for {prompt!r}")

    parent = run("alice")
    run("bob")
    run("root")
    # a sub-session uses the keys of its root's owner
    run("alice", parent=parent["session_id"], prompt="hello from alice's child")
    assert key_of("hello from alice") == "Bearer alice-key"
    assert key_of("hello from alice's child") == "Bearer alice-key"
    # bob's file replaces the shared one and has no "test" key: no Authorization header at all
    assert key_of("hello from bob") is None
    # owners without a file of their own use the shared file
    assert key_of("hello from root") == "Bearer shared-key"
    # root is an admin owner (AGENTS_ADMIN_OWNERS)
    scope_all = SseReader(f"{server.url}/v1/events?scope=all&after=0", headers=owner("root"))
    assert scope_all.status == 200
    scope_all.wait_for(lambda e: {x["data"]["owner"] for x in e} == {"alice", "bob", "root"})
    scope_all.close()
    for token in TOKENS.values():
        assert token not in server.process.output()


def test_tokens_files_origins_and_config_checks(tmp_path: Path) -> None:
    config = build_auth_config(str(write_tokens(tmp_path)), ["root"], ["https://App.Example.com:8443"])
    assert config.enabled and config.owner_of(TOKENS["bob"]) == "bob" and config.owner_of("bob") is None
    assert config.principal_for("root").admin and not config.principal_for("alice").admin
    assert config.origin_listed("https://app.example.COM:8443") and not config.origin_listed("https://app.example.com")
    assert normalize_origin("HTTP://[::1]:80") == "http://[::1]:80"
    assert normalize_origin("https://a.example/path") is None and normalize_origin("null") is None
    assert is_loopback_origin("http://[::1]:3000") and is_loopback_origin("https://localhost")
    assert not is_loopback_origin("http://localhost@evil.example") and not is_loopback_origin("null")
    for document in ({"tokens": [{"owner": "a", "sha256": "abc"}]}, {"tokens": [{"owner": "a", "token": "st_x"}]}, []):
        path = _keys(tmp_path / "t.json", document)
        with pytest.raises(AuthConfigError):
            load_tokens_file(path)
    off = build_auth_config("", [], [])
    assert not off.enabled and off.origin_allowed(None) and not off.origin_allowed("https://x.example")


def test_request_records_in_the_log_keep_no_query_string() -> None:
    import logging

    from django.test import RequestFactory

    from foundation.logging import JsonFormatter

    request = RequestFactory().get("/v1/events?access_token=secret-in-query")
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error", None, None)
    record.request = request
    record.status_code = 500
    line = json.loads(JsonFormatter().format(record))
    assert line["request"] == "GET /v1/events" and "secret-in-query" not in json.dumps(line)
