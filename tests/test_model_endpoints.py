"""Agent files pointed at another model endpoint without editing them (issue 29, acceptance 6;
docs/cli.md §2.3.2): agents-exe's own agent file for a hosted provider runs against the scripted
model through ``--model-url``, with the key ``--api-key-id`` names, and stays unchanged on disk."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfiles.endpoints import EndpointMapError, parse_map
from tests.harness import FIXTURES, PROCESS_TIMEOUT, ROOT, Server, base_env

HOSTED = FIXTURES / "agents" / "demo-agents_openai-01.json"
SCRIPT = {"rules": [{"reply": {"content": "answered locally"}}]}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _keys(tmp_path: Path) -> Path:
    keys = tmp_path / "secret-keys"
    keys.write_text(json.dumps({"openai": "sk-hosted-provider", "local": "local-key"}))
    return keys


def _ask(server: Server) -> dict[str, Any]:
    created = server.client.post(
        "/v1/sessions?wait=true", content=json.dumps({"agent": "demo-openai", "prompt": "Hello?"})
    )
    assert created.status_code == 201, created.text
    return created.json()


@pytest.mark.integration
def test_a_hosted_providers_agent_file_runs_against_the_scripted_model_unchanged(
    tmp_path: Path, llm_server: Callable[..., Any], start_server: Callable[..., Server]
):
    before = _digest(HOSTED)
    assert json.loads(HOSTED.read_text())["contents"]["modelUrl"] == "https://api.openai.com/v1"
    llm = llm_server(SCRIPT)
    server = start_server(
        [HOSTED],
        extra_args=["--api-keys", str(_keys(tmp_path)), "--model-url", f"https://api.openai.com/v1/={llm.url}"]
        + ["--api-key-id", "openai=local"],
    )
    session = _ask(server)
    assert session["status"] == "idle"
    assert "answered locally" in json.dumps(session["session"])
    [request] = llm.requests
    assert request["model"] == "gpt-4.1-mini"
    # the key the map names went to the scripted model, never the hosted provider's
    assert llm.request_headers[0]["authorization"] == "Bearer local-key"
    assert _digest(HOSTED) == before


@pytest.mark.integration
def test_environment_variables_map_too_and_an_empty_key_id_sends_no_key(
    tmp_path: Path, llm_server: Callable[..., Any], start_server: Callable[..., Server]
):
    llm = llm_server(SCRIPT)
    server = start_server(
        [HOSTED],
        extra_args=["--api-keys", str(_keys(tmp_path))],
        env={
            "AGENTS_MODEL_URLS": f"https://api.mistral.ai/v1=http://127.0.0.1:9/v1 https://api.openai.com/v1={llm.url}",
            "AGENTS_API_KEY_IDS": "openai=",
            # not even the fallback key goes out for a key id mapped to nothing
            "AGENTS_API_KEY": "sk-fallback",
        },
    )
    assert _ask(server)["status"] == "idle"
    assert "authorization" not in llm.request_headers[0]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("flag", "entry", "message"),
    [
        ("--model-url", "https://api.openai.com/v1", "--model-url 'https://api.openai.com/v1': expected FROM=TO"),
        ("--model-url", "api.openai.com=http://127.0.0.1:1/v1", "'api.openai.com' is not an http(s):// URL"),
        ("--api-key-id", "=local", "--api-key-id '=local': expected FROM=TO"),
    ],
)
def test_a_bad_entry_stops_the_server_naming_it(tmp_path: Path, flag: str, entry: str, message: str):
    outcome = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "serve", "--port", "0", "--db", str(tmp_path / "db.sqlite3")]
        + ["--agent-file", str(HOSTED), flag, entry],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=base_env(),
        timeout=PROCESS_TIMEOUT,
        check=False,
    )
    assert outcome.returncode == 2, outcome.stderr
    assert message in outcome.stderr
    assert not (tmp_path / "db.sqlite3").exists()


@pytest.mark.integration
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_check_refuses_a_bad_entry_as_serve_does(how: str) -> None:
    flag = ["--model-url", "nonsense"] if how == "flag" else []
    env = base_env(**({"AGENTS_MODEL_URLS": "x=y"} if how == "environment" else {}))
    outcome = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", *flag, "check", "--agent-file", str(HOSTED)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=PROCESS_TIMEOUT, check=False,
    )
    assert outcome.returncode == 2, outcome.stderr
    assert len(outcome.stderr.strip().splitlines()) == 1 and "Error:" not in outcome.stderr, outcome.stderr


def test_maps_are_read_entry_by_entry():
    assert parse_map(["https://a.example/v1/=http://127.0.0.1:1/v1"], "--model-url", urls=True) == {
        "https://a.example/v1": "http://127.0.0.1:1/v1"
    }
    assert parse_map(["openai=", "kimi=local"], "--api-key-id", urls=False) == {"openai": "", "kimi": "local"}
    with pytest.raises(EndpointMapError, match="'openai' is mapped twice"):
        parse_map(["openai=a", "openai=b"], "--api-key-id", urls=False)
    with pytest.raises(EndpointMapError, match="is not an http"):
        parse_map(["https://a.example/v1="], "--model-url", urls=True)
