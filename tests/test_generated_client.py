"""A client generated from the served ``/openapi.json`` works (issue 25, acceptance 3; issue 29, acceptance 3):
openapi-python-client generates it without a warning, and its models post continuations, a plain
string result and a mixed one, to a real server (the flow of the README's weather walkthrough: a
deferred call, its result posted, the run goes on to the model's answer)."""

from __future__ import annotations

import base64
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.harness import Server, write_agent

PACKAGE = "agents_server_client"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "Weather in Paris?"},
            "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        },
        {"reply": {"content": "The weather in Paris: {last_content}"}},
    ]
}


def _generate(server: Server, directory: Path) -> subprocess.CompletedProcess[str]:
    document = directory / "openapi.json"
    document.write_text(server.client.get("/openapi.json").text)
    # the generator formats its output with ruff, which it looks for on PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(  # noqa: S603 - the project's own venv's generator, fixed arguments
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--output-path",
            str(directory / PACKAGE),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.fixture
def weather(tmp_path: Path, llm_server: Callable[..., Any], start_server: Callable[..., Server]) -> Server:
    """``agents serve`` with a weather agent, which defers every call."""
    llm = llm_server(SCRIPT)
    policy = {"default": {"tag": "defer", "reason": "weather service"}}
    return start_server([write_agent(tmp_path, "weather", llm.url, toolCallPolicyConfig=policy)])


@pytest.fixture
def generated(weather: Server, tmp_path: Path) -> Iterator[tuple[subprocess.CompletedProcess[str], ModuleType]]:
    """The generation's outcome and the generated package, importable for the test."""
    outcome = _generate(weather, tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield outcome, importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _deferred(server: Server) -> tuple[str, str]:
    """A weather session waiting for its call's result: ``(session_id, continuation token)``."""
    body = json.dumps({"agent": "weather", "prompt": "Weather in Paris?"})
    created = server.client.post("/v1/sessions?wait=true", content=body)
    assert created.status_code == 201, created.text
    [pending] = created.json()["pending"]
    return created.json()["session_id"], pending["continuation_token"]


def _post(package: ModuleType, server: Server, token: str, result: Any) -> Any:
    complete_call = importlib.import_module(f"{PACKAGE}.api.v1.complete_call")
    models = importlib.import_module(f"{PACKAGE}.models")
    client = package.AuthenticatedClient(base_url=server.url, token="unused", timeout=60)
    with client:
        return complete_call.sync_detailed(token, client=client, body=models.Continuation(result=result), wait=True)


def _stored_result(server: Server, session_id: str) -> Any:
    turns = server.client.get(f"/v1/sessions/{session_id}").json()["session"]["turns"]
    [[_call, response]] = next(t for t in turns if t["tag"] == "UserTurn" and t["contents"].get("userToolResponses"))[
        "contents"
    ]["userToolResponses"]
    return response


def test_a_generated_client_posts_string_and_mixed_results(
    weather: Server, generated: tuple[subprocess.CompletedProcess[str], ModuleType]
):
    outcome, package = generated
    output = outcome.stdout + outcome.stderr
    assert outcome.returncode == 0, output
    assert "Warning" not in output and "Unable to" not in output and "not in PATH" not in output, output
    models = importlib.import_module(f"{PACKAGE}.models")

    session_id, token = _deferred(weather)
    answer = _post(package, weather, token, "sunny, 24°C")
    assert answer.status_code == 200, answer.content
    assert answer.parsed.status.value == "idle"
    assert _stored_result(weather, session_id) == "sunny, 24°C"

    session_id, token = _deferred(weather)
    mixed = models.MixedResult(
        type_=models.MixedResultType.MIXED,
        parts=[
            models.TextPart(type_=models.TextPartType.TEXT, text="sunny"),
            models.MediaPart(
                type_=models.MediaPartType.MEDIA, mime_type="image/png", base_64_data=PNG, filename="sky.png"
            ),
        ],
    )
    answer = _post(package, weather, token, mixed)
    assert answer.status_code == 200, answer.content
    assert answer.parsed.status.value == "idle"
    assert _stored_result(weather, session_id) == {
        "type": "mixed",
        "parts": [
            {"type": "text", "text": "sunny"},
            {"type": "media", "mimeType": "image/png", "base64Data": PNG, "filename": "sky.png"},
        ],
    }

    # a result the model refuses answers the documented error, which the client parses
    _session_id, token = _deferred(weather)
    bad = models.MediaPart(type_=models.MediaPartType.MEDIA, mime_type="image/png", base_64_data="not base64!")
    answer = _post(package, weather, token, bad)
    assert answer.status_code == 400
    assert json.loads(answer.content) == {"error": "bad_request", "message": "result: base64Data is not valid base64"}
    assert answer.parsed.message == "result: base64Data is not valid base64"


def test_a_generated_client_runs_the_walkthrough(
    weather: Server, generated: tuple[subprocess.CompletedProcess[str], ModuleType]
):
    """Create a session, complete its deferred call through the continuation, post a message,
    list the sessions and follow the session's events, with the generated client only."""
    outcome, package = generated
    assert outcome.returncode == 0, outcome.stdout + outcome.stderr
    api = {
        name: importlib.import_module(f"{PACKAGE}.api.v1.{name}")
        for name in ("create_session", "complete_call", "post_message", "list_sessions", "get_session")
    }
    models = importlib.import_module(f"{PACKAGE}.models")
    client = package.AuthenticatedClient(base_url=weather.url, token="unused", timeout=60)
    with client:
        created = api["create_session"].sync_detailed(
            client=client, body=models.SessionCreate(agent="weather", prompt="Weather in Paris?"), wait=True
        )
        assert created.status_code == 201, created.content
        session_id = created.parsed.session_id
        [pending] = created.parsed.pending
        completed = api["complete_call"].sync_detailed(
            pending.continuation_token, client=client, body=models.Continuation(result="sunny, 24°C"), wait=True
        )
        assert completed.status_code == 200, completed.content
        assert completed.parsed.status.value == "idle"

        posted = api["post_message"].sync_detailed(
            session_id, client=client, body=models.Message(prompt="And tomorrow?"), wait=True
        )
        assert posted.status_code == 200, posted.content
        assert posted.parsed.status.value == "idle"

        listed = api["list_sessions"].sync_detailed(client=client, agent="weather", limit=10)
        assert listed.status_code == 200, listed.content
        assert str(session_id) in [str(row.session_id) for row in listed.parsed.sessions]

        # the event stream never ends: its first frame, the snapshot, is read through the client's
        # own connection (the generated function would wait for a whole answer)
        with client.get_httpx_client().stream("GET", f"/v1/sessions/{session_id}/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            frame: list[str] = []
            for line in stream.iter_lines():
                if not line and frame:
                    break
                frame.append(line)
        assert frame[0] == "event: snapshot", frame
        snapshot = json.loads(frame[1].removeprefix("data: "))
        assert snapshot["session_id"] == str(session_id) and snapshot["status"] == "idle"
