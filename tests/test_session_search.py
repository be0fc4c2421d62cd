"""``GET /v1/sessions?q=``: sessions found by a word of their conversation, and each row's title
(docs/api.md §7.2; issue 31, point 6), over HTTP against a real ``agents serve``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import owner, write_tokens

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "kettle"}, "reply": {"content": "The Kettle is **boiling**."}},
        {"reply": {"content": "Nothing to report."}},
    ]
}


def _start(server: Server, who: str | None, prompt: str | None) -> str:
    body = {"agent": "notes", **({"prompt": prompt} if prompt is not None else {"run": "none"})}
    headers = owner(who) if who else {}
    answer = server.client.post("/v1/sessions?wait=true", headers=headers, content=json.dumps(body))
    assert answer.status_code == 201, answer.text
    return answer.json()["session_id"]


def _found(server: Server, who: str, q: str, **extra: str) -> list[str]:
    answer = server.client.get("/v1/sessions", headers=owner(who), params={"q": q, **extra})
    assert answer.status_code == 200, answer.text
    return [row["session_id"] for row in answer.json()["sessions"]]


def test_a_word_of_the_conversation_finds_its_sessions_case_insensitively_and_only_the_owners(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "notes", llm.url, systemPrompt=["You are notes. You know about teapots."])
    server = start_server([agent], extra_args=["--auth-tokens", str(write_tokens(tmp_path))])
    kettle = _start(server, "alice", "Is the kettle on yet? I would like some tea this afternoon please")
    other = _start(server, "alice", "What about the weather?")
    empty = _start(server, "alice", None)
    bobs = _start(server, "bob", "my kettle too")

    # the person's words and the model's answer, any case; never another owner's session
    assert _found(server, "alice", "KETTLE") == [kettle]
    assert _found(server, "alice", "  kettle  ") == [kettle]
    assert _found(server, "alice", "boiling") == [kettle]
    assert _found(server, "alice", "nothing to REPORT") == [other]
    assert _found(server, "bob", "kettle") == [bobs]
    # the system prompt, the stored turns' JSON keys and turn kinds are not the conversation
    assert _found(server, "alice", "teapots") == []
    assert _found(server, "alice", "llmResponse") == []
    assert _found(server, "alice", "UserTurn") == []
    # q narrows the other filters, and pages as they do
    assert _found(server, "alice", "kettle", agent="other") == []
    assert _found(server, "alice", "the", limit="1") == [other]

    # each row has its title: the first words of the conversation, cut with an ellipsis
    listed = server.client.get("/v1/sessions", headers=owner("alice")).json()["sessions"]
    rows = {row["session_id"]: row for row in listed}
    assert rows[kettle]["title"] == "Is the kettle on yet? I would like…"
    assert rows[other]["title"] == "What about the weather?"
    assert rows[empty]["title"] is None
    assert set(rows) == {kettle, other, empty}
    assert llm.requests


def test_a_bad_q_is_refused_in_the_error_shape_and_the_parameter_is_documented(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([write_agent(tmp_path, "notes", llm.url)])
    message = "q must be 1 to 200 characters of text, without control characters"
    for bad in ("", "   ", "x" * 201, "ket\ntle", "a\x7fb"):
        answer = server.client.get("/v1/sessions", params={"q": bad})
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json() == {"error": "bad_request", "message": message}
    assert server.client.get("/v1/sessions", params={"q": "x" * 200}).json()["sessions"] == []
    # a word without ASCII letters is compared casefolded too
    _start(server, None, "Ça coûte CAFÉ")
    assert len(server.client.get("/v1/sessions", params={"q": "ça"}).json()["sessions"]) == 1
    assert len(server.client.get("/v1/sessions", params={"q": "café"}).json()["sessions"]) == 1

    operation = server.client.get("/openapi.json").json()["paths"]["/v1/sessions"]["get"]
    [q] = [parameter for parameter in operation["parameters"] if parameter["name"] == "q"]
    assert q["in"] == "query" and q["schema"]["type"] == "string"
