"""Prometheus metrics (issue 27, acceptance 2; docs/observability.md §2): a real Prometheus
scrapes two servers and two workers during a load run, and the counters it reads equal the
runs, steps, tool calls and tokens of that load; ``/metrics`` of the API is for admin owners."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from devtools.mockllm import MockLlmServer
from tests.harness import Server, free_port, wait_until, write_agent, write_tool
from tests.owners import owner, write_tokens
from tests.streams import SseReader

SCRIPT = {"rules": [
    {"when": {"last_role": "user"}, "reply": {"content": "", "tool_calls": [
        {"name": "bash_echo", "arguments": {"text": "one"}},
        {"name": "bash_echo", "arguments": {"text": "two"}},
    ]}},
    {"reply": {"content": "echoed: {last_content}"}},
]}
RUNS = 6


def _agent(tmp: Path, model_url: str) -> Path:
    arg = {"name": "text", "description": "a text", "type": "string", "backing_type": "string",
           "arity": "single", "mode": "positional"}
    write_tool(tmp / "tools", "echo", {"slug": "echo", "description": "echoes", "args": [arg]}, 'echo "echo $1"')
    return write_agent(tmp, "loader", model_url, toolDirectory="tools")


def _metrics_port(process: Any) -> int:
    def port() -> int | None:
        for line in process.output().splitlines():
            if '"metrics.listening"' in line:
                return int(json.loads(line)["port"])
        return None

    return int(wait_until(port, 60))


def _prometheus(tmp: Path, targets: list[str], processes: Any) -> str:
    """Prometheus from Debian's package, with its own config and storage in ``tmp``."""
    binary = shutil.which("prometheus")
    assert binary, "install Debian's prometheus package (apt-get install -y prometheus)"
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "agents", "static_configs": [{"targets": targets}]}],
    }))
    port = free_port()
    processes.popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(tmp / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, 60)
    return url


def _query(url: str, expression: str) -> float:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expression}, timeout=5).json()
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _tokens(view: dict[str, Any]) -> tuple[int, int]:
    used = [turn["contents"]["llmResponse"]["responseTokenUsage"] for turn in view["session"]["turns"]
            if turn["tag"] == "LlmTurn"]
    return sum(u["prompt_tokens"] for u in used), sum(u["completion_tokens"] for u in used)


def test_prometheus_scrapes_two_servers_and_two_workers_and_counts_the_load(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Any],
    postgres_url: str,
    redis_url: str,
    processes: Any,
) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url, "AGENTS_METRICS_PORT": "0"}
    servers = [start_server([agent], db=postgres_url, env=env) for _ in range(2)]
    workers = [start_worker([agent], db=postgres_url, env=env) for _ in range(2)]
    ports = [_metrics_port(p.process) for p in [*servers, *workers]]
    prometheus = _prometheus(tmp_path, [f"127.0.0.1:{port}" for port in ports], processes)
    wait_until(lambda: _query(prometheus, 'count(up{job="agents"} == 1)') == 4, 60)

    views = []
    for index in range(RUNS):
        server = servers[index % 2]
        answer = server.client.post("/v1/sessions?wait=true&timeout=60",
                                    content=json.dumps({"agent": "loader", "prompt": f"echo twice, run {index}"}))
        assert answer.status_code == 201 and answer.json()["status"] == "idle", answer.text
        views.append(answer.json())
    tokens_in = sum(_tokens(view)[0] for view in views)
    tokens_out = sum(_tokens(view)[1] for view in views)
    # each run: the model asks for two calls, both run in one step, the model answers
    expected = {
        'sum(agents_runs_started_total{agent="loader"})': RUNS,
        'sum(agents_runs_finished_total{agent="loader",outcome="idle"})': RUNS,
        'sum(agents_steps_total{agent="loader",kind="model"})': 2 * RUNS,
        'sum(agents_steps_total{agent="loader",kind="tools"})': RUNS,
        'sum(agents_step_seconds_count{agent="loader"})': 3 * RUNS,
        'sum(agents_model_call_seconds_count{agent="loader"})': 2 * RUNS,
        'sum(agents_tool_calls_total{kind="bash",outcome="completed"})': 2 * RUNS,
        'sum(agents_tool_call_seconds_count{kind="bash"})': 2 * RUNS,
        'sum(agents_tokens_total{agent="loader",direction="input"})': tokens_in,
        'sum(agents_tokens_total{agent="loader",direction="output"})': tokens_out,
        "max(agents_deferred_calls_waiting)": 0,
    }
    assert tokens_in > 0 and tokens_out > 0

    def counted() -> bool:
        return all(_query(prometheus, expression) == value for expression, value in expected.items())

    try:
        wait_until(counted, 30, interval=0.5)
    except AssertionError:
        seen = {expression: _query(prometheus, expression) for expression in expected}
        raise AssertionError(f"Prometheus read {seen}, expected {expected}") from None
    # both workers took runs: the sums are over processes, not one process's counts
    per_worker = [_query(prometheus, f'sum(agents_runs_started_total{{instance="127.0.0.1:{port}"}})')
                  for port in ports[2:]]
    assert sum(per_worker) == RUNS


def test_metrics_of_the_api_are_for_admin_owners(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    args = ["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"]
    server = start_server([_agent(tmp_path, llm.url)], extra_args=args)
    refused = server.client.get("/metrics", headers=owner("alice"))
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden", refused.text
    assert server.client.get("/metrics").status_code == 401
    stream = SseReader(f"{server.url}/v1/events", headers=owner("alice"))
    try:
        wait_until(lambda: stream.response_headers, 30)
        answer = server.client.post("/v1/sessions?wait=true&timeout=60", headers=owner("alice"),
                                    content=json.dumps({"agent": "loader", "prompt": "echo"}))
        assert answer.status_code == 201, answer.text
        stream.wait_for(lambda events: "run.stopped" in [event["event"] for event in events])
    finally:
        stream.close()
    scraped = server.client.get("/metrics", headers=owner("root"))
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    # the embedded worker runs in the server: its counts are the server's
    assert 'agents_runs_started_total{agent="loader"} 1.0' in scraped.text
    assert "agents_deferred_calls_waiting 0.0" in scraped.text
    # the stream was handed the run's events live: each hand-over's delay observed
    [count] = [line for line in scraped.text.splitlines() if line.startswith("agents_event_fanout_seconds_count")]
    assert float(count.split()[-1]) >= 3


def test_no_metrics_listener_unless_asked(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([_agent(tmp_path, llm.url)])
    assert '"metrics.listening"' not in server.process.output()
    # authentication off: nobody is an admin owner, /metrics is refused
    assert server.client.get("/metrics").status_code == 403
