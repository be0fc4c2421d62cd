"""Usage that adds up (issue 27, acceptance 3; docs/sessions.md §1.11, docs/api.md §7.17): 20
runs of two owners' sessions against a scripted model that reports its token usage, through a
real ``agents serve``. The session answers, their exports and ``GET /v1/usage`` per agent, owner
and day add up to the model's numbers; every new user turn carries agents-exe's ``byteUsage``;
bad queries are refused with the documented codes. On a scaled-out fleet (PostgreSQL, Redis, a
worker) with streamed answers, the usage chunk the stream was asked for adds up per day too."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import owner, write_tokens

SESSIONS = 10
#: Two messages a session: 20 runs.
MESSAGES = ("first", "second")
AGENTS = ("alpha", "beta")
OWNERS = ("alice", "bob")


def _tokens(session: int, message: int) -> dict[str, int]:
    """The usage the model reports for one answer: different for every answer."""
    n = session * 2 + message
    return {"prompt_tokens": 1000 + 37 * n, "completion_tokens": 50 + 11 * n, "cached_tokens": 7 * n}


def _script() -> dict[str, Any]:
    rules = []
    for session in range(SESSIONS):
        for message, word in enumerate(MESSAGES):
            rules.append(
                {
                    "when": {"last_contains": f"q-{session:02d}-{word}"},
                    "reply": {"content": f"answer {session} {word}", "usage": _tokens(session, message)},
                }
            )
    return {"rules": rules}


def _agent_of(session: int) -> str:
    return AGENTS[session % 2]


def _owner_of(session: int) -> str:
    return OWNERS[(session // 2) % 2]


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _run_all(server: Server) -> dict[int, str]:
    ids = {}
    for session in range(SESSIONS):
        headers = owner(_owner_of(session))
        created = server.client.post(
            "/v1/sessions?wait=true",
            headers=headers,
            content=json.dumps({"agent": _agent_of(session), "prompt": f"q-{session:02d}-first"}),
        )
        assert created.status_code == 201 and created.json()["status"] == "idle", created.text
        ids[session] = created.json()["session_id"]
        answered = server.client.post(
            f"/v1/sessions/{ids[session]}/messages?wait=true",
            headers=headers,
            content=json.dumps({"prompt": f"q-{session:02d}-second"}),
        )
        assert answered.status_code == 200 and answered.json()["status"] == "idle", answered.text
    return ids


def _expected(sessions: list[int]) -> dict[str, int]:
    answers = [_tokens(s, m) for s in sessions for m in range(len(MESSAGES))]
    return {
        "input_tokens": sum(a["prompt_tokens"] for a in answers),
        "output_tokens": sum(a["completion_tokens"] for a in answers),
        "cached_tokens": sum(a["cached_tokens"] for a in answers),
        "total_tokens": sum(a["prompt_tokens"] + a["completion_tokens"] for a in answers),
        "model_turns": len(answers),
        "sessions": len(set(sessions)),
    }


def test_twenty_runs_add_up_per_session_agent_owner_and_day(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script())
    agents = [write_agent(tmp_path, slug, llm.url) for slug in AGENTS]
    tokens = write_tokens(tmp_path)
    server = start_server(agents, extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"])
    before = datetime.now(UTC).date().isoformat()
    ids = _run_all(server)
    assert len(llm.requests) == SESSIONS * len(MESSAGES)

    for session, session_id in ids.items():
        headers = owner(_owner_of(session))
        view = server.client.get(f"/v1/sessions/{session_id}", headers=headers).json()
        want = _expected([session])
        usage = view["usage"]
        assert (usage["inputTokens"], usage["outputTokens"], usage["cachedTokens"], usage["modelTurns"]) == (
            want["input_tokens"],
            want["output_tokens"],
            want["cached_tokens"],
            2,
        ), usage
        turns = view["session"]["turns"]
        # the byte totals are the turns' own byteUsage added up
        assert usage["totalBytes"] == sum(t["byteUsage"]["stepTotalBytes"] for t in turns)
        assert usage["inputBytes"] == sum(t["byteUsage"]["stepInputBytes"] for t in turns) > 0
        users = [t for t in turns if t["tag"] == "UserTurn"]
        assert len(users) == 2
        for turn in users:
            contents = turn["contents"]
            byte_usage = turn["byteUsage"]
            assert list(byte_usage) == [
                "stepInputBytes",
                "stepOutputBytes",
                "stepReasoningBytes",
                "stepToolBytes",
                "stepTotalBytes",
            ]
            query = contents["userQuery"]
            prompt_and_query = 4 * (len(contents["userPrompt"]) + len(query))
            tools = sum(_json_bytes(tool) for tool in contents["userTools"])
            assert byte_usage["stepInputBytes"] == prompt_and_query + tools, (byte_usage, query)
            assert byte_usage["stepOutputBytes"] == byte_usage["stepReasoningBytes"] == byte_usage["stepToolBytes"] == 0
            assert byte_usage["stepTotalBytes"] == byte_usage["stepInputBytes"]
        # the model answers keep the provider's usage where agents-exe does
        for turn in (t for t in turns if t["tag"] == "LlmTurn"):
            step = turn["byteUsage"]["stepTokenUsage"]
            assert step == turn["contents"]["llmResponse"]["responseTokenUsage"]
            assert "cached_tokens" in step["prompt_tokens_details"]

        # the export is the document as is, unless usage=true adds the totals beside the turns
        exported = server.client.get(f"/v1/sessions/{session_id}/export", headers=headers).json()
        assert "usage" not in exported and exported["turns"] == turns
        with_usage = server.client.get(f"/v1/sessions/{session_id}/export?usage=true", headers=headers).json()
        assert with_usage["usage"] == usage and with_usage["turns"] == turns

    # per agent, each owner sees their own sessions only
    for name in OWNERS:
        mine = [s for s in ids if _owner_of(s) == name]
        report = server.client.get("/v1/usage", headers=owner(name)).json()
        assert report["group_by"] == "agent"
        assert report["totals"] == _expected(mine)
        by_agent = {row["key"]: {k: v for k, v in row.items() if k != "key"} for row in report["rows"]}
        assert by_agent == {slug: _expected([s for s in mine if _agent_of(s) == slug]) for slug in AGENTS}
        one_agent = server.client.get("/v1/usage?agent=beta", headers=owner(name)).json()
        assert one_agent["totals"] == _expected([s for s in mine if _agent_of(s) == "beta"])

    # an admin owner's scope=all: everyone, per owner and per day
    everyone = server.client.get("/v1/usage?group_by=owner&scope=all", headers=owner("root")).json()
    assert everyone["totals"] == _expected(list(ids))
    by_owner = {row["key"]: row["model_turns"] for row in everyone["rows"]}
    assert by_owner == dict(Counter(_owner_of(s) for s in ids for _ in MESSAGES))
    assert server.client.get("/v1/usage?scope=all", headers=owner("root")).json()["totals"] == _expected(list(ids))
    days = server.client.get(f"/v1/usage?group_by=day&scope=all&since={before}", headers=owner("root")).json()
    today = datetime.now(UTC).date().isoformat()
    assert [row["key"] for row in days["rows"]] in ([today], [before, today][-len(days["rows"]) :])
    assert days["totals"] == _expected(list(ids))
    future = server.client.get("/v1/usage?scope=all&since=2999-01-01", headers=owner("root")).json()
    assert future["rows"] == [] and future["totals"]["model_turns"] == 0


def test_bad_usage_queries_are_refused_with_their_codes(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "ok", "usage": {"prompt_tokens": 5, "completion_tokens": 2}}}]})
    tokens = write_tokens(tmp_path)
    server = start_server(
        [write_agent(tmp_path, "alpha", llm.url)], extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"]
    )
    created = server.client.post(
        "/v1/sessions?wait=true",
        headers=owner("alice"),
        content=json.dumps({"agent": "alpha", "prompt": "hi", "session_token": True}),
    )
    assert created.status_code == 201, created.text
    session_token = created.json()["session_token"]
    cases = [
        ("/v1/usage?group_by=model", owner("alice"), 400, "bad_request", "group_by must be one of agent, owner, day"),
        ("/v1/usage?since=yesterday", owner("alice"), 400, "bad_request", "since must be"),
        ("/v1/usage?until=2026-13-01", owner("alice"), 400, "bad_request", "until must be"),
        ("/v1/usage?since=2026-12-01T10:00:00", owner("alice"), 400, "bad_request", "with a time zone"),
        ("/v1/usage?scope=everyone", owner("alice"), 400, "bad_request", "scope must be owner or all"),
        ("/v1/usage?scope=all", owner("alice"), 403, "forbidden", "scope=all is for admin owners"),
        ("/v1/usage", {"Authorization": f"Bearer {session_token}"}, 401, "unauthorized", ""),
        ("/v1/usage", {}, 401, "unauthorized", ""),
    ]
    for path, headers, status, code, words in cases:
        answer = server.client.get(path, headers=headers)
        assert answer.status_code == status, (path, answer.text)
        error = answer.json()
        assert error["error"] == code and words in error["message"], (path, error)
    # the refusals changed nothing: alice's one answer is still all there is
    report = server.client.get("/v1/usage", headers=owner("alice")).json()
    assert report["totals"]["input_tokens"] == 5 and report["totals"]["model_turns"] == 1
    # bob sees none of it
    assert server.client.get("/v1/usage", headers=owner("bob")).json()["rows"] == []


def test_streamed_answers_on_a_scaled_out_fleet_add_up_per_day(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Any],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(_script())
    agents = [write_agent(tmp_path, slug, llm.url) for slug in AGENTS]
    env = {"REDIS_URL": redis_url, "AGENTS_STREAM_TOKENS": "true"}
    server = start_server(agents, db=postgres_url, env=env)
    start_worker(agents, db=postgres_url, env=env)
    runs = 3
    for session in range(runs):
        created = server.client.post(
            "/v1/sessions?wait=true",
            content=json.dumps({"agent": _agent_of(session), "prompt": f"q-{session:02d}-first"}),
        )
        assert created.status_code == 201 and created.json()["status"] == "idle", created.text
        usage = created.json()["usage"]
        want = _tokens(session, 0)
        assert (usage["inputTokens"], usage["outputTokens"], usage["cachedTokens"]) == (
            want["prompt_tokens"],
            want["completion_tokens"],
            want["cached_tokens"],
        )
    # every answer was streamed, asking for the usage chunk
    assert all(body.get("stream") is True for body in llm.requests)
    assert all(body.get("stream_options") == {"include_usage": True} for body in llm.requests)
    days = server.client.get("/v1/usage?group_by=day").json()
    today = datetime.now(UTC).date().isoformat()
    first_answers = [_tokens(s, 0) for s in range(runs)]
    inputs = sum(a["prompt_tokens"] for a in first_answers)
    outputs = sum(a["completion_tokens"] for a in first_answers)
    want_totals = {
        "input_tokens": inputs,
        "output_tokens": outputs,
        "cached_tokens": sum(a["cached_tokens"] for a in first_answers),
        "total_tokens": inputs + outputs,
        "model_turns": runs,
        "sessions": runs,
    }
    assert days["totals"] == want_totals
    assert [row["key"] for row in days["rows"]] == [today] and days["rows"][0]["model_turns"] == runs
