"""OpenAPI toolboxes end to end (issue 15, acceptance 1): a real HTTP service started by the test
serves the petstore document and answers its operations; the scripted model calls
``openapi_pets_getPetById`` in a session over HTTP, the service receives ``GET /pets/42`` with the
session's secret header (which no log line shows), and a 404 body reaches the model as it was sent.
A stored agent may name an OpenAPI document by URL and runs the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import FIXTURES, Server, write_agent
from tests.owners import owner, write_tokens
from tests.upstream import NOT_FOUND_BODY, Upstream

SECRET = "pet-key-5f0c1e9a-never-logged"
GET_PET = "openapi_pets_getPetById"
SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "PET-42"},
            "reply": {"tool_calls": [{"name": GET_PET, "arguments": {"petId": "42"}}]},
        },
        {
            "when": {"last_role": "user", "last_contains": "PET-7"},
            "reply": {"tool_calls": [{"name": GET_PET, "arguments": {"petId": "7"}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "the service said: {last_content}"}},
        {"reply": {"content": "ok"}},
    ]
}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    service = Upstream({"/openapi.json": json.loads((FIXTURES / "openapi" / "petstore.json").read_text())})
    yield service
    service.stop()


def _toolbox(upstream: Upstream) -> dict[str, Any]:
    secret = {
        "source": {"tag": "ParamSource", "contents": "pet_key"},
        "decoder": {"tag": "Clear", "contents": True},
        "serializer": {"tag": "Header", "contents": ["X-Pet-Key", "Key {{secret}}"]},
    }
    return {
        "tag": "OpenAPIServer",
        "contents": {
            "SpecUrl": f"{upstream.url}/openapi.json",
            "BaseUrl": upstream.url,
            "Name": "pets",
            "Secrets": [secret],
        },
    }


def _petshop(tmp_path: Path, llm_url: str, box: dict[str, Any], *, required: bool = True) -> Path:
    """The agent file of the tests: the toolbox ``box`` and its secret session parameter."""
    parameter = {"name": "pet_key", "secret": True, "scope": "session", "required": required}
    return write_agent(tmp_path, "petshop", llm_url, openApiToolboxes=[box], parameters=[parameter])


def _results(server: Server, session_id: str, headers: dict[str, str] | None = None) -> list[Any]:
    turns = server.client.get(f"/v1/sessions/{session_id}", headers=headers).json()["session"]["turns"]
    return [
        response
        for turn in reversed(turns)
        if turn["tag"] == "UserTurn"
        for call, response in turn["contents"].get("userToolResponses") or []
        if call["function"]["name"] == GET_PET
    ]


def _session(server: Server, prompt: str, agent: str = "petshop", headers: dict[str, str] | None = None) -> Any:
    body = {"agent": agent, "prompt": prompt, "params": {"pet_key": SECRET}}
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps(body), headers=headers)
    assert answer.status_code == 201, answer.text
    assert answer.json()["status"] == "idle", answer.json()["status_detail"]
    return answer.json()["session_id"]


def test_a_session_calls_the_petstore_with_its_secret_and_reads_a_404_verbatim(
    tmp_path: Path,
    upstream: Upstream,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> None:
    llm = llm_server(SCRIPT)
    agent = _petshop(tmp_path, llm.url, _toolbox(upstream))
    server = start_server([agent], env={"AGENTS_LOG_LEVEL": "DEBUG"})
    assert server.client.get("/v1/agents/petshop").json()["tools"] == [
        "openapi_pets_listPets",
        "openapi_pets_createPet",
        GET_PET,
        "openapi_pets_deletePet",
    ]
    assert llm.requests == []

    found = _session(server, "PET-42 please")
    [request] = upstream.seen()
    assert (request.method, request.target) == ("GET", "/pets/42")
    assert request.headers["x-pet-key"] == f"Key {SECRET}"
    assert _results(server, found) == [{"type": "json", "content": {"id": 42, "name": "Rex", "tag": "dog"}}]
    declared = {t["function"]["name"]: t["function"] for t in llm.requests[0]["tools"]}
    assert declared[GET_PET]["parameters"]["required"] == ["petId"]

    missing = _session(server, "PET-7 please")
    [result] = _results(server, missing)
    assert result == f"Error: {GET_PET}: HTTP 404 Not Found\n{NOT_FOUND_BODY}"
    assert llm.requests[-1]["messages"][-1]["content"] == result

    assert SECRET not in server.process.output()
    assert '"kind": "tools.http_call"' in server.process.output()


def test_a_session_without_the_secret_parameter_calls_nothing(
    tmp_path: Path,
    upstream: Upstream,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> None:
    llm = llm_server(SCRIPT)
    agent = _petshop(tmp_path, llm.url, _toolbox(upstream), required=False)
    server = start_server([agent])
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "petshop", "prompt": "PET-42"}))
    assert answer.status_code == 201, answer.text
    assert _results(server, answer.json()["session_id"]) == [f"Error: tool {GET_PET} is unavailable"]
    assert upstream.seen() == []


def test_a_document_that_cannot_be_fetched_stops_the_server_naming_the_toolbox(
    tmp_path: Path, upstream: Upstream, llm_server: Callable[..., MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    box = _toolbox(upstream)
    box["contents"]["SpecUrl"] = f"{upstream.url}/gone.json"
    agent = _petshop(tmp_path, llm.url, box)
    with pytest.raises(RuntimeError) as failed:
        Server([agent], tmp_path)
    assert "openApiToolboxes[0]: the OpenAPI document of toolbox 'pets': cannot fetch" in str(failed.value)
    assert "HTTP 404" in str(failed.value)


def test_a_stored_agent_names_its_openapi_document_by_url(
    tmp_path: Path,
    upstream: Upstream,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> None:
    llm = llm_server(SCRIPT)
    plain = write_agent(tmp_path, "plain", llm.url)
    server = start_server([plain], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"])
    body = {
        "apiKeyId": "test",
        "flavor": "OpenAIv1",
        "modelUrl": llm.url,
        "modelName": "scripted",
        "announce": "pets",
        "systemPrompt": ["You help with pets."],
        "openApiToolboxes": [_toolbox(upstream)],
        "parameters": [{"name": "pet_key", "secret": True, "scope": "session"}],
    }
    stored = server.client.put("/v1/agents/storedpets", headers=owner("root"), content=json.dumps(body))
    assert stored.status_code in (200, 201), stored.text
    assert GET_PET in server.client.get("/v1/agents/storedpets", headers=owner("root")).json()["tools"]
    found = _session(server, "PET-42", agent="storedpets", headers=owner("alice"))
    assert _results(server, found, owner("alice"))[0]["content"]["name"] == "Rex"
    box = _toolbox(upstream)
    box["contents"]["SpecUrl"] = "petstore.json"
    refused = server.client.put(
        "/v1/agents/storedpets", headers=owner("root"), content=json.dumps({**body, "openApiToolboxes": [box]})
    )
    assert (refused.status_code, refused.json()["error"]) == (400, "agent_uses_files")
    assert "SpecUrl must be an http:// or https:// URL" in refused.json()["message"]
    box = _toolbox(upstream)
    box["contents"]["Secrets"].append(
        {
            "source": {"tag": "FileSystem", "contents": "/etc/hostname"},
            "serializer": {"tag": "Header", "contents": ["X-Host", "{{secret}}"]},
        }
    )
    refused = server.client.put(
        "/v1/agents/storedpets", headers=owner("root"), content=json.dumps({**body, "openApiToolboxes": [box]})
    )
    assert (refused.status_code, refused.json()["error"]) == (400, "agent_invalid_paths")
    assert "openApiToolboxes[0].contents.Secrets[1].source" in refused.json()["message"]
    # what was stored first is still there, unchanged
    kept = server.client.get("/v1/agents/storedpets", headers=owner("root")).json()
    assert kept["config"]["openApiToolboxes"] == [_toolbox(upstream)]


def test_scaled_out_a_worker_calls_the_petstore_with_the_sessions_secret(
    tmp_path: Path,
    upstream: Upstream,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Any],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(SCRIPT)
    agent = _petshop(tmp_path, llm.url, _toolbox(upstream))
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    worker = start_worker([agent], db=postgres_url, env=env)
    found = _session(server, "PET-42 please")
    assert _results(server, found) == [{"type": "json", "content": {"id": 42, "name": "Rex", "tag": "dog"}}]
    [request] = upstream.seen()
    assert request.headers["x-pet-key"] == f"Key {SECRET}"
    assert SECRET not in server.process.output() and SECRET not in worker.process.output()
