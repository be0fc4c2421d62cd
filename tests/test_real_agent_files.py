"""Real agent files run unchanged from a checkout laid out like agents-exe's (issue 11, acceptance 1).

agents-exe's users run it from the root of their repository: agent files in ``agents/`` (and
``demo-agents/``, ``dev-agents/``) name their tools ``tools/...`` from that root, and their helpers
beside them. Relative paths are looked for from the agent file's directory, then from the
working directory (docs/agents.md §3), so every fixture that uses only bash tools, built-in
toolboxes and helpers passes ``agents check`` and serves from there, its files unchanged.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import FIXTURES, PROCESS_TIMEOUT, ROOT, Server, base_env, write_tool

# every test here runs the agents command line as a process
pytestmark = pytest.mark.integration

AGENTS = FIXTURES / "agents"
STUB = {
    "apiKeyId": "k",
    "flavor": "OpenAIv1",
    "modelUrl": "http://127.0.0.1:9/v1",
    "modelName": "m",
    "announce": "a helper",
    "systemPrompt": ["help"],
}
#: Every fixture but demo-kimi, whose MCP server this server does not run.
FILES = {
    "architect": "agents/architect.json",
    "oneshot": "agents/oneshot.json",
    "retro": "agents/retro.json",
    "demo-mistral": "demo-agents/mistral-01.json",
    "demo-openai": "demo-agents/openai-01.json",
    "demo-ollama-qwen3-4bthinking": "demo-agents/ollama-01.json",
    "sub-agent": "demo-agents/sub-agents/sub-agent.json",
    "dev-kimi": "dev-agents/agent.json",
}


def _checkout(root: Path) -> None:
    """A checkout: the fixtures where their repositories keep them, tools named from the root."""
    copies = {
        "agents/architect.json": "agents_architect.json",
        "agents/oneshot.json": "agents_oneshot.json",
        "agents/retro.json": "agents_retro.json",
        "demo-agents/mistral-01.json": "demo-agents_mistral-01.json",
        "demo-agents/openai-01.json": "demo-agents_openai-01.json",
        "demo-agents/ollama-01.json": "demo-agents_ollama-01.json",
        "demo-agents/sub-agents/sub-agent.json": "demo-agents_sub-agents_sub-agent.json",
        "dev-agents/agent.json": "dev-agents_agent.json",
    }
    for target, fixture in copies.items():
        (root / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(AGENTS / fixture, root / target)
    for slug in ("faq", "issuer"):
        (root / "agents" / f"{slug}.json").write_text(
            json.dumps({"tag": "OpenAIAgentDescription", "contents": {"slug": slug, **STUB}})
        )
    for directory in ("dev/read", "dev/write", "github/write", "git/read", "web/read"):
        name = directory.replace("/", "-")
        write_tool(root / "tools" / directory, f"{name}.sh", {"slug": name, "description": name, "args": []}, "pwd")
    # dev-agents/agent.json's toolDirectory "tools" is the root's tools directory
    write_tool(root / "tools", "now", {"slug": "now", "description": "the date", "args": []}, "date")
    (root / "resources").mkdir()
    sqlite3.connect(root / "resources" / "documenter-knowledge.db").close()


def test_every_agent_file_passes_check_from_the_root_of_the_checkout(tmp_path: Path) -> None:
    _checkout(tmp_path)
    argv = [sys.executable, "-m", "agentsite.cli", "check"]
    for relative in FILES.values():
        argv += ["--agent-file", relative]
    result = subprocess.run(
        argv, cwd=tmp_path, env=base_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    roots = [line.split(":", 1)[0] for line in result.stdout.splitlines() if not line.startswith("  ")]
    assert roots == list(FILES)
    # check says where each path was found: the tools from the root, the helpers beside the file
    found = [line.strip() for line in result.stdout.splitlines() if line.startswith("  ")]
    assert (
        f"architect: bashToolboxes[0] 'tools/dev/read': the working directory ({tmp_path}/tools/dev/read)" in found
    )
    assert f"architect: extraAgents[1] 'faq.json': the agent file's directory ({tmp_path}/agents/faq.json)" in found
    assert f"dev-kimi: toolDirectory 'tools': the working directory ({tmp_path}/tools)" in found


def test_a_missing_path_lists_every_place_looked_in(tmp_path: Path) -> None:
    _checkout(tmp_path)
    shutil.rmtree(tmp_path / "tools" / "git")
    result = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", "agents/architect.json"],
        cwd=tmp_path,
        env=base_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 1
    assert (
        f"{tmp_path}/agents/architect.json: bashToolboxes[2]: directory 'tools/git/read' not found "
        f"(looked in {tmp_path}/agents/tools/git/read, {tmp_path}/tools/git/read)"
    ) in result.stderr.splitlines()


def test_every_agent_file_serves_from_the_root_of_the_checkout(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    root = tmp_path / "checkout"
    _checkout(root)
    server = start_server([Path(relative) for relative in FILES.values()], cwd=root)
    agents = {agent["slug"]: agent for agent in server.client.get("/v1/agents").json()}
    assert set(FILES) <= set(agents)
    assert agents["architect"]["tools"] == [
        "io_prompt_agent_architect",
        "io_prompt_agent_faq",
        # an agent with helpers may describe and narrow them (docs/tools.md §8.6)
        "describe_agent",
        "derive_agent",
        "bash_dev-read",
        "bash_github-write",
        "bash_git-read",
        "bash_web-read",
        "sqlite_knowledge_store_query",
    ]
    assert agents["dev-kimi"]["tools"] == ["bash_now"]
