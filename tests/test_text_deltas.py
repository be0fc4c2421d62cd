"""Streamed text joined into few ``text.delta`` events, the same live and replayed (issue 26;
docs/api.md §9.6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.streams import SseReader, stopped_with

TOKENS = 2000


def test_a_streamed_answer_of_2000_tokens_arrives_whole_in_order_in_few_events_live_and_replayed(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    # the scripted model streams it in word-sized pieces: one piece per word
    answer = " ".join(f"w{number}" for number in range(TOKENS))
    llm = llm_server({"rules": [{"reply": {"content": answer}}]})
    agent = write_agent(tmp_path, "talker", llm.url)
    server = start_server([agent], extra_args=["--stream-tokens"])
    body = {"agent": "talker", "prompt": "talk", "run": "none"}
    sid = server.client.post("/v1/sessions", content=json.dumps(body)).json()["session_id"]
    live = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    live.wait_for(lambda e: len(e) == 1)
    assert server.client.post(f"/v1/sessions/{sid}/resume").status_code in (200, 202)
    events = live.wait_for(stopped_with("idle"), timeout=60)
    deltas = [e for e in events if e["event"] == "text.delta"]
    assert "".join(e["data"]["text"] for e in deltas) == answer
    assert 1 <= len(deltas) <= TOKENS // 10
    seqs = [int(e["id"]) for e in events if e["id"] is not None]
    assert seqs == sorted(seqs)
    turns = [e["data"]["head_turn"] if e["event"] == "session.updated" else None for e in events]
    stored = next(i for i, turn in enumerate(turns) if turn is not None and turn["tag"] == "LlmTurn")
    assert max(i for i, e in enumerate(events) if e["event"] == "text.delta") < stored
    # a replay from before the run gives the very frames the live stream got
    cursor = min(seqs) - 1
    replayed = SseReader(f"{server.url}/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(cursor)})
    again = replayed.wait_for(stopped_with("idle"), timeout=60)
    assert [(e["id"], e["event"], e["data"]) for e in again] == [
        (e["id"], e["event"], e["data"]) for e in events if e["id"] is not None
    ]
    live.close()
    replayed.close()
