"""Bash tools running: argument transport, environment, results, errors, timeouts (docs/tools.md §3.4-3.6)."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time

import pytest

from tools_app.bash.loading import load_single_tool
from tools_app.bash.tool import BashTool

from .conftest import make_ctx, process_alive, read_pid, script, wait_gone


@pytest.fixture(scope="module")
def modes() -> BashTool:
    return load_single_tool(script("modes.py"))


def run_modes(tool: BashTool, arguments: dict, **ctx_overrides) -> dict:
    result = tool.call(arguments, make_ctx(**ctx_overrides))
    assert not result.is_error, result.response
    return json.loads(result.response)


def test_every_mode_in_declaration_order(modes):
    echoed = run_modes(
        modes,
        {
            # JSON key order differs from the declaration order on purpose.
            "extra": ["e1", "e2"],
            "api-token": "secret-token",
            "note": "second part",
            "body": "first part",
            "tag": ["t1", "t2"],
            "equal": 2.5,
            "space": "hello world",
            "pos": "/tmp/x",
        },
    )
    assert echoed["argv"] == [
        "/tmp/x",
        "--space",
        "hello world",
        "--equal=2.5",
        "--tag",
        "t1",
        "--tag",
        "t2",
        "e1",
        "e2",
    ]
    assert echoed["stdin"] == "first part\n\nsecond part"
    assert echoed["env"]["API_TOKEN"] == "secret-token"
    assert "secret-token" not in echoed["argv"]


def test_absent_optionals_emit_nothing(modes):
    echoed = run_modes(modes, {"pos": "only", "space": None, "tag": []})
    assert echoed["argv"] == ["only"]
    assert echoed["stdin"] == ""
    assert "API_TOKEN" not in echoed["env"]


def test_scalar_for_multiple_is_one_item(modes):
    assert run_modes(modes, {"pos": "p", "tag": "solo"})["argv"] == ["p", "--tag", "solo"]


def test_numbers_and_booleans_are_json_text(modes):
    echoed = run_modes(modes, {"pos": 42, "space": True, "equal": -1, "extra": [False, 1.5]})
    assert echoed["argv"] == ["42", "--space", "true", "--equal=-1", "false", "1.5"]


def test_strings_pass_untouched(modes):
    tricky = "  spaces, $HOME, 'quotes' \"double\" -- --flag\nnewline é"
    assert run_modes(modes, {"pos": tricky})["argv"] == [tricky]


def test_missing_required_argument_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    tool = load_single_tool(script("sleeper.sh"))
    result = tool.call({}, make_ctx())
    assert result.is_error
    assert result.response == "Error: tool bash_sleeper: missing required argument: pidfile"
    assert not marker.exists()
    result = load_single_tool(script("modes.py")).call({"pos": None}, make_ctx())
    assert result.is_error and "missing required argument: pos" in result.response


@pytest.mark.parametrize(("value", "kind"), [({"a": 1}, "an object"), ([1, 2], "an array")])
def test_objects_and_arrays_are_refused(modes, value, kind):
    result = modes.call({"pos": value}, make_ctx())
    assert result.is_error
    assert result.response == (
        f"Error: tool bash_modes: argument 'pos' must be a string, a number or a boolean, not {kind}"
    )
    result = modes.call({"pos": "p", "tag": [{"a": 1}]}, make_ctx())
    assert result.is_error and "argument 'tag'" in result.response


def test_arguments_must_be_an_object(modes):
    result = modes.call(["not", "an", "object"], make_ctx())  # type: ignore[arg-type]
    assert result.is_error and "JSON object" in result.response


def test_undeclared_keys_are_ignored(modes):
    assert run_modes(modes, {"pos": "p", "unknown": "x"})["argv"] == ["p"]


def test_agent_environment(modes, monkeypatch):
    monkeypatch.setenv("AGENT_SESSION_JSON", "inherited, must not leak")
    monkeypatch.setenv("AGENT_SESSION_ID", "inherited too")
    echoed = run_modes(modes, {"pos": "p"})
    assert echoed["env"] == {
        "AGENT_SESSION_ID": "sess-1",
        "AGENT_CONVERSATION_ID": "conv-1",
        "AGENT_TURN_ID": "turn-1",
        "AGENT_AGENT_ID": "tester",
    }
    echoed = run_modes(modes, {"pos": "p"}, session_json='{"turns": []}')
    assert echoed["env"]["AGENT_SESSION_JSON"] == '{"turns": []}'


def test_llm_values_cannot_override_agent_variables(tmp_path):
    exe = tmp_path / "spoof.sh"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then echo \'{"slug": "spoof", "description": "d", "args": [\n'
        '  {"name": "agent-turn-id", "description": "d", "type": "string", "backing_type": "string",\n'
        '   "arity": "single", "mode": "env"}]}\'; exit; fi\n'
        'printf %s "$AGENT_TURN_ID"\n'
    )
    exe.chmod(0o755)
    result = load_single_tool(exe).call({"agent-turn-id": "forged"}, make_ctx())
    assert result.response == "turn-1"


def test_stdout_is_the_result_and_stderr_is_not():
    result = load_single_tool(script("streams.sh")).call({}, make_ctx())
    assert result.is_error is False
    assert result.response == "the result\n"


def test_non_zero_exit_reports_code_and_stderr_tail():
    tool = load_single_tool(script("fail.sh"))
    result = tool.call({"code": 3}, make_ctx())
    assert result.is_error
    assert result.response == "Error: tool bash_fail exited with code 3: something went wrong"
    assert "partial output" not in result.response


def test_non_zero_exit_without_stderr_quotes_stdout():
    result = load_single_tool(script("fail.sh")).call({"code": 4, "quiet": True}, make_ctx())
    assert result.is_error
    assert result.response == ("Error: tool bash_fail exited with code 4 (nothing on stderr); stdout: partial output")


def test_long_stderr_is_cut_to_its_tail(tmp_path):
    exe = tmp_path / "noisy.sh"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then echo \'{"slug": "noisy", "description": "d", "args": []}\'; exit; fi\n'
        'for i in $(seq 1 2000); do echo "line $i" >&2; done; echo THE-END >&2; exit 1\n'
    )
    exe.chmod(0o755)
    result = load_single_tool(exe).call({}, make_ctx())
    assert result.is_error
    assert result.response.endswith("THE-END")
    assert "line 1\n" not in result.response
    assert len(result.response) < 2100


def test_empty_output_do_nothing():
    result = load_single_tool(script("empty-nothing.sh")).call({}, make_ctx())
    assert result.is_error is False and result.response == ""


def test_empty_output_add_message():
    result = load_single_tool(script("empty-message.sh")).call({}, make_ctx())
    assert result.is_error is False and result.response == "--no output--"


def test_media_output():
    result = load_single_tool(script("image.sh")).call({}, make_ctx())
    assert result.is_error is False
    assert result.response == {
        "type": "media",
        "mimeType": "image/png",
        "base64Data": base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode(),
    }


def test_invalid_utf8_is_replaced(tmp_path):
    exe = tmp_path / "latin1.sh"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then echo \'{"slug": "latin1", "description": "d", "args": []}\'; exit; fi\n'
        "printf 'caf\\xe9'\n"
    )
    exe.chmod(0o755)
    assert load_single_tool(exe).call({}, make_ctx()).response == "caf\ufffd"


@pytest.mark.parametrize("stubborn", [False, True], ids=["plain", "ignores-sigterm"])
def test_timeout_kills_the_whole_process_group(tmp_path, stubborn):
    pidfile = tmp_path / "grandchild.pid"
    tool = load_single_tool(script("sleeper.sh"))
    arguments = {"pidfile": str(pidfile)}
    if stubborn:
        arguments["stubborn"] = "yes"
    started = time.monotonic()
    result = tool.call(arguments, make_ctx(timeout=0.5))
    elapsed = time.monotonic() - started
    assert result.is_error
    assert result.response == "Error: tool bash_sleeper timed out after 0.5s"
    assert elapsed < 2.5
    grandchild = read_pid(pidfile)
    try:
        assert wait_gone(grandchild), "the grandchild outlived the timeout"
    finally:
        if process_alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_cancel_event_stops_the_call(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    started = time.monotonic()
    result = load_single_tool(script("sleeper.sh")).call(
        {"pidfile": str(pidfile)}, make_ctx(timeout=None, cancel=cancel)
    )
    timer.cancel()
    assert time.monotonic() - started < 2.5
    assert result.is_error and result.response == "Error: tool bash_sleeper was cancelled"
    grandchild = read_pid(pidfile)
    try:
        assert wait_gone(grandchild)
    finally:
        if process_alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_exit_with_a_child_holding_stdout_returns_promptly(tmp_path):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = load_single_tool(script("background.sh")).call({"pidfile": str(pidfile)}, make_ctx(timeout=20))
    elapsed = time.monotonic() - started
    child = read_pid(pidfile)
    try:
        assert result.is_error is False and result.response == "done\n"
        assert elapsed < 3
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)


def test_large_stdin_and_stdout(modes):
    body = "x" * 300_000
    echoed = run_modes(modes, {"pos": "p", "body": body})
    assert echoed["stdin"] == body


def test_vanished_executable_is_a_tool_error(tmp_path):
    exe = tmp_path / "gone.sh"
    exe.write_bytes(script("streams.sh").read_bytes())
    exe.chmod(0o755)
    tool = load_single_tool(exe)
    exe.unlink()
    result = tool.call({}, make_ctx())
    assert result.is_error and result.response.startswith("Error: tool bash_streams could not be started")


def test_killed_by_signal(tmp_path):
    exe = tmp_path / "suicide.sh"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then\n'
        '  echo \'{"slug": "suicide", "description": "d", "args": []}\'; exit\n'
        "fi\n"
        "kill -KILL $$\n"
    )
    exe.chmod(0o755)
    result = load_single_tool(exe).call({}, make_ctx())
    assert result.is_error
    assert result.response == "Error: tool bash_suicide was killed by signal SIGKILL without any output"
