"""A streamed answer cut by the provider fails the run and stores nothing of it (docs/sessions.md
§4.5, docs/agents.md §7.4): black-box, over HTTP, with `agents serve --stream-tokens` and the
scripted model cutting its stream after a text delta, half-way through a tool call, or after a
whole tool call but before its finish_reason, each at an event's end and in half an event."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.streams import SseReader, kinds, stopped_with

ANSWER = "Partial answer that never ends"
#: The pieces each cut lets through before the connection closes (text.delta events join them).
WORDS = ["Partial ", "answer ", "that ", "never ", "ends"]
DELTAS = {"after_text": WORDS[:1], "mid_tool_call": WORDS, "before_finish": WORDS}
DETAIL = {
    False: "LLM stream was cut: it ended before a finish_reason",
    True: "LLM stream was cut: it ended in the middle of an event",
}


def _script(cut: str) -> dict[str, Any]:
    """Both variants of ``cut``, chosen by the prompt; a second try of a session is answered whole."""
    reply = {"content": ANSWER, "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    return {
        "rules": [
            *(
                {
                    "when": {"last_contains": f"try {half}"},
                    "reply": {**reply, "cut": cut, "cut_half_event": half},
                    "times": 1,
                }
                for half in (False, True)
            ),
            {"reply": {"content": "The whole answer."}},
        ]
    }


def _post(server: Server, path: str, body: dict[str, Any] | None = None) -> Any:
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _deltas(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["text"] for e in events if e["event"] == "text.delta"]


@pytest.mark.parametrize("cut", ["after_text", "mid_tool_call", "before_finish"])
def test_a_cut_stream_fails_the_run_after_its_deltas_and_stores_no_model_turn(
    cut: str, tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script(cut))
    server = start_server([write_agent(tmp_path, "talker", llm.url)], extra_args=["--stream-tokens"])
    for half in (False, True):
        created = _post(server, "/v1/sessions", {"agent": "talker", "prompt": f"try {half}", "run": "none"})
        sid = created.json()["session_id"]
        stored_before = server.client.get(f"/v1/sessions/{sid}/export").json()
        reader = SseReader(f"{server.url}/v1/sessions/{sid}/events")
        reader.wait_for(lambda e: len(e) >= 1)
        assert _post(server, f"/v1/sessions/{sid}/resume").status_code == 202
        events = reader.wait_for(stopped_with("failed"))
        reader.close()

        # the deltas the provider sent, then the failure, and no stored model turn in between
        assert "".join(_deltas(events)) == "".join(DELTAS[cut])
        run = kinds(events)[kinds(events).index("run.started") :]
        last_delta = max(i for i, kind in enumerate(run) if kind == "text.delta")
        assert run[last_delta + 1 :] == ["session.failed", "session.updated", "run.stopped"], run
        failed = next(e for e in events if e["event"] == "session.failed")
        assert failed["data"]["message"] == DETAIL[half]
        heads = [e["data"]["head_turn"]["tag"] for e in events if e["event"] == "session.updated"]
        assert "LlmTurn" not in heads

        view = server.client.get(f"/v1/sessions/{sid}").json()
        assert view["status"] == "failed" and view["status_detail"] == DETAIL[half]
        assert [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
        assert view["pending"] == []
        # the stored session is what it was before the run: the prompt, nothing of the cut answer
        exported = server.client.get(f"/v1/sessions/{sid}/export").json()
        assert exported == stored_before
        assert "Partial" not in json.dumps(exported)

        # nothing was lost: a resume asks again, and the whole answer is stored
        again = _post(server, f"/v1/sessions/{sid}/resume?wait=true")
        assert again.status_code == 200 and again.json()["status"] == "idle", again.text
        turns = again.json()["session"]["turns"]
        assert [t["tag"] for t in turns] == ["LlmTurn", "UserTurn"]
        assert turns[0]["contents"]["llmResponse"]["responseText"] == "The whole answer."
    assert len(llm.requests) == 4
