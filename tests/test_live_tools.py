"""Live tool directories over HTTP (issue 30, acceptance 3; docs/tools.md §3.9).

A script dropped into a served agent's ``toolDirectory``, changed or removed there is offered,
changed or withdrawn at the model's next request, on a lone server and scaled out (a server and a
worker on PostgreSQL and Redis), without a restart. The model's request log says what it was
offered. A broken ``describe`` is one warning line in the log however many steps follow, and an
unchanged script is not described again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tests.harness import write_agent, write_tool
from tools_app.bash.live import CHECK_INTERVAL

SCRIPT = {
    "rules": [
        {"when": {"last_role": "user", "last_contains": "use second", "has_tool": "bash_second"},
         "reply": {"tool_calls": [{"name": "bash_second", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "said: {last_content}"}},
        {"reply": {"content": "ok"}},
    ]
}


def _drop(tools: Path, name: str, describe: dict[str, Any], run_body: str, *, counter: Path | None = None) -> Path:
    """Put a tool into ``tools`` in one step (written aside, then renamed), as a deploy would."""
    staging = tools.parent / "staging"
    path = write_tool(staging, name, describe, run_body)
    if counter is not None:
        # count the describe calls: the line goes right after the shebang
        lines = path.read_text().split("\n", 1)
        path.write_text(f'{lines[0]}\n[ "${{1:-}}" = describe ] && echo x >> {counter}\n{lines[1]}')
    os.replace(path, tools / name)
    return tools / name


def _offered(request: dict[str, Any]) -> dict[str, Any]:
    """The tools of one model request: wire name -> function entry."""
    return {tool["function"]["name"]: tool["function"] for tool in request.get("tools") or []}


def _say(server: Any, sid: str, prompt: str) -> dict[str, Any]:
    answer = server.client.post(f"/v1/sessions/{sid}/messages?wait=true", content=json.dumps({"prompt": prompt}))
    assert answer.status_code == 200 and answer.json()["status"] == "idle", answer.text
    return answer.json()


def _after_the_interval() -> None:
    """Let the directory's last look grow older than the minimum interval between two looks."""
    time.sleep(CHECK_INTERVAL + 0.3)


def _agent(tmp_path: Path, llm_url: str) -> tuple[Path, Path, Path]:
    tools = tmp_path / "tools"
    counter = tmp_path / "first-describes"
    tools.mkdir()
    _drop(tools, "first", {"slug": "first", "description": "the first tool", "args": []}, "echo first",
          counter=counter)
    return write_agent(tmp_path, "live", llm_url, toolDirectory="tools"), tools, counter


def test_scripts_dropped_changed_broken_and_removed_while_serving(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    agent, tools, counter = _agent(tmp_path, llm.url)
    server = start_server([agent])
    created = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "live", "prompt": "hi"}))
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    assert list(_offered(llm.requests[-1])) == ["bash_first"]
    describes = counter.read_text()

    # dropped in: offered at the next request, and callable
    dropped_at = time.monotonic()
    _drop(tools, "second", {"slug": "second", "description": "the second tool", "args": []}, "echo from second")
    _after_the_interval()
    _say(server, sid, "use second")
    print(f"dropped script offered and run {time.monotonic() - dropped_at:.2f} s after it was dropped")
    assert sorted(_offered(llm.requests[-2])) == ["bash_first", "bash_second"]
    assert "from second" in json.dumps(llm.requests[-1]["messages"][-1])

    # changed describe: the new schema
    word = {"name": "word", "description": "a word", "type": "string", "backing_type": "string",
            "arity": "single", "mode": "positional"}
    _drop(tools, "second", {"slug": "second", "description": "the second tool, now with a word", "args": [word]},
          'echo "from second: $1"')
    _after_the_interval()
    _say(server, sid, "and now?")
    second = _offered(llm.requests[-1])["bash_second"]
    assert second["description"] == "the second tool, now with a word"
    assert list(second["parameters"]["properties"]) == ["word"] and second["parameters"]["required"] == ["word"]

    # a broken describe: withdrawn, one warning line over several steps
    broken = tools / "first"
    broken.write_text("#!/usr/bin/env bash\necho 'describe is broken' >&2\nexit 3\n")
    _after_the_interval()
    _say(server, sid, "one")
    assert list(_offered(llm.requests[-1])) == ["bash_second"]
    _after_the_interval()
    _say(server, sid, "two")
    _say(server, sid, "three")
    assert list(_offered(llm.requests[-1])) == ["bash_second"]
    warnings = [line for line in server.process.output().splitlines() if str(broken) in line]
    assert len(warnings) == 1, warnings
    assert '"tools.skipped"' in warnings[0] and "describe exited with code 3" in warnings[0]
    # the first version of first was described when the agent was built, never since
    assert counter.read_text() == describes

    # removed: withdrawn
    (tools / "second").unlink()
    _after_the_interval()
    _say(server, sid, "anyone left?")
    assert _offered(llm.requests[-1]) == {}


def test_a_dropped_script_reaches_a_scaled_out_worker(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server(SCRIPT)
    agent, tools, _ = _agent(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    worker = start_worker([agent], db=postgres_url, env=env)
    created = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "live", "prompt": "hi"}))
    assert created.status_code == 201 and created.json()["status"] == "idle", created.text
    sid = created.json()["session_id"]
    assert list(_offered(llm.requests[-1])) == ["bash_first"]

    _drop(tools, "second", {"slug": "second", "description": "the second tool", "args": []}, "echo from second")
    _after_the_interval()
    _say(server, sid, "use second")
    assert sorted(_offered(llm.requests[-2])) == ["bash_first", "bash_second"]
    assert "from second" in json.dumps(llm.requests[-1]["messages"][-1])

    (tools / "second").unlink()
    _after_the_interval()
    _say(server, sid, "use second")
    assert list(_offered(llm.requests[-1])) == ["bash_first"]
    worker.stop()
