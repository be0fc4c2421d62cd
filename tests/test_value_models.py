"""The API's JSON values have one model each (issue 25, acceptance 3): a posted tool result or
mail body that the model refuses answers 400 ``bad_request`` with the message docs/api.md §5.4
and §5.5 give, and ``/openapi.json`` names every union as a component of references."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from foundation.openapi import openapi_document
from tests.harness import Server, write_agent

SCRIPT = {"rules": [{"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {}}]}},
                    {"reply": {"content": "done"}}]}

RESULTS = [
    (5, 'result must be a string or an object with "type" (text, json, media or mixed)'),
    ({"content": "x"}, 'result must be a string or an object with "type" (text, json, media or mixed)'),
    ({"type": "html"}, "unknown result type 'html'; expected text, json, media or mixed"),
    ({"type": "text", "content": 3}, 'a "text" result needs a string "content"'),
    ({"type": "json"}, 'a "json" result needs "content"'),
    ({"type": "media", "mimeType": "image/png"}, 'result: a media part needs string "mimeType" and "base64Data"'),
    ({"type": "media", "mimeType": "image/png", "base64Data": "abc"}, "result: base64Data is not valid base64"),
    ({"type": "media", "mimeType": "a\u0000b", "base64Data": ""}, "result.mimeType: Null characters are not allowed."),
    ({"type": "media", "mimeType": "a", "base64Data": "", "filename": "x\u0000"},
     "result.filename: Null characters are not allowed."),
    ({"type": "mixed", "parts": "x"}, 'a "mixed" result needs a list of "parts"'),
    ({"type": "mixed"}, 'a "mixed" result needs a list of "parts"'),
    ({"type": "mixed", "parts": [{"type": "text", "text": "a"}, {"type": "text"}]},
     'parts[1] must be {"type": "text", "text"} or a media part'),
    ({"type": "mixed", "parts": [{"type": "media", "mimeType": "a", "base64Data": "!"}]},
     "parts[0]: base64Data is not valid base64"),
]

BODIES = [
    ("hello", 'body must be a MailBody object with a "tag"'),
    ({"tag": 7}, 'body must be a MailBody object with a "tag"'),
    ({"tag": "note"}, "unknown mail tag 'note'; expected one of agentMessage, continuationResult, control, "
                      "toolCallFinished, userMessage, watchedEvent"),
    ({"tag": "toolCallFinished"}, "toolCallFinished mail is produced by the server and cannot be posted"),
    ({"tag": "userMessage", "query": 3}, 'a userMessage needs "query": a string or {"text", "media"}'),
    ({"tag": "userMessage", "query": {"text": 3}}, 'a userMessage needs "query": a string or {"text", "media"}'),
    ({"tag": "userMessage", "query": {"media": "x"}}, "query.media must be a list"),
    ({"tag": "userMessage", "query": {"media": [{"mimeType": "a", "base64Data": "!"}]}},
     "query.media[0] needs a string mimeType and base64 base64Data"),
    ({"tag": "userMessage", "query": {"media": [{"mimeType": "a", "base64Data": ""}, {"mimeType": "a\u0000",
                                                                                      "base64Data": ""}]}},
     "query.media[1].mimeType: Null characters are not allowed."),
    ({"tag": "agentMessage"}, 'an agentMessage needs a string "text"'),
    ({"tag": "agentMessage", "text": "x", "expectsReply": "yes"}, "expectsReply must be true or false"),
    ({"tag": "agentMessage", "text": "x", "inReplyTo": "a\u0000"}, "inReplyTo: Null characters are not allowed."),
    ({"tag": "agentMessage", "text": "x", "inReplyTo": 7}, "inReplyTo must be a string or null"),
    ({"tag": "control", "message": {"tag": "halt"}},
     'a control needs "message": {"tag": one of cancelAllAttached, cancelCalls, pause, resume, stopRun}'),
    ({"tag": "control", "message": {"tag": "cancelCalls", "toolCallIds": "c1"}},
     "cancelCalls needs a list of toolCallIds"),
    ({"tag": "control", "message": {"tag": "cancelCalls", "toolCallIds": ["c\u0000"]}},
     "toolCallIds: Null characters are not allowed."),
]


@pytest.fixture
def deferred(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> Iterator[tuple[Server, dict[str, Any]]]:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "deferring", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    server = start_server([agent])
    created = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "deferring", "prompt": "go"}))
    assert created.status_code == 201, created.text
    yield server, created.json()


def test_refused_results_and_mail_answer_their_messages(deferred: tuple[Server, dict[str, Any]]) -> None:
    server, view = deferred
    token = view["pending"][0]["continuation_token"]
    for result, message in RESULTS:
        answer = server.client.post(f"/v1/continuations/{token}", content=json.dumps({"result": result}))
        assert (answer.status_code, answer.json()) == (400, {"error": "bad_request", "message": message}), result
    mail = f"/v1/sessions/{view['session_id']}/mail"
    for body, message in BODIES:
        answer = server.client.post(mail, content=json.dumps({"body": body}))
        assert (answer.status_code, answer.json()) == (400, {"error": "bad_request", "message": message}), body
    # none of them was stored, and the token still takes a well-formed mixed result
    assert server.client.get(mail).json()["mail"] == []
    mixed = {"type": "mixed", "parts": [{"type": "text", "text": "a", "extra": 1},
                                        {"type": "media", "mimeType": "image/png", "base64Data": "AAAA"}]}
    done = server.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": mixed}))
    assert done.status_code == 200, done.text
    pairs = next(t for t in done.json()["session"]["turns"] if t["tag"] == "UserTurn")["contents"]["userToolResponses"]
    assert pairs[0][1] == {"type": "mixed", "parts": [{"type": "text", "text": "a"},
                                                      {"type": "media", "mimeType": "image/png", "base64Data": "AAAA"}]}


def _unions(schema: Any, where: str) -> Iterator[str]:
    """Where a schema nested in a component holds a union (``oneOf``/``anyOf``)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("oneOf", "anyOf"):
                yield where
            yield from _unions(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _unions(value, f"{where}[{index}]")


def test_every_value_union_is_a_component_of_references() -> None:
    components = openapi_document()["components"]["schemas"]
    for name in ("ToolResult", "TypedToolResult", "MixedPart", "UserQuery", "MailBody", "MailSender", "Turn"):
        union = components[name].get("oneOf") or components[name]["anyOf"]
        assert all("$ref" in branch or set(branch) == {"type"} for branch in union), name
    for name in ("MixedResult", "MediaPart", "TextPart", "UserMessage", "QueryWithMedia", "ControlMail",
                 "SessionDocument", "UserTurn", "LlmTurn", "PartialUserTurn", "TrackedCall", "ToolCall"):
        assert list(_unions(components[name], name)) == [], name
    assert components["TypedToolResult"]["discriminator"]["propertyName"] == "type"
    assert components["MailBody"]["discriminator"]["propertyName"] == "tag"
