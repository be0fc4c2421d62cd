"""Secret parameters scaled out: PostgreSQL, Redis, a server and two workers (issue 14, acceptance 3).

The secret reaches the tool on whichever worker runs the step, and nowhere else: not in a database
dump, an event, an API answer, a log line, the model's requests or Redis in the clear. Once every
process has stopped it is gone: the next message is refused with ``params_required`` until the
owner gives it again.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import redis

from tests.harness import wait_until, write_agent, write_tool
from tests.streams import SseReader

SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_charge", "arguments": {"cents": 5}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "charged: {last_content}"}},
    ]
}


def _agent(tmp_path: Path, llm_url: str) -> Path:
    seen = tmp_path / "seen"
    seen.mkdir()
    env_arg = {"name": "token", "description": "the API token", "type": "string", "backing_type": "string",
               "arity": "single", "mode": "env"}
    cents = {"name": "cents", "description": "how much", "type": "number", "backing_type": "string",
             "arity": "single", "mode": "positional"}
    write_tool(tmp_path / "tools", "charge", {"slug": "charge", "description": "charges", "args": [env_arg, cents]},
               f'printf %s "$TOKEN" > {seen}/"$AGENT_TURN_ID"\necho "ok, $1 cents"')
    return write_agent(
        tmp_path,
        "payments",
        llm_url,
        parameters=[{"name": "token", "scope": "session", "secret": True}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": "token", "value": {"tag": "Param", "contents": "token"}}]}}],
    )


def _dump(postgres_url: str) -> str:
    return subprocess.run(["pg_dump", "--data-only", postgres_url], capture_output=True, text=True, check=True,
                          timeout=60).stdout


def _redis_values(url: str) -> str:
    client = redis.Redis.from_url(url)
    found = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"hash":
            found.append(json.dumps({k.decode(): v.decode() for k, v in client.hgetall(key).items()}))
        elif kind == b"string":
            found.append(client.get(key).decode(errors="replace"))
    client.close()
    return "\n".join(found)


def test_a_secret_reaches_the_tool_and_nothing_else_and_dies_with_the_fleet(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    secret = f"sk-live-{uuid.uuid4().hex}"
    answers: list[str] = []

    def call(server: Any, method: str, path: str, body: Any = None) -> Any:
        response = server.client.request(method, path, content=json.dumps(body) if body is not None else None)
        answers.append(response.text)
        return response

    server = start_server([agent], db=postgres_url, env=env)
    workers = [start_worker([agent], db=postgres_url, env=env) for _ in range(2)]
    stream = SseReader(f"{server.url}/v1/events")
    created = call(server, "POST", "/v1/sessions?wait=true",
                   {"agent": "payments", "prompt": "charge it", "params": {"token": secret}})
    assert created.status_code == 201 and created.json()["status"] == "idle", created.text
    sid = created.json()["session_id"]
    assert created.json()["secret_params"] == ["token"] and created.json()["params"] == {}
    # a second run, on whichever worker takes it: the tool sees the secret both times
    assert call(server, "POST", f"/v1/sessions/{sid}/messages?wait=true",
                {"prompt": "again"}).json()["status"] == "idle"
    seen = sorted((tmp_path / "seen").iterdir())
    assert len(seen) == 2 and all(path.read_text() == secret for path in seen)
    for path in seen:
        path.unlink()
    call(server, "GET", f"/v1/sessions/{sid}")
    call(server, "GET", "/v1/sessions?limit=10")
    call(server, "GET", "/v1/agents/payments")
    wait_until(lambda: sum(1 for f in stream.frames if "run.stopped" in f) >= 2)
    stream.close()

    replayed = SseReader(f"{server.url}/v1/sessions/{sid}/events?after=0")
    wait_until(lambda: any("run.stopped" in f for f in replayed.frames))
    replayed.close()
    server.stop()
    for worker in workers:
        worker.stop()
    places = {
        "database dump": _dump(postgres_url),
        "events": "\n".join(stream.frames + replayed.frames),
        "answers": "\n".join(answers),
        "logs": "\n".join(p.process.log_path.read_text() for p in (server, *workers)),
        "model requests": json.dumps(llm.requests),
        "redis (in the clear)": _redis_values(redis_url),
    }
    assert sid in places["database dump"] and "charged: ok, 5 cents" in places["events"]
    assert [place for place, text in places.items() if secret in text] == []

    # every process stopped: the secret went with them
    server = start_server([agent], db=postgres_url, env=env)
    workers = [start_worker([agent], db=postgres_url, env=env) for _ in range(2)]
    assert server.client.get(f"/v1/sessions/{sid}").json()["secret_params"] == []
    refused = server.client.post(f"/v1/sessions/{sid}/messages", content=json.dumps({"prompt": "once more"}))
    assert refused.status_code == 422 and refused.json() == {
        "error": "params_required", "message": "parameters required: token"
    }
    fresh = f"sk-live-{uuid.uuid4().hex}"
    assert server.client.put(f"/v1/sessions/{sid}/params", content=json.dumps({"token": fresh})).status_code == 200
    again = server.client.post(f"/v1/sessions/{sid}/messages?wait=true", content=json.dumps({"prompt": "once more"}))
    assert again.status_code == 200 and again.json()["status"] == "idle", again.text
    [path] = list((tmp_path / "seen").iterdir())
    assert path.read_text() == fresh
