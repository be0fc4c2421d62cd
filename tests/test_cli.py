"""The command line: ``agents check`` and startup refusals, run as real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import FIXTURES, PROCESS_TIMEOUT, ROOT, base_env, free_port, write_agent

# every test here runs the agents command line as a process
pytestmark = pytest.mark.integration

AGENTS = FIXTURES / "agents"


def agents(*argv: str, timeout: float = PROCESS_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", *argv],
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_check_accepts_good_files_and_lists_every_problem_of_bad_ones() -> None:
    good = agents(
        "check",
        "--agent-file",
        str(AGENTS / "demo-agents_openai-01.json"),
        "--agent-file",
        str(ROOT / "examples" / "shell" / "shell.json"),
    )
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == [
        "demo-openai: The main agent, capable of reasoning. (0 tools)",
        "shell-helper: counts words and tells the time with small bash tools, and asks a human before it"
        " finishes (3 tools)",
        # every tool name the model may see (LLM-valid)
        "  shell-helper: tools: bash_ask_human, bash_now, bash_word-count",
        # where each path was found, under its root (docs/agents.md §3)
        f"  shell-helper: toolDirectory 'tools': the agent file's directory ({ROOT / 'examples' / 'shell' / 'tools'})",
    ]
    bad = agents(
        "check",
        "--agent-file",
        str(AGENTS / "dev-agents_agent.json"),
        "--agent-file",
        str(AGENTS / "demo-agents_ollama-01.json"),
        "--agent-file",
        str(AGENTS / "agents_retro.json"),
    )
    assert bad.returncode == 1
    # the System toolbox of demo-ollama runs now (docs/guide-toolboxes.md §1)
    assert bad.stdout.splitlines() == [
        "demo-ollama-qwen3-4bthinking: A main agent, capable of reasoning. (1 tools)",
        "  demo-ollama-qwen3-4bthinking: tools: system_system_system_info",
    ]
    # the fixtures may be reached through a link (AGENTS_TEST_FIXTURES, a CI layout): some paths
    # come back with it resolved
    problems = [
        line.replace(str(AGENTS.resolve()), str(AGENTS))
        for line in bad.stderr.splitlines()
        if not line.startswith("warning:")
    ]
    # a missing path lists every place looked in: beside the file, then the working directory
    assert problems == [
        f"{AGENTS / 'dev-agents_agent.json'}: toolDirectory 'tools' not found"
        f" (looked in {AGENTS / 'tools'}, {ROOT / 'tools'})",
        f"{AGENTS / 'agents_retro.json'}: extraAgents[0]: MissingAgentReference: helper 'faq' not found"
        f" (looked in {AGENTS / 'faq.json'}, {ROOT / 'faq.json'})",
        f"{AGENTS / 'agents_retro.json'}: extraAgents[1]: MissingAgentReference: helper 'issuer' not found"
        f" (looked in {AGENTS / 'issuer.json'}, {ROOT / 'issuer.json'})",
    ]


def test_serve_refuses_to_start_with_a_broken_agent_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": {"slug": "x"}}))
    result = agents(
        "serve", "--agent-file", str(broken), "--db", str(tmp_path / "db.sqlite3"), "--port", str(free_port())
    )
    assert result.returncode == 2
    assert f"agents: {broken}: modelName: field required" in result.stderr


def test_serve_refuses_duplicate_root_slugs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_agent(tmp_path / "a", "same", "http://127.0.0.1:9/v1")
    second = write_agent(tmp_path / "b", "same", "http://127.0.0.1:9/v1")
    result = agents(
        "serve",
        "--agent-file",
        str(first),
        "--agent-file",
        str(second),
        "--db",
        str(tmp_path / "db.sqlite3"),
        "--port",
        str(free_port()),
    )
    assert result.returncode == 2
    assert "duplicate root agent slug 'same'" in result.stderr


def test_mock_llm_refuses_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [{"when": {"last_contain": "x"}, "reply": {"content": "y"}}]}))
    result = agents("mock-llm", "--script", str(script), "--port", str(free_port()))
    assert result.returncode == 2
    assert "last_contain" in result.stderr
