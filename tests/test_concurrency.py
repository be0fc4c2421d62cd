"""``maxConcurrency`` (issue 16, acceptance 1): a session's background calls never execute more
at once than the agent allows, counted in the database across every worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness import Server, write_agent, write_tool

SCRIPT = {"rules": [
    {"when": {"last_role": "user"},
     "reply": {"content": "", "tool_calls": [
         {"name": "bash_nap", "arguments": {"n": "1"}},
         {"name": "bash_nap", "arguments": {"n": "2"}},
         {"name": "bash_nap", "arguments": {"n": "3"}},
     ]}},
    {"reply": {"content": "all napped"}},
]}


def _agent(tmp_path: Path, model_url: str, **extra) -> tuple[Path, Path]:
    log = tmp_path / "naps.log"
    describe = {"slug": "nap", "description": "naps a second",
                "args": [{"name": "n", "description": "which", "type": "string", "backing_type": "string",
                         "arity": "single", "mode": "positional"}]}
    body = f'echo "start $$ $(date +%s.%N)" >> {log}; sleep 1; echo "end $$ $(date +%s.%N)" >> {log}; echo "nap $1"'
    write_tool(tmp_path / "tools", "nap", describe, body)
    agent = write_agent(
        tmp_path, "napper", model_url, toolDirectory="tools", executionMode="asynchronous",
        toolCallPolicyConfig={"default": {"tag": "runAsync"}, "rules": []}, **extra,
    )
    return agent, log


def _intervals(log: Path) -> list[tuple[float, float]]:
    """(start, end) of each call, by the pid of its process, in the order they started."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for line in log.read_text().splitlines():
        what, pid, at = line.split()
        (starts if what == "start" else ends)[pid] = float(at)
    assert starts.keys() == ends.keys() and len(starts) == 3
    return sorted((starts[pid], ends[pid]) for pid in starts)


def _nap(server: Server) -> dict:
    view = server.client.post("/v1/sessions?wait=true&timeout=60", content=json.dumps(
        {"agent": "napper", "prompt": "nap three times"})).json()
    assert view["status"] == "idle", view
    results = [r[1] for r in view["session"]["turns"][1]["contents"]["userToolResponses"]]
    assert results == ["nap 1\n", "nap 2\n", "nap 3\n"]
    return view


def _one_at_a_time(intervals: list[tuple[float, float]]) -> None:
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert start >= end, intervals
    assert intervals[-1][1] - intervals[0][0] >= 3.0


def _overlapping(intervals: list[tuple[float, float]]) -> bool:
    return any(start < end for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False))


def test_max_concurrency_one_runs_the_calls_one_after_another_across_two_workers(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server(SCRIPT)
    agent, log = _agent(tmp_path, llm.url, maxConcurrency=1)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    _nap(server)
    _one_at_a_time(_intervals(log))


@pytest.mark.parametrize("limit", [1, None])
def test_max_concurrency_embedded(tmp_path, llm_server, start_server, limit: int | None) -> None:
    llm = llm_server(SCRIPT)
    extra = {"maxConcurrency": limit} if limit is not None else {}
    agent, log = _agent(tmp_path, llm.url, **extra)
    server = start_server([agent])
    _nap(server)
    intervals = _intervals(log)
    if limit == 1:
        _one_at_a_time(intervals)
    else:
        # the default (4): the three calls run side by side
        assert _overlapping(intervals), intervals


def test_max_concurrency_must_be_positive(tmp_path) -> None:
    from agentfiles.loader import AgentLoadError, load_agent_tree

    agent, _ = _agent(tmp_path, "http://127.0.0.1:1/v1", maxConcurrency=0)
    with pytest.raises(AgentLoadError, match=r"maxConcurrency: .*greater than or equal to 1"):
        load_agent_tree(agent)
