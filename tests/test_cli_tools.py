"""agents-exe's smaller commands, prompt assembly, keys and session-file tools (issue 17), as
real processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import FIXTURES, write_agent, write_tool
from tests.test_cli_run import SCRIPT, deferring_agent, exe

ECHO_TOOL = {"slug": "echo", "description": "say it back",
             "args": [{"name": "text", "description": "what to say", "type": "string", "backing_type": "string",
                       "arity": "single", "mode": "dashdashspace"}]}


@pytest.mark.usefixtures("processes")
def test_echo_prompt_assembles_directives_in_command_line_order(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("from a file")
    shown = exe(tmp_path, "echo-prompt", "-p", "first", "-s", "=", "-f", "a.txt", "--shell", "echo shelled",
                "-S", "-", "-p", "last")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "first\n====\nfrom a file\nshelled\n\n" + "-" * 40 + "\nlast\n"
    piped = exe(tmp_path, "echo-prompt", stdin="all of stdin")
    assert piped.stdout == "all of stdin"
    (tmp_path / "code.py").write_text("print(1)")
    reviewed = exe(tmp_path, "echo-prompt", "-p", "after", "--alias", "code-review", "-f", "code.py")
    assert reviewed.stdout.startswith("Review this code")
    assert "```python\nprint(1)\n```\nafter\n" in reviewed.stdout
    (tmp_path / "agents-exe.cfg.json").write_text(json.dumps({"promptAliases": {
        "shout": {"template": "SHOUT: {{content}}", "inputMode": "stdin"},
        "pre": {"systemPrompt": ["x"], "userPromptPrefix": "Context first."}}}))
    assert exe(tmp_path, "echo-prompt", "--alias", "shout", stdin="hey").stdout == "SHOUT: hey\n"
    assert exe(tmp_path, "echo-prompt", "--alias", "pre", "-p", "go").stdout == "Context first.\ngo\n"
    unknown = exe(tmp_path, "echo-prompt", "--alias", "nope")
    assert unknown.returncode == 3
    assert unknown.stderr.splitlines()[:2] == ["Error: Unknown alias 'nope'", "Available aliases:"]
    assert "  - shout" in unknown.stderr
    failing = exe(tmp_path, "echo-prompt", "--shell", "exit 3")
    assert failing.returncode == 1 and "exited with status 3" in failing.stderr
    session = exe(tmp_path, "echo-prompt", "--session-xs", str(FIXTURES / "sessions" / "turn-v0.001.json"))
    assert "### Query\n\nhi\n" in session.stdout and "Statistics" not in session.stdout
    broken = exe(tmp_path, "echo-prompt", "--session-m", "missing.json")
    assert broken.returncode == 0 and broken.stdout.startswith("_(Error loading session:")
    (tmp_path / "agents-exe.cfg.json").write_text("[1]")
    assert exe(tmp_path, "echo-prompt", "-p", "x", "--alias", "shout").returncode == 3


def test_keys_come_from_the_config_directory_and_agents_api_key_fills_in(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "keyed", llm.url)
    config_dir = tmp_path / "conf"
    env = {"AGENTS_CONFIG_DIR": str(config_dir)}
    assert exe(tmp_path, "config", "api-key", "list", env=env).stdout == "No API keys configured\n"
    created = exe(tmp_path, "config", "api-key", "create", "test", env=env)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("Created API key: test\n")
    assert exe(tmp_path, "config", "api-key", "create", "test", env=env).returncode == 1
    assert exe(tmp_path, "config", "--force", "api-key", "create", "test", env=env).returncode == 0
    keys_file = config_dir / "secret-keys"
    assert json.loads(keys_file.read_text()) == {"keys": [{"id": "test", "value": "<insert-your-api-key-here>"}]}
    keys_file.write_text(json.dumps({"keys": [{"id": "test", "value": "sk-from-file"}]}))
    listed = exe(tmp_path, "config", "api-key", "list", env=env)
    assert listed.stdout == "Configured API keys:\n  - test\n" and "sk-from" not in listed.stdout

    ran = exe(tmp_path, "--agent-file", str(agent), "run", "-p", "hi", env=env)
    assert ran.returncode == 0, ran.stderr
    assert llm.request_headers[-1]["authorization"] == "Bearer sk-from-file"
    fallback = exe(tmp_path, "--agent-file", str(agent), "run", "-p", "hi",
                   env={"AGENTS_CONFIG_DIR": str(tmp_path / "empty"), "AGENTS_API_KEY": "sk-fallback"})
    assert fallback.returncode == 0, fallback.stderr
    assert llm.request_headers[-1]["authorization"] == "Bearer sk-fallback"


def test_tool_commands_describe_check_call_and_replay(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    tool = write_tool(tmp_path / "tools", "echo", ECHO_TOOL, 'echo "said: $2"')
    described = exe(tmp_path, "describe-tool", str(tool))
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)["name"] == "bash_echo"
    assert exe(tmp_path, "describe-tool", str(tmp_path / "nope")).returncode == 5

    valid = exe(tmp_path, "check-tool-call", "-t", str(tool), stdin='{"text": "hi"}')
    assert (valid.returncode, valid.stdout) == (0, "✓ Tool call payload is valid\n")
    invalid = exe(tmp_path, "check-tool-call", "-t", str(tool), stdin="{}")
    assert invalid.returncode == 1
    assert invalid.stdout.splitlines() == [
        f"Tool call validation failed for '{tool} (bash_echo)' with 1 errors:",
        "  1. text: Required property missing",
        "Please correct these issues and try again.",
    ]
    assert exe(tmp_path, "check-tool-call", "-t", str(tool), stdin="{not json").returncode == 1

    llm = llm_server({"rules": [
        {"when": {"last_role": "user"}, "reply": {"content": "", "tool_calls": [
            {"name": "bash_echo", "arguments": {"text": "hello"}, "id": "call_e1"}]}},
        {"reply": {"content": "done"}}]})
    agent = write_agent(tmp_path, "talker", llm.url, toolDirectory="tools")
    called = exe(tmp_path, "--agent-file", str(agent), "tool-call", "echo", stdin='{"text": "direct"}')
    assert (called.returncode, json.loads(called.stdout)) == (0, "said: direct\n"), called.stderr
    assert exe(tmp_path, "--agent-file", str(agent), "tool-call", "nope", stdin="{}").returncode == 5

    ran = exe(tmp_path, "--agent-file", str(agent), "run", "--session-file", "talk.json", "-p", "go")
    assert ran.stdout == "done\n", ran.stderr
    listed = exe(tmp_path, "list-tool-calls", "talk.json", "-f", "json")
    assert json.loads(listed.stdout) == [
        {"index": 0, "turn": 2, "id": "call_e1", "name": "bash_echo", "arguments": {"text": "hello"}}]
    human = exe(tmp_path, "list-tool-calls", "talk.json")
    assert human.stdout.startswith("Found 1 tool call(s):\n\n[0] bash_echo\n  Turn: 2\n")
    replayed = exe(tmp_path, "replay-tool-call", "-s", "talk.json", "-i", "0", "-t", str(tool))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines()[:2] == ["✓ Tool call validation passed", "Tool: bash_echo"]
    assert "=== Tool Output ===\nsaid: hello\n" in replayed.stdout
    raw = exe(tmp_path, "replay-tool-call", "-s", "talk.json", "-i", "0", "-t", str(tool), "--raw")
    assert raw.stdout.startswith("said: hello")
    assert exe(tmp_path, "replay-tool-call", "-s", "talk.json", "-i", "3", "-t", str(tool)).returncode == 1


@pytest.mark.usefixtures("processes")
def test_session_print_options(tmp_path: Path) -> None:
    older = FIXTURES / "sessions" / "partial-turn-older.json"
    printed = exe(tmp_path, "session-print", str(older), "--no-funny-stamp", "--show-tool-call-results")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("# Session 5b0f6a52")
    assert "## ⏸️ Step 3: Partial Turn (in progress)" in printed.stdout
    assert "### ⏳ Tool Call Status" in printed.stdout
    assert "- `get_weather` (call_weather_1): Deferred, token 9a4c1e2b-7f3d-4e5a-b6c7-d8e9f0a1b2c3" in printed.stdout
    assert "2026-03-06T14:02:11Z" in printed.stdout
    hidden = exe(tmp_path, "session-print", str(older))
    assert "2026-03-06T14:02:11Z" not in hidden.stdout
    newest = exe(tmp_path, "session-print", str(older), "--antichronological", "--n-turns", "2")
    assert "Step 3" not in newest.stdout
    assert newest.stdout.index("Step 2: LLM") < newest.stdout.index("Step 1: User")
    big = FIXTURES / "sessions" / "gh-75.session.json"
    elided = exe(tmp_path, "session-print", str(big), "--show-tool-call-results", "elided")
    assert "lines elided) ..." in elided.stdout
    stats = exe(tmp_path, "session-print", str(FIXTURES / "sessions" / "activation-session.json"))
    assert "- Bytes: input 6956, output 1061, reasoning 1644, tool 323, total 9984" in stats.stdout
    assert exe(tmp_path, "session-print", "missing.json").returncode == 1
    assert exe(tmp_path, "session-print", str(older), "--show-tool-call-results", "loud").returncode == 2


def test_scaffolding_and_paths(tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]) -> None:
    env = {"AGENTS_CONFIG_DIR": str(tmp_path / "conf")}
    (tmp_path / "agents-exe.cfg.json").write_text(json.dumps({"agentsFiles": ["agents/one.json"],
                                                              "selfDescribeSlug": "me"}))
    made = exe(tmp_path, "new", "agent", "one", "agents/one.json", "llama3.2", "--preset", "ollama", env=env)
    assert made.returncode == 0, made.stderr
    contents = json.loads((tmp_path / "agents" / "one.json").read_text())["contents"]
    assert (contents["slug"], contents["modelName"], contents["modelUrl"]) == (
        "one", "llama3.2", "http://localhost:11434/v1")
    assert "Not loaded" not in made.stdout
    assert exe(tmp_path, "new", "agent", "one", "agents/one.json", env=env).returncode == 1
    other = exe(tmp_path, "new", "agent", "two", "agents/two.json", env=env)
    assert 'add "agents/two.json" to its agentsFiles' in other.stdout
    scaffolded = exe(tmp_path, "new", "tool", "greet", "python", "agents/tools/greet", env=env)
    assert scaffolded.returncode == 0, scaffolded.stderr
    assert json.loads(exe(tmp_path, "describe-tool", "agents/tools/greet.py").stdout)["name"] == "bash_greet"

    checked = exe(tmp_path, "check", env=env)
    assert checked.stdout.startswith("one: a helpful assistant powered by llama3.2 (1 tools)"), checked.stderr
    paths = json.loads(exe(tmp_path, "paths", "--json", env=env).stdout)
    assert paths["configuration"]["configFile"] == str(tmp_path / "agents-exe.cfg.json")
    assert paths["agents"] == [str(tmp_path / "agents" / "one.json")]
    assert paths["apiKeys"] == str(tmp_path / "conf" / "secret-keys")
    described = json.loads(exe(tmp_path, "describe", env=env).stdout)
    assert described["slug"] == "me" and described["args"][0]["mode"] == "dashdashspace"
    assert "agents-exe describe" not in exe(tmp_path, "spec", "bash-tools").stdout
    assert exe(tmp_path, "spec", "bash-tools").stdout.startswith("Bash tools")

    # beside the project, not below it: the project's config file would be found from there
    init_dir = tmp_path.parent / f"{tmp_path.name}-fresh"
    init_dir.mkdir()
    nothing = exe(init_dir, "check", env={"AGENTS_CONFIG_DIR": str(init_dir / "conf")})
    assert (nothing.returncode, nothing.stdout) == (4, "")
    assert "no agent file" in nothing.stderr
    # without a config file, the config directory's default/ holds the agents
    default = init_dir / "conf" / "default" / "nested"
    default.mkdir(parents=True)
    write_agent(default, "fallback", "http://127.0.0.1:9/v1")
    found = exe(init_dir, "check", env={"AGENTS_CONFIG_DIR": str(init_dir / "conf")})
    assert found.stdout.startswith("fallback: the fallback test agent (0 tools)"), found.stderr
    initialised = exe(init_dir, "init", env={"AGENTS_CONFIG_DIR": str(init_dir / "conf")})
    assert initialised.returncode == 0, initialised.stderr
    assert (init_dir / "agent.json").is_file() and (init_dir / "tools").is_dir()
    assert (init_dir / "conf" / "secret-keys").stat().st_mode & 0o777 == 0o600


def test_serve_takes_the_live_session_ttl_and_says_it_is_ignored(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer], start_server: Callable[..., Any]
) -> None:
    llm = llm_server(SCRIPT)
    agent = deferring_agent(tmp_path, llm)
    server = start_server([agent], extra_args=["--live-session-ttl", "60"])
    assert server.client.get("/healthz").status_code == 200
    assert '"server.option_ignored"' in server.process.output()


@pytest.mark.usefixtures("processes")
def test_tool_paths_are_also_looked_for_beside_the_config_file(tmp_path: Path) -> None:
    write_tool(tmp_path / "tools", "echo", ECHO_TOOL, 'echo "$2"')
    (tmp_path / "agents").mkdir()
    write_agent(tmp_path / "agents", "rooted", "http://127.0.0.1:9/v1", toolDirectory="tools")
    (tmp_path / "agents-exe.cfg.json").write_text(json.dumps({"agentsFiles": ["agents/rooted.json"]}))
    work = tmp_path / "src" / "deep"
    work.mkdir(parents=True)
    checked = exe(work, "check")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines() == [
        "rooted: the rooted test agent (1 tools)",
        "  rooted: tools: bash_echo",
        f"  rooted: toolDirectory 'tools': the directory of agents-exe.cfg.json ({tmp_path / 'tools'})",
    ]
