"""Live events over SSE and websockets, durable and replayable (issue: live events, acceptance 1-5)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer

from devtools.mockllm import MockLlmServer
from sessions_app.hub import SESSION_CHANGED, session_group
from tests.demo import demo_agents, demo_script
from tests.harness import Server, wait_until, write_agent
from tests.streams import SseReader, WsReader, kinds, stopped_with

FIRST_RUN = [
    "session.updated",  # the running version, just before run.started
    "run.started",
    "session.updated",  # the LLM turn
    "session.updated",  # the partial turn holding the deferred call
    "calls.deferred",
    "session.updated",  # waiting_external, lease released
    "run.stopped",
]
AFTER_CONTINUATION = [
    "tool.completed",  # the deferred call's end: its result was posted
    "session.updated",  # the result in, the running version
    "run.started",
    "session.updated",  # the final answer, stored with the status it leaves (idle, lease released)
    "run.stopped",
]


def events_only(frames: list[str]) -> list[str]:
    """The frames that are events or snapshots, without comments."""
    return [f for f in frames if not f.startswith(":")]


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def test_the_deferred_flow_on_the_session_stream(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    created = _post(server, "/v1/sessions", {"agent": "weather", "prompt": "Weather in Paris?", "run": "none"}).json()
    sid = created["session_id"]
    reader = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    assert reader.status == 200
    assert reader.response_headers["agents-replay"] == "live"
    assert reader.response_headers["content-type"].startswith("text/event-stream")
    reader.wait_for(lambda e: len(e) >= 1)
    assert _post(server, f"/v1/sessions/{sid}/resume").status_code == 202
    events = reader.wait_for(stopped_with("waiting_external"))
    snapshot, *rest = events
    assert snapshot["event"] == "snapshot" and snapshot["id"] is None
    assert snapshot["data"]["status"] == "ready" and snapshot["data"]["version"] == 1
    assert kinds(rest) == FIRST_RUN
    assert rest[0]["data"]["status"] == "running"
    assert rest[1]["data"]["mode"] == "until_blocked"
    deferred = rest[4]["data"]["calls"]
    assert [c["tool"] for c in deferred] == ["get_weather"]
    assert rest[5]["data"]["head_turn"]["tag"] == "PartialUserTurn"
    # every frame carries kind and seq in its data, and seq is the SSE id, increasing
    seqs = [int(e["id"]) for e in rest]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(e["data"]["kind"] == e["event"] and e["data"]["seq"] == int(e["id"]) for e in rest)
    assert all(e["data"]["session_id"] == sid and e["data"]["owner"] is None for e in rest)

    token = deferred[0]["continuation_token"]
    assert _post(server, f"/v1/continuations/{token}", {"result": "sunny"}).status_code in (200, 202)
    events = reader.wait_for(stopped_with("idle"))
    assert kinds(events[1 + len(FIRST_RUN) :]) == AFTER_CONTINUATION
    completed = events[1 + len(FIRST_RUN)]["data"]
    assert (completed["tool_call_id"], completed["tool"]) == (deferred[0]["call"]["id"], "get_weather")
    assert (completed["status"], completed["result"]) == ("completed", "sunny")
    assert events[-2]["data"]["status"] == "idle"
    assert events[-2]["data"]["head_turn"]["tag"] == "LlmTurn"
    reader.close()


def _slow_agent(tmp: Path, llm_server: Callable[..., MockLlmServer]) -> tuple[Path, MockLlmServer]:
    llm = llm_server(
        {
            "rules": [
                {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_slow", "arguments": {}}]}},
                {"reply": {"delay": 0.5, "content": "after the tool: {last_content}"}},
            ]
        }
    )
    tools = tmp / "tools"
    tools.mkdir(exist_ok=True)
    script = tools / "slow"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then echo \'{"slug": "slow", "description": "slow", "args": []}\'; exit 0; fi\n'
        "sleep 1; echo slept\n"
    )
    script.chmod(0o755)
    return write_agent(tmp, "slowpoke", llm.url, toolDirectory="tools"), llm


def test_reconnecting_with_last_event_id_loses_and_repeats_nothing(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    agent, _ = _slow_agent(tmp_path, llm_server)
    server = start_server([agent])
    sid = _post(server, "/v1/sessions", {"agent": "slowpoke", "prompt": "go", "run": "none"}).json()["session_id"]
    session_url = f"{server.url}/v1/sessions/{sid}/events"
    ws_url = server.url.replace("http", "ws") + f"/v1/ws/sessions/{sid}"
    steady = SseReader(session_url)
    steady_all = SseReader(f"{server.url}/v1/events")
    steady_ws = WsReader(ws_url)
    first = SseReader(session_url)
    first_all = SseReader(f"{server.url}/v1/events")
    first_ws = WsReader(ws_url)
    for reader in (steady, first):
        reader.wait_for(lambda e: len(e) == 1)
    for ws in (steady_ws, first_ws):
        ws.wait_for(lambda m: len(m) == 2)  # replay mode, snapshot

    assert _post(server, f"/v1/sessions/{sid}/resume").status_code == 202
    # drop the second clients in the middle of the run: once the tool has started
    first.wait_for(lambda e: "tool.started" in kinds(e))
    first.close()
    first_all.wait_for(lambda e: "tool.started" in kinds(e))
    first_all.close()
    first_ws.wait_for(lambda m: any(x.get("event") == "tool.started" for x in m))
    first_ws.close()
    seen, seen_all, seen_ws = first.raw(), first_all.raw(), first_ws.raw()
    last_id = [e for e in first.events() if e["id"]][-1]["id"]
    last_all = first_all.events()[-1]["id"]
    last_ws = json.loads(seen_ws[-1])["id"]

    # reconnect before the run ends, resuming from the last seq each one saw
    second = SseReader(session_url, headers={"Last-Event-ID": last_id})
    second_all = SseReader(f"{server.url}/v1/events", headers={"Last-Event-ID": last_all})
    second_ws = WsReader(f"{ws_url}?after={last_ws}")
    assert second.response_headers["agents-replay"] == "replayed"
    assert second_all.response_headers["agents-replay"] == "replayed"

    steady.wait_for(stopped_with("idle"))
    steady_all.wait_for(stopped_with("idle"))
    steady_ws.wait_for(lambda m: any(x.get("event") == "run.stopped" for x in m))
    second.wait_for(stopped_with("idle"))
    second_all.wait_for(stopped_with("idle"))
    second_ws.wait_for(lambda m: any(x.get("event") == "run.stopped" for x in m))
    # same seq, same order, same bytes

    assert seen + second.raw() == steady.raw()
    assert seen_all + second_all.raw() == steady_all.raw()
    assert json.loads(second_ws.raw()[0]) == {"event": "replay", "data": {"replay": "replayed"}}
    assert seen_ws + second_ws.raw()[1:] == steady_ws.raw()
    # the websocket sends the very data the SSE stream sends
    sse_data = [f.split("data: ", 1)[1] for f in steady.raw()[1:]]
    ws_data = [
        json.dumps(json.loads(m)["data"], ensure_ascii=False, separators=(",", ":")) for m in steady_ws.raw()[2:]
    ]
    assert ws_data == sse_data
    for reader in (steady, steady_all, second, second_all):
        reader.close()
    for ws in (steady_ws, second_ws):
        ws.close()


def test_replay_survives_a_server_restart_and_retention_answers_unavailable(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    agent, _ = _slow_agent(tmp_path, llm_server)
    server = start_server([agent])
    sid = _post(server, "/v1/sessions", {"agent": "slowpoke", "prompt": "go", "run": "none"}).json()["session_id"]
    url = f"/v1/sessions/{sid}/events"
    steady = SseReader(server.url + url)
    first = SseReader(server.url + url)
    first.wait_for(lambda e: len(e) == 1)
    _post(server, f"/v1/sessions/{sid}/resume")
    first.wait_for(lambda e: "run.started" in kinds(e))
    first.close()
    seen = first.raw()
    last_id = [e for e in first.events() if e["id"]][-1]["id"]
    steady.wait_for(stopped_with("idle"))
    server.stop()

    # a new server process on the same database
    restarted = start_server([agent], db=server.db, env={"AGENTS_PRUNE_EVERY_SECONDS": "1"})
    second = SseReader(restarted.url + url, headers={"Last-Event-ID": last_id})
    assert second.response_headers["agents-replay"] == "replayed"
    second.wait_for(stopped_with("idle"))
    assert events_only(seen + second.raw()) == events_only(steady.raw())
    second.close()
    restarted.stop()

    # a server that keeps events one second: the old position is gone, so a snapshot instead
    pruning = start_server(
        [agent], db=server.db, env={"AGENTS_PRUNE_EVERY_SECONDS": "1", "AGENTS_EVENT_RETENTION_SECONDS": "1"}
    )

    def gone() -> SseReader | None:
        reader = SseReader(pruning.url + url, headers={"Last-Event-ID": last_id})
        if reader.response_headers["agents-replay"] == "unavailable":
            return reader
        reader.close()
        time.sleep(0.5)
        return None

    third = wait_until(gone, timeout=60)
    events = third.wait_for(lambda e: len(e) >= 1)
    assert events[0]["event"] == "snapshot" and events[0]["data"]["status"] == "idle"
    third.close()
    # a position from the future (a different database, say) is unavailable too
    future = SseReader(pruning.url + url, headers={"Last-Event-ID": "999999"})
    assert future.response_headers["agents-replay"] == "unavailable"
    future.close()


def test_text_deltas_concatenate_to_the_answer_and_idle_streams_get_keepalives(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    answer = "Streaming works: every piece arrives before the turn is stored."
    llm = llm_server({"rules": [{"reply": {"content": answer}}]})
    agent = write_agent(tmp_path, "talker", llm.url)
    server = start_server([agent], extra_args=["--stream-tokens"], env={"AGENTS_SSE_KEEPALIVE_SECONDS": "1"})
    sid = _post(server, "/v1/sessions", {"agent": "talker", "prompt": "talk", "run": "none"}).json()["session_id"]
    reader = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    reader.wait_for(lambda e: len(e) == 1)
    _post(server, f"/v1/sessions/{sid}/resume")
    events = reader.wait_for(stopped_with("idle"))
    deltas = [e["data"]["text"] for e in events if e["event"] == "text.delta"]
    assert deltas
    assert "".join(deltas) == answer
    stored = [e for e in events if e["event"] == "session.updated" and e["data"]["head_turn"]["tag"] == "LlmTurn"][0]
    assert stored["data"]["head_turn"]["contents"]["llmResponse"]["responseText"] == answer
    # the deltas come before the turn is stored
    last_delta = max(i for i, e in enumerate(events) if e["event"] == "text.delta")
    assert last_delta < events.index(stored)
    assert llm.requests[-1]["stream"] is True
    # then silence: keepalive comments
    wait_until(lambda: reader.raw().count(": keepalive") >= 2, timeout=10)
    reader.close()


def test_two_servers_see_a_run_of_a_separate_worker_live(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    agent, _ = _slow_agent(tmp_path, llm_server)
    env = {"REDIS_URL": redis_url}
    first = start_server([agent], db=postgres_url, env=env)
    second = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    on_first = SseReader(f"{first.url}/v1/events")
    on_second = SseReader(f"{second.url}/v1/events")
    created = _post(first, "/v1/sessions", {"agent": "slowpoke", "prompt": "go"}).json()
    # while the run is still going, the other server's client already sees it
    seen = on_second.wait_for(lambda e: "tool.started" in kinds(e), timeout=30)
    assert second.client.get(f"/v1/sessions/{created['session_id']}").json()["status"] == "running"
    assert seen[0]["event"] == "session.created"
    on_first.wait_for(stopped_with("idle"))
    on_second.wait_for(stopped_with("idle"))
    assert events_only(on_first.raw()) == events_only(on_second.raw())
    # wait=true on the other server wakes up when the worker finishes a run
    again = _post(second, f"/v1/sessions/{created['session_id']}/messages?wait=true", {"prompt": "again"})
    assert again.status_code == 200 and again.json()["status"] == "idle"
    on_first.close()
    on_second.close()


class GroupListener:
    """A project's own listener: channels of the Redis channel layer (configured as the servers'
    settings configure it), each added to groups with ``group_add``; keeps what each receives."""

    def __init__(self, redis_url: str, groups: dict[str, list[str]]) -> None:
        self.layer = RedisPubSubChannelLayer(hosts=[redis_url])
        self.received: dict[str, list[dict[str, Any]]] = {name: [] for name in groups}
        self.joined = threading.Event()
        self.loop = asyncio.new_event_loop()
        self._groups = groups
        threading.Thread(target=self.loop.run_until_complete, args=(self._run(),), daemon=True).start()
        assert self.joined.wait(10), "the listener did not join its groups"

    async def _run(self) -> None:
        channels = {name: await self.layer.new_channel() for name in self._groups}
        for name, groups in self._groups.items():
            for group in groups:
                await self.layer.group_add(group, channels[name])
        self.joined.set()
        await asyncio.gather(*(self._receive(name, channel) for name, channel in channels.items()))

    async def _receive(self, name: str, channel: str) -> None:
        while True:
            self.received[name].append(await self.layer.receive(channel))


def test_a_projects_own_listener_in_a_sessions_group_hears_a_run_in_another_process(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    agent, _ = _slow_agent(tmp_path, llm_server)
    env = {"REDIS_URL": redis_url}
    first = start_server([agent], db=postgres_url, env=env)
    second = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    body = {"agent": "slowpoke", "prompt": "go", "run": "none"}
    sid = _post(first, "/v1/sessions", body).json()["session_id"]
    quiet = _post(first, "/v1/sessions", body).json()["session_id"]
    listener = GroupListener(redis_url, {"run": [session_group(sid)], "quiet": [session_group(quiet)]})
    # the run is asked for on the second server and made by the worker: neither is this process
    answer = _post(second, f"/v1/sessions/{sid}/messages?wait=true", {"prompt": "again"})
    assert answer.status_code == 200 and answer.json()["status"] == "idle"
    stored = SseReader(f"{first.url}/v1/sessions/{sid}/events?after=0")
    seqs = {int(e["id"]) for e in stored.wait_for(stopped_with("idle"))}
    stored.close()
    wait_until(lambda: any(m["seq"] == max(seqs) for m in listener.received["run"]), timeout=10)
    heard = listener.received["run"]
    assert {m["type"] for m in heard} == {SESSION_CHANGED}
    assert {m["session_id"] for m in heard} == {sid}
    # a wake-up names an event that is in the database, newer ones after older ones
    woken = [m["seq"] for m in heard if m["seq"] is not None]
    assert set(woken) <= seqs and woken == sorted(woken)
    # the other session's group heard nothing of this run
    time.sleep(0.5)
    assert listener.received["quiet"] == []
